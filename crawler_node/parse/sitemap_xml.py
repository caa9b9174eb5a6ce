"""XML sitemaps (https://www.sitemaps.org/protocol.html), pure: the URLs a ``<urlset>`` lists
(``<url><loc>``), those of a ``<sitemapindex>`` (``<sitemap><loc>``), and the two syndication
feeds the protocol takes as sitemaps: RSS 2.0 (``<rss><channel><item><link>``) and Atom 0.3 or
1.0 (``<feed><entry><link href>``, the alternate links). What the root element is decides,
never the Content-Type or the URL.

The cost is bounded on hostile input, and linear in the body's size whatever it holds:
- the XML parser is defusedxml's with DTDs forbidden, which refuses entity expansion (billion
  laughs, quadratic blowup) and external entities at the ``<!DOCTYPE``, before any work;
- no tree is built: the parser calls back for each tag and text (a parser target), so a 50 MB
  sitemap costs the memory of its URL strings, not of 50,000 elements (nor of a hostile
  file's millions of nested ones), and parsing stops at the ``max_urls + 1``-th URL;
- expat is fed so that no token is scanned more than a few times (see ``_Feeder``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from defusedxml.ElementTree import DefusedXMLParser, ParseError

from crawler_node.parse.sitemap_input import FEED_BYTES, MAX_LOC_CHARS, Body, Sitemap

SITEMAP_NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
# The sitemaps.org namespace, none at all, and Google's from before sitemaps.org (still served).
_SITEMAP_NAMESPACES = ("", SITEMAP_NAMESPACE, "http://www.google.com/schemas/sitemap/0.84",
                       "http://www.google.com/schemas/sitemap/0.9")
ATOM_NAMESPACES = ("http://www.w3.org/2005/Atom", "http://purl.org/atom/ns#")  # 1.0 and 0.3
# RSS 2.0 "is upward compatible with RSS 0.91 and 0.92" (its specification): the same <item><link>.
_RSS_VERSIONS = ("2.0", "0.91", "0.92")
# RFC 4287 4.2.7.2: no rel is "alternate"; the IANA IRI is the same relation.
_ALTERNATE = ("alternate", "http://www.iana.org/assignments/relation/alternate")
# One XML token (a tag with its attributes, a comment, a name) longer than this is no
# sitemap's: a comment or a processing instruction is skipped unread past it, anything else
# ends the reading. Below pyexpat's own piece size (1 MiB), which it re-scans a token over too.
TOKEN_LIMIT = 1 << 20
_SKIP_BYTES = 4 * FEED_BYTES  # read at a time while a comment or instruction is skipped


@dataclass(frozen=True, slots=True)
class _Shape:
    """Where a kind of sitemap keeps its URLs: in each ``loc`` element of an entry, an entry
    being the element at ``entry`` (tags below the root, namespace included); the URL is the
    element's text, or with ``href`` its href attribute (and only an alternate link's)."""

    kind: str
    entry: tuple[str, ...]
    loc: str
    href: bool = False


def _shapes() -> dict[str, _Shape]:
    shapes = {"rss": _Shape("rss", ("channel", "item"), "link")}
    for namespace in _SITEMAP_NAMESPACES:
        prefix = f"{{{namespace}}}" if namespace else ""
        for root, entry in (("urlset", "url"), ("sitemapindex", "sitemap")):
            shapes[prefix + root] = _Shape(root, (prefix + entry,), prefix + "loc")
    for namespace in ATOM_NAMESPACES:
        prefix = f"{{{namespace}}}"
        shapes[prefix + "feed"] = _Shape("atom", (prefix + "entry",), prefix + "link", href=True)
    return shapes


_SHAPES = _shapes()  # by the root element's tag


def read_xml(first: bytes, body: Body, *, max_urls: int) -> Sitemap:
    """The URLs of the XML document whose first bytes are ``first`` and whose rest ``body``
    holds. A document of another kind (an XHTML page, RSS 1.0) is ``Sitemap(kind=None)``; malformed
    XML, a DTD, corrupt gzip or a token over TOKEN_LIMIT gives an ``error``, never an exception."""
    collector = _Collector(max_urls)
    parser = DefusedXMLParser(target=collector, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    try:
        _Feeder(parser, body).run(first)
        if body.over_limit:
            return collector.result(truncated="bytes")
        parser.close()
    except _Enough:
        return collector.result(truncated="urls" if collector.over_limit else None)
    # defusedxml's refusals are ValueErrors (TokenTooLong too); an unknown <?xml encoding?> is a LookupError.
    except (ParseError, zlib.error, ValueError, LookupError) as exc:
        return collector.result(error=f"{type(exc).__name__}: {exc}")
    return collector.result()


class TokenTooLong(ValueError):
    """A tag, a name or a declaration longer than TOKEN_LIMIT bytes."""


class _Feeder:
    """Feeds expat so that its time stays linear in the body's size. Expat before 2.6 (2.5.0
    under Python 3.11 here: no ``SetReparseDeferralEnabled``) scans an unfinished token again
    from its start on every piece fed, and pyexpat cuts what it is given into 1 MiB pieces: a
    50 MB comment cost 18-22 s in 64 KB pieces, and 2.4 s fed whole. So:
    - while a token is unfinished, the next piece is as long as what expat holds of it, so
      the pieces double and the re-scans add up to twice the token at most;
    - a token that reaches TOKEN_LIMIT is a comment or a processing instruction, whose middle
      is skipped unread (its end is searched for with bytes.find, and expat gets only that
      end: no URL is in it), or anything else, which no sitemap has: TokenTooLong.
    Where the token starts is expat's own word (``CurrentByteIndex``), not a guess of ours."""

    def __init__(self, parser: DefusedXMLParser, body: Body) -> None:
        self._parser = parser
        self._expat = parser.parser
        self._body = body
        self._fed = 0
        self._unparsed = bytearray()  # the bytes fed that expat holds unparsed: an unfinished token

    def run(self, first: bytes) -> None:
        piece = first
        while piece:  # bounded: each round reads from the body, which ends at its limit
            self._feed(piece)
            held = len(self._unparsed)
            if held >= TOKEN_LIMIT:
                piece = self._skip_token()
            else:
                piece = self._body.read(min(max(FEED_BYTES, held), TOKEN_LIMIT))

    def _feed(self, piece: bytes) -> None:
        self._parser.feed(piece)
        self._fed += len(piece)
        unparsed = self._unparsed
        unparsed += piece
        held = self._fed - max(self._expat.CurrentByteIndex, 0)
        del unparsed[:len(unparsed) - held]

    def _skip_token(self) -> bytes:
        """What to feed after the unfinished token's middle, read and dropped here."""
        unparsed = self._unparsed
        if unparsed.startswith(b"<!--"):
            end = b"-->"
        elif unparsed.startswith(b"<?"):
            end = b"?>"
        else:
            raise TokenTooLong(f"an XML token over {TOKEN_LIMIT} bytes at byte {self._fed - len(unparsed)}"
                               f" ({bytes(unparsed[:20])!r}...): no sitemap has one")
        tail = bytes(unparsed[1 - len(end):])  # the end may have begun in what expat holds
        completion: bytes | None = None
        while piece := self._body.read(_SKIP_BYTES):
            if completion is None:
                # A character cut at the end of what expat holds gets its last bytes (UTF-8
                # continuation bytes, none of them the end's), as the body has them.
                completion = piece[:_continuation_bytes(piece)]
            found = (tail + piece).find(end)
            if found >= 0:
                if found < len(tail):
                    return piece  # it ends right here: feed on as if nothing happened
                # A space, so what expat holds and the end cannot make "--" in a comment
                return completion + b" " + piece[found - len(tail):]
            tail = (tail + piece)[1 - len(end):]
        return b""  # the body ends inside the token: expat says so at close (or the body's limit was met)


def _continuation_bytes(piece: bytes) -> int:
    count = 0
    while count < 3 and count < len(piece) and 0x80 <= piece[count] <= 0xBF:
        count += 1
    return count


class _Enough(Exception):
    """Raised from a parser callback to stop parsing: nothing more is wanted from this file."""


class _Collector:
    """The XML parser's target: keeps the URL of each ``loc`` of an entry of the root."""

    def __init__(self, max_urls: int) -> None:
        self._max_urls = max_urls
        self.kind: str | None = None
        self.urls: list[str] = []
        self.over_limit = False
        self._entry: tuple[str, ...] = ()
        self._loc_tag = ""
        self._href = False
        self._depth = 0
        self._matched = 1  # the depth down to which the open elements are the root and the entry path
        self._loc: list[str] | None = None  # the text pieces of the loc being read
        self._loc_chars = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        self._depth += 1
        depth = self._depth
        if depth == 1:
            shape = _SHAPES.get(tag)
            if shape is None or (shape.kind == "rss" and attrib.get("version", "").strip() not in _RSS_VERSIONS):
                raise _Enough  # not a sitemap: kind stays None
            self.kind, self._entry, self._loc_tag, self._href = shape.kind, shape.entry, shape.loc, shape.href
        elif self._matched == depth - 1:
            entry = self._entry
            if depth - 2 < len(entry):
                if tag == entry[depth - 2]:
                    self._matched = depth
            elif tag == self._loc_tag:
                if not self._href:
                    self._loc, self._loc_chars = [], 0
                elif attrib.get("rel", "alternate").strip() in _ALTERNATE:
                    href = attrib.get("href", "")
                    self._add(href.strip() if len(href) <= MAX_LOC_CHARS else "")

    def data(self, text: str) -> None:
        loc = self._loc
        if loc is not None and self._loc_chars <= MAX_LOC_CHARS:
            loc.append(text)
            self._loc_chars += len(text)

    def end(self, tag: str) -> None:
        if self._loc is not None and self._depth == self._matched + 1:
            url = "".join(self._loc).strip() if self._loc_chars <= MAX_LOC_CHARS else ""
            self._loc = None
            self._add(url)
        if self._matched == self._depth and self._depth > 1:
            self._matched -= 1
        self._depth -= 1

    def _add(self, url: str) -> None:
        if url:
            if len(self.urls) >= self._max_urls:
                self.over_limit = True
                raise _Enough
            self.urls.append(url)

    def close(self) -> None:
        return None

    def result(self, *, truncated: str | None = None, error: str | None = None) -> Sitemap:
        return Sitemap(kind=self.kind, urls=self.urls, truncated=truncated, error=error)
