"""Link extraction from an HTML page (pure; runs in a parse worker process).

:func:`extract_links` takes and returns plain picklable values so it can be shipped to a
process pool. Its cost is bounded on hostile input: the body is truncated, and before the
HTML parser sees it every tag that cannot carry a link is stripped (see :func:`_flatten`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawler_node.core.urls import InvalidURL, directory_of, normalize_url, origin_of, resolve_plain
from crawler_node.parse.charset import DecodedText, decode_document, url_query_codec

MAX_PARSE_BYTES = 5_000_000
MAX_TITLE_CHARS = 1_000
# A link-bearing tag with more characters than this is dropped whole (see _flatten).
MAX_TAG_CHARS = 2_048
# Which part of the base a link's canonical form depends on, told by how the link starts
# (see _memo_context). Group 1: "/" or an absolute URL's "scheme://". Otherwise a relative
# path: a first segment that is not empty and has no colon, so no scheme and no authority
# (a "\" in it is a "/" to the URL parser, which makes it at most root-relative); it starts
# with a character URL parsing does not strip.
_MEMO_CONTEXT = re.compile(r"(/|[A-Za-z][A-Za-z0-9+.\-]*://)|[^:/?#\x00-\x20][^:/?#]*+(?!:)")


class _MemoMiss(enum.Enum):
    """A memo miss (None is a remembered answer: an invalid link). An enum rather than an
    object(): `url is _UNKNOWN` then narrows the lookup's type for mypy, at the same cost."""

    UNKNOWN = enum.auto()


_UNKNOWN: Final = _MemoMiss.UNKNOWN
_FOLLOWED_LINK_RELS = frozenset({"alternate", "next", "prev", "canonical"})
# Elements that can carry a followed link (see _link_target).
_LINK_TAGS = frozenset({"a", "area", "link", "iframe", "frame", "meta"})
_SCANNED = ", ".join([*sorted(_LINK_TAGS), "base", "title"])  # what _scan reads

# Lexbor's tree builder is quadratic in some inputs a hostile page can cheaply produce:
# 40k nested <div>s take 1.5 s (each block start tag scans the open-element stack), a
# <span> stack followed by many <div></div> pairs, <a><b> repeated (adoption agency), one
# tag with 20k attributes (0.5 s). None of those tags carry links, so before parsing we
# drop every tag except the link-bearing ones, and comments and raw-text elements with
# their content (links in scripts or comments are not links), in linear regex passes.
# Lexbor then parses a flat document, whose cost is linear. Quoted attribute values are
# matched as units so a ">" inside quotes does not end a tag early. The quantifiers are
# possessive (no backtracking state is saved): what follows a tag body always matches, so
# the engine would never backtrack into it anyway.
_KEPT_TAGS = ("a", "area", "link", "iframe", "frame", "frameset", "base", "meta", "title")
_RAW_TEXT_TAGS = ("script", "style", "textarea", "xmp", "noembed", "noframes", "template")
_TAG_BODY = r"""(?:[^<>"']++|"[^"]*+"|'[^']*+')*+>?"""


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

# Bounds within which a page is parsed as it is (see _parses_linearly).
_DIRECT_MAX_CHARS = 65_536
_DIRECT_MAX_TAGS = 1_500
_DIRECT_MAX_SEGMENT = 256
_LONG_SEGMENT = re.compile(f"<[^>]{{{_DIRECT_MAX_SEGMENT}}}")
# A quoted attribute value (after "=" and whitespace: the only place a quote starts one) with a
# "<" or ">" in it, or that is not closed before one.
_ANGLE_IN_QUOTES = re.compile(r"""=\s*+(?:"[^"<>]*+[<>]|'[^'<>]*+[<>])""")

_REFRESH = re.compile(r"\s*[\d.]+\s*[;,]?\s*(?:url\s*=\s*)?(.*)", re.IGNORECASE | re.DOTALL)


class LinkMemo:
    """Links already normalised, for the pages still to come.

    The same navigation links appear on every page of a site, and normalising one costs more
    than finding it. A link is remembered under the part of the base its canonical form
    depends on (see :func:`_memo_context`): the origin for root-relative and absolute links,
    the base's directory for relative paths, which recur on the pages of one directory.
    Links that read more of the base ("?page=2", "#top") are normalised every time.
    Exact: the memo holds what `normalize_url` returned for the same link against a base
    that agrees on that part. Bounded: it starts over when full."""

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._known: dict[tuple[str, str], str | None] = {}

    def normalize(self, raw: str, base: str, origin: str, directory: str) -> str | None:
        """`normalize_url(raw, base)`, or None when that raises InvalidURL. ``origin`` and
        ``directory`` are the canonical ``base``'s (see :func:`urls.origin_of`, :func:`urls.directory_of`)."""
        context = _memo_context(raw, origin, directory)
        if context is None:
            return _normalized_or_none(raw, base)
        key = (raw, context)
        url = self._known.get(key, _UNKNOWN)  # most lookups miss: no KeyError to raise
        if url is _UNKNOWN:
            url = _normalized_or_none(raw, base)
            if len(self._known) >= self.capacity:
                self._known.clear()
            self._known[key] = url
        return url


def _memo_context(raw: str, origin: str, directory: str) -> str | None:
    """The part of the base that the canonical form of ``raw`` depends on, if not all of it.

    The URL Standard, for an http(s) base: an absolute link ignores the base, "//host/x"
    reads its scheme, "/x" its origin, and a relative path ("x", "../x", "..\\x") its path
    only up to the last "/" (or less: "\\x" is root-relative). Anything else ("", "?q",
    "#f", "http:x" with a colon in the first segment) may read the base's whole path or
    query, and is not remembered."""
    match = _MEMO_CONTEXT.match(raw)
    if match is None:
        return None
    return origin if match[1] else directory


def _normalized_or_none(raw: str, base: str, query_codec: str | None = None) -> str | None:
    try:
        if query_codec is None:  # the common case, in the common call
            return normalize_url(raw, base)
        return normalize_url(raw, base, query_codec=query_codec)
    except InvalidURL:
        return None


@dataclass(slots=True)
class ParsedPage:
    links: list[str]
    title: str | None
    nofollow: bool
    truncated: bool = False  # the body was longer than max_parse_bytes: links come from its start only


def extract_links(
    body: bytes,
    url: str,
    *,
    max_links: int = 5000,
    encoding: str | None = None,
    max_parse_bytes: int = MAX_PARSE_BYTES,
    memo: LinkMemo | None = None,
    with_title: bool = True,
) -> ParsedPage:
    """Canonical, deduplicated outgoing links of the page at ``url`` (in document order).

    ``encoding`` is the charset label of the HTTP Content-Type, if any (see
    parse.charset.decode_document for the order in which it counts). Only the first
    ``max_parse_bytes`` of ``body`` are read. Invalid or non-http(s) links are dropped
    silently. Raises :class:`InvalidURL` only if ``url`` itself is invalid. With
    ``with_title=False`` the title is not extracted (None): the crawl never reads it.
    """
    # The crawl hands over canonical URLs, which are plain: the shortcut, when it applies,
    # gives what normalize_url gives (see urls.resolve_plain).
    page_url = (resolve_plain(url, "", "") if url.startswith(("http://", "https://")) else None) or normalize_url(url)
    truncated = len(body) > max_parse_bytes
    read = body[:max_parse_bytes] if truncated else body
    decoded = decode_document(read, encoding, complete=not truncated)
    text = decoded.text
    flat = not _parses_linearly(text)
    markup = _scan(LexborHTMLParser(_flatten(text) if flat else _lexbor_input(read, decoded, complete=not truncated)),
                   flat=flat)
    title = _title(markup.title_node) if with_title else None
    if markup.nofollow:
        return ParsedPage(links=[], title=title, nofollow=True, truncated=truncated)
    # A link's query is encoded in the page's encoding, as browsers do (core.urls.normalize_url).
    query_codec = url_query_codec(decoded.encoding)
    base = _base_url(markup.base_href, page_url, query_codec)
    links = _collect_links(markup.targets, base, max_links, memo if memo is not None else LinkMemo(), query_codec)
    return ParsedPage(links=links, title=title, nofollow=False, truncated=truncated)


def _lexbor_input(read: bytes, decoded: DecodedText, *, complete: bool) -> bytes | str:
    """What Lexbor parses for a page parsed as it is: the bytes as they came when they are
    exactly the UTF-8 of its text (Lexbor reads bytes as UTF-8), else the text. Given text,
    selectolax encodes it to UTF-8 first: on PostgreSQL's documentation (14 KB pages, all
    with some non-ASCII) that is ~10 of ~105 µs a parse. Only when no BOM was cut off, no
    byte was replaced (a U+FFFD in the text may be either: the text is used then) and no
    character cut at the end of a truncated body was left out of the text."""
    if complete and decoded.encoding == "utf-8" and decoded.source != "bom" and "\ufffd" not in decoded.text:
        return read
    return decoded.text


def decode_html(body: bytes, encoding: str | None = None) -> str:
    """A page's text, decoded in the HTML standard's order (see parse.charset.decode_document)."""
    return decode_document(body, encoding).text


def _parses_linearly(text: str) -> bool:
    """Whether Lexbor's cost on ``text`` as it is stays within a small multiple of a normal
    page's, so that the flattening pass (about 30% of the parser's time on real
    documentation pages, more than Lexbor's own parse) can be skipped.

    What makes Lexbor superlinear is nesting, bounded by the number of tags (each needs a
    "<"), and distinct attributes in one tag (n^2), bounded by the tag's length. A tag ends
    at the first ">" outside a quoted attribute value. With no quoted value holding a "<" or
    ">", it therefore ends at the first ">" after its "<"; and with no "<" followed by
    ``_DIRECT_MAX_SEGMENT`` characters without a ">", no tag is longer than that, nor has
    more than ~128 attributes. Measured on these bounds' worst cases (bench/parse_direct.py):
    4-14 ms, against ~2 ms for an ordinary page of the largest size. 95% of PostgreSQL's
    HTML pages pass; the rest, and anything hostile, is flattened first. Four C scans."""
    return len(text) <= _DIRECT_MAX_CHARS and text.count("<") <= _DIRECT_MAX_TAGS \
        and _LONG_SEGMENT.search(text) is None and _ANGLE_IN_QUOTES.search(text) is None


def _flatten(text: str) -> str:
    # Removed markup becomes a space, so the text on both sides of it does not fuse.
    text = _UNNEEDED_MARKUP.sub(" ", text)
    if _has_oversized_tag(text):
        text = _KEPT_TAG.sub(_drop_oversized, text)
    return text


def _has_oversized_tag(text: str) -> bool:
    # Dropping calls back into Python for every link tag; asking first does not. No tag is
    # longer than the text (most pages are shorter than the cap), and else one findall
    # measures every tag in C.
    if len(text) <= MAX_TAG_CHARS:
        return False
    return max(map(len, _KEPT_TAG.findall(text)), default=0) > MAX_TAG_CHARS


def _drop_oversized(match: re.Match[str]) -> str:
    # A link tag this long is an attribute flood (or a data: URI we would reject anyway).
    tag = match.group()
    return tag if len(tag) <= MAX_TAG_CHARS else " "


@dataclass(slots=True)
class _Markup:
    """What link extraction reads from a page's tree, gathered in one walk."""

    targets: list[str] = field(default_factory=list)  # raw link targets, in document order
    title_node: LexborNode | None = None  # the first <title>
    base_href: str | None = None  # of the first <base href>; "" when it has no value
    nofollow: bool = False  # a <meta name=robots> forbids following the links


def _scan(tree: LexborHTMLParser, *, flat: bool) -> _Markup:
    # One pass instead of a CSS query per question (title, robots, base, links). A flattened
    # tree holds little but the elements asked about, and walking it costs less than the CSS
    # engine the first query on a tree builds. A tree parsed as it is holds ~7x more elements
    # than those (on PostgreSQL's documentation): one query for all of them then costs about
    # half the walk, and gives them in document order as the walk does. Link targets are kept
    # as strings, not nodes: with a node kept per element, a page of a million <a> tags makes
    # the garbage collector scan the growing list again and again (4x slower).
    markup = _Markup()
    root = tree.root
    if root is None:
        return markup
    for node in root.traverse() if flat else tree.css(_SCANNED):
        tag = node.tag
        if tag in _LINK_TAGS:
            attrs = node.attributes
            if tag == "meta" and not markup.nofollow:
                markup.nofollow = _is_robots_nofollow(attrs)
            target = _link_target(tag, attrs)
            if target:
                markup.targets.append(target)
        elif tag == "base" and markup.base_href is None:
            attrs = node.attributes
            if "href" in attrs:
                markup.base_href = attrs["href"] or ""
        elif tag == "title" and markup.title_node is None:
            markup.title_node = node
    return markup


def _title(node: LexborNode | None) -> str | None:
    if node is None:
        return None
    title = " ".join(node.text().split())[:MAX_TITLE_CHARS]
    return title or None


def _is_robots_nofollow(attrs: dict[str, str | None]) -> bool:
    if (attrs.get("name") or "").strip().lower() != "robots":
        return False
    directives = {d.strip() for d in (attrs.get("content") or "").lower().split(",")}
    return "nofollow" in directives or "none" in directives


def _base_url(base_href: str | None, page_url: str, query_codec: str | None = None) -> str:
    if base_href is None:
        return page_url
    try:
        return normalize_url(base_href, page_url, query_codec=query_codec)
    except InvalidURL:
        return page_url  # a javascript: or broken <base> is ignored, as browsers do


def _collect_links(targets: list[str], base: str, max_links: int, memo: LinkMemo,
                   query_codec: str | None = None) -> list[str]:
    links: dict[str, None] = {}  # an ordered set
    seen_raw: set[str] = set()
    # Junk (javascript:, mailto:, broken) costs a normalisation each; bound that work too.
    budget = max(4 * max_links, 1_000)
    origin = origin_of(base)
    directory = directory_of(base, origin)
    for raw in targets:
        if len(links) >= max_links or budget <= 0:
            break
        if raw in seen_raw:
            continue
        seen_raw.add(raw)
        budget -= 1
        if query_codec is not None and not raw.isascii():
            # Its query may be in the page's legacy encoding: not the answer the memo holds
            # for the same link on a UTF-8 page (plain links are ASCII).
            url = _normalized_or_none(raw, base, query_codec)
        else:
            # Most links are plain (urls.resolve_plain): cheaper to resolve than to look up.
            url = resolve_plain(raw, origin, directory) or memo.normalize(raw, base, origin, directory)
        if url is not None:
            links[url] = None
    return list(links)


def _link_target(tag: str, attrs: dict[str, str | None]) -> str | None:
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


def _rel_tokens(attrs: dict[str, str | None]) -> set[str]:
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
