"""Link extraction from an HTML page (pure; runs in a parse worker process).

:func:`extract_links` takes and returns plain picklable values so it can be shipped to a
process pool. Its cost is bounded on hostile input: the body is truncated, and before the
HTML parser sees it every tag that cannot carry a link is stripped (see :func:`_flatten`).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from selectolax.lexbor import LexborAttributes, LexborHTMLParser

from crawler_node.urls import InvalidURL, normalize_url

MAX_PARSE_BYTES = 5_000_000
MAX_TITLE_CHARS = 1_000
# A link-bearing tag with more characters than this is dropped whole (see _flatten).
MAX_TAG_CHARS = 2_048
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_FOLLOWED_LINK_RELS = frozenset({"alternate", "next", "prev", "canonical"})
_LINK_SELECTOR = "a[href], area[href], link[href], iframe[src], frame[src], meta[http-equiv]"

# Lexbor's tree builder is quadratic in some inputs a hostile page can cheaply produce:
# 40k nested <div>s take 1.5 s (each block start tag scans the open-element stack), a
# <span> stack followed by many <div></div> pairs, <a><b> repeated (adoption agency), one
# tag with 20k attributes (0.5 s). None of those tags carry links, so before parsing we
# drop every tag except the link-bearing ones, and comments and raw-text elements with
# their content (links in scripts or comments are not links), in linear regex passes.
# Lexbor then parses a flat document, whose cost is linear. Quoted attribute values are
# matched as units so a ">" inside quotes does not end a tag early.
_KEPT_TAGS = ("a", "area", "link", "iframe", "frame", "frameset", "base", "meta", "title")
_RAW_TEXT_TAGS = ("script", "style", "textarea", "xmp", "noembed", "noframes", "template")
_TAG_BODY = r"""(?:[^<>"']+|"[^"]*"|'[^']*')*>?"""


def _any_case(name: str) -> str:
    # Explicit [aA] classes instead of re.IGNORECASE, which makes these passes ~2x slower.
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name)


_KEPT_NAMES = "|".join(_any_case(name) for name in _KEPT_TAGS)
_UNNEEDED_MARKUP = re.compile(
    r"<!--.*?(?:-->|\Z)|"
    + "|".join(rf"<{_any_case(n)}(?=[\s/>]).*?(?:</{_any_case(n)}\s*>|\Z)" for n in _RAW_TEXT_TAGS)
    + rf"|<(?!/?(?:{_KEPT_NAMES})[\s/>])[/!?]?[A-Za-z]{_TAG_BODY}",
    re.DOTALL,
)
# Matches a whole link tag and never fails once started, so a scan never restarts inside
# a long quoted value (a pattern that could fail would rescan it from every "<a").
_KEPT_TAG = re.compile(rf"</?(?:{_KEPT_NAMES})(?=[\s/>]){_TAG_BODY}", re.DOTALL)

_META_CHARSET = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.I)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# WHATWG Encoding Standard labels whose meaning differs from Python's codec of that name.
_ENCODING_ALIASES = {
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "gb2312": "gbk",
    "x-sjis": "shift_jis",
    "utf-16": "utf-8",  # a meta tag cannot truthfully declare UTF-16 (it was read as ASCII)
}
_REFRESH = re.compile(r"\s*[\d.]+\s*[;,]?\s*(?:url\s*=\s*)?(.*)", re.IGNORECASE | re.DOTALL)


class LinkMemo:
    """Links already normalised, for the pages still to come.

    The same navigation links appear on every page of a site, and normalising one costs more
    than finding it. Only links whose canonical form depends on nothing but their own text
    and the base's origin are remembered (root-relative and absolute ones, about half of
    them); a relative path depends on the page's own path, so it is normalised every time.
    Exact: the memo holds what `normalize_url` returned for the same inputs. Bounded: it
    starts over when full."""

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._known: dict[tuple[str, str], str | None] = {}

    def normalize(self, raw: str, base: str, origin: str) -> str | None:
        """`normalize_url(raw, base)`, or None when that raises InvalidURL."""
        memorable = raw.startswith("/") or _ABSOLUTE.match(raw) is not None
        if memorable:
            key = (raw, origin)
            try:
                return self._known[key]
            except KeyError:
                pass
        try:
            url: str | None = normalize_url(raw, base)
        except InvalidURL:
            url = None
        if memorable:
            if len(self._known) >= self.capacity:
                self._known.clear()
            self._known[key] = url
        return url


def _origin(url: str) -> str:
    """`scheme://host[:port]` of a canonical URL."""
    end = url.find("/", url.find("://") + 3)
    return url if end < 0 else url[:end]


@dataclass(slots=True)
class ParsedPage:
    links: list[str]
    title: str | None
    nofollow: bool


def extract_links(
    body: bytes,
    url: str,
    *,
    max_links: int = 5000,
    encoding: str | None = None,
    max_parse_bytes: int = MAX_PARSE_BYTES,
    memo: LinkMemo | None = None,
) -> ParsedPage:
    """Canonical, deduplicated outgoing links of the page at ``url`` (in document order).

    ``encoding`` is the charset from the HTTP Content-Type, if any. Invalid or non-http(s)
    links are dropped silently. Raises :class:`InvalidURL` only if ``url`` itself is invalid.
    """
    page_url = normalize_url(url)
    text = _flatten(decode_html(body[:max_parse_bytes], encoding))
    tree = LexborHTMLParser(text)
    title = _title(tree)
    if _page_is_nofollow(tree):
        return ParsedPage(links=[], title=title, nofollow=True)
    base = _base_url(tree, page_url)
    links = _collect_links(tree, base, max_links, memo if memo is not None else LinkMemo())
    return ParsedPage(links=links, title=title, nofollow=False)


def decode_html(body: bytes, encoding: str | None = None) -> str:
    """Decode a page: BOM, then the HTTP charset, then a ``<meta>`` charset, then UTF-8."""
    for bom, bom_encoding in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(bom_encoding, errors="replace")
    for candidate in (encoding, _meta_charset(body)):
        codec = _codec_name(candidate)
        if codec is not None:
            return body.decode(codec, errors="replace")
    return body.decode("utf-8", errors="replace")


def _meta_charset(body: bytes) -> str | None:
    # The HTML standard's prescan looks at the first 1024 bytes only; so do we.
    match = _META_CHARSET.search(body, 0, 1024)
    return match.group(1).decode("ascii") if match else None


def _codec_name(label: str | None) -> str | None:
    if not label:
        return None
    label = label.strip().lower()
    label = _ENCODING_ALIASES.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None  # an unknown charset label is ignored, as browsers do


def _flatten(text: str) -> str:
    # Removed markup becomes a space, so the text on both sides of it does not fuse.
    return _KEPT_TAG.sub(_drop_oversized, _UNNEEDED_MARKUP.sub(" ", text))


def _drop_oversized(match: re.Match[str]) -> str:
    # A link tag this long is an attribute flood (or a data: URI we would reject anyway).
    tag = match.group()
    return tag if len(tag) <= MAX_TAG_CHARS else " "


def _title(tree: LexborHTMLParser) -> str | None:
    node = tree.css_first("title")
    if node is None:
        return None
    title = " ".join(node.text().split())[:MAX_TITLE_CHARS]
    return title or None


def _page_is_nofollow(tree: LexborHTMLParser) -> bool:
    for node in tree.css("meta[name]"):
        attrs = node.attrs
        if (attrs.get("name") or "").strip().lower() != "robots":
            continue
        directives = {d.strip() for d in (attrs.get("content") or "").lower().split(",")}
        if "nofollow" in directives or "none" in directives:
            return True
    return False


def _base_url(tree: LexborHTMLParser, page_url: str) -> str:
    node = tree.css_first("base[href]")
    if node is None:
        return page_url
    try:
        return normalize_url(node.attrs.get("href") or "", page_url)
    except InvalidURL:
        return page_url  # a javascript: or broken <base> is ignored, as browsers do


def _collect_links(tree: LexborHTMLParser, base: str, max_links: int, memo: LinkMemo) -> list[str]:
    links: dict[str, None] = {}  # an ordered set
    seen_raw: set[str] = set()
    # Junk (javascript:, mailto:, broken) costs a normalisation each; bound that work too.
    budget = max(4 * max_links, 1_000)
    origin = _origin(base)
    for node in tree.css(_LINK_SELECTOR):
        if len(links) >= max_links or budget <= 0:
            break
        raw = _link_target(node.tag or "", node.attrs)
        if not raw or raw in seen_raw:
            continue
        seen_raw.add(raw)
        budget -= 1
        url = memo.normalize(raw, base, origin)
        if url is not None:
            links[url] = None
    return list(links)


def _link_target(tag: str, attrs: LexborAttributes) -> str | None:
    """The raw URL a followable element points to, or None."""
    if tag in ("a", "area"):
        rel = attrs.get("rel")  # most links have none: no token set to build
        return None if rel and "nofollow" in rel.lower().split() else _stripped(attrs.get("href"))
    if tag == "link":
        rels = _rel_tokens(attrs)
        if "nofollow" in rels or not rels & _FOLLOWED_LINK_RELS:
            return None
        return _stripped(attrs.get("href"))
    if tag in ("iframe", "frame"):
        return _stripped(attrs.get("src"))
    if tag == "meta" and (attrs.get("http-equiv") or "").strip().lower() == "refresh":
        return refresh_url(attrs.get("content") or "")
    return None


def _rel_tokens(attrs: LexborAttributes) -> set[str]:
    return set((attrs.get("rel") or "").lower().split())


def _stripped(value: str | None) -> str | None:
    return value.strip() if value else None


def refresh_url(content: str) -> str | None:
    """The URL of a ``<meta http-equiv=refresh content=...>``, per the HTML standard's parsing."""
    match = _REFRESH.match(content)
    if match is None:
        return None
    target = match.group(1).strip()
    if target[:1] in ("'", '"'):
        quote = target[0]
        end = target.find(quote, 1)
        target = target[1:] if end < 0 else target[1:end]
    return target or None
