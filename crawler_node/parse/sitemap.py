"""Sitemaps (https://www.sitemaps.org/protocol.html), pure: the URLs a sitemap lists.

A ``<urlset>`` lists pages (``<url><loc>``), a ``<sitemapindex>`` more sitemaps
(``<sitemap><loc>``). The cost is bounded on hostile input:
- gzip is inflated piece by piece (zlib ``max_length``), never more than ``max_bytes`` in all,
  so a gzip bomb costs what its first ``max_bytes`` cost;
- the XML parser is defusedxml's with DTDs forbidden, which refuses entity expansion (billion
  laughs, quadratic blowup) and external entities at the ``<!DOCTYPE``, before any work;
- no tree is built: the parser calls back for each tag and text (a parser target), so a 50 MB
  sitemap costs the memory of its ``<loc>`` strings, not of 50,000 elements (nor of a hostile
  file's millions of nested ones), and parsing stops at the ``max_urls + 1``-th ``<loc>``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from defusedxml.ElementTree import DefusedXMLParser, ParseError

SITEMAP_NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
# The sitemaps.org namespace, none at all, and Google's from before sitemaps.org (still served).
_NAMESPACES = frozenset({SITEMAP_NAMESPACE, "", "http://www.google.com/schemas/sitemap/0.84",
                         "http://www.google.com/schemas/sitemap/0.9"})
_ENTRY_OF_ROOT = {"urlset": "url", "sitemapindex": "sitemap"}
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer around deflate data
_FEED_BYTES = 65_536  # fed to the XML parser at a time: what a stop (enough URLs) may overshoot by
_MAX_LOC_CHARS = 16_384  # a longer <loc> is not a URL anyone serves; dropped, not kept in memory


@dataclass(frozen=True, slots=True)
class Sitemap:
    """What one sitemap file lists. ``urls`` holds what was read before any limit or error."""

    kind: str | None  # "urlset" (page URLs), "sitemapindex" (sitemap URLs), None: not a sitemap
    urls: list[str] = field(default_factory=list)  # the <loc> values, in document order
    truncated: str | None = None  # "urls": more than max_urls listed; "bytes": larger than max_bytes
    error: str | None = None  # why it could not be read to its end


def is_gzip(body: bytes) -> bool:
    return body[:2] == _GZIP_MAGIC


def read_sitemap(body: bytes, *, max_urls: int, max_bytes: int) -> Sitemap:
    """The URLs of the sitemap in ``body`` (XML, or gzip of XML: told by the magic bytes, not
    the URL or the Content-Type, which servers get wrong both ways). An XML document of
    another kind (a feed, an XHTML page) is ``Sitemap(kind=None)``; malformed XML, a DTD or
    corrupt gzip gives an ``error``, never an exception."""
    source = _Inflated(body, max_bytes) if is_gzip(body) else _Plain(body, max_bytes)
    collector = _Collector(max_urls)
    parser = DefusedXMLParser(target=collector, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    try:
        while chunk := source.read(_FEED_BYTES):  # bounded: max_bytes in all
            parser.feed(chunk)
        if source.over_limit:
            return collector.result(truncated="bytes")
        parser.close()
    except _Enough:
        return collector.result(truncated="urls" if collector.over_limit else None)
    # defusedxml's refusals are ValueErrors; an unknown <?xml encoding?> is a LookupError.
    except (ParseError, zlib.error, ValueError, LookupError) as exc:
        return collector.result(error=f"{type(exc).__name__}: {exc}")
    return collector.result()


class _Enough(Exception):
    """Raised from a parser callback to stop parsing: nothing more is wanted from this file."""


class _Collector:
    """The XML parser's target: keeps the text of each ``<loc>`` of an entry of the root."""

    def __init__(self, max_urls: int) -> None:
        self._max_urls = max_urls
        self.kind: str | None = None
        self.urls: list[str] = []
        self.over_limit = False
        self._depth = 0
        self._entry_tag = ""
        self._loc_tag = ""
        self._in_entry = False
        self._loc: list[str] | None = None  # the text pieces of the <loc> being read
        self._loc_chars = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        self._depth += 1
        depth = self._depth
        if depth == 1:
            namespace, _, name = tag[1:].rpartition("}") if tag.startswith("{") else ("", "", tag)
            if namespace not in _NAMESPACES or name not in _ENTRY_OF_ROOT:
                raise _Enough  # not a sitemap: kind stays None
            self.kind = name
            prefix = f"{{{namespace}}}" if namespace else ""
            self._entry_tag, self._loc_tag = prefix + _ENTRY_OF_ROOT[name], prefix + "loc"
        elif depth == 2:
            self._in_entry = tag == self._entry_tag
        elif depth == 3 and self._in_entry and tag == self._loc_tag:
            self._loc, self._loc_chars = [], 0

    def data(self, text: str) -> None:
        loc = self._loc
        if loc is not None and self._loc_chars <= _MAX_LOC_CHARS:
            loc.append(text)
            self._loc_chars += len(text)

    def end(self, tag: str) -> None:
        if self._depth == 3 and self._loc is not None:
            url = "".join(self._loc).strip() if self._loc_chars <= _MAX_LOC_CHARS else ""
            self._loc = None
            if url:
                if len(self.urls) >= self._max_urls:
                    self.over_limit = True
                    raise _Enough
                self.urls.append(url)
        self._depth -= 1

    def close(self) -> None:
        return None

    def result(self, *, truncated: str | None = None, error: str | None = None) -> Sitemap:
        return Sitemap(kind=self.kind, urls=self.urls, truncated=truncated, error=error)


class _Plain:
    """An uncompressed body, in pieces, at most ``limit`` bytes of it."""

    def __init__(self, body: bytes, limit: int) -> None:
        self._body = memoryview(body)
        self._offset = 0
        self._limit = min(limit, len(body))
        self.over_limit = len(body) > limit

    def read(self, size: int) -> bytes:
        chunk = bytes(self._body[self._offset:min(self._offset + size, self._limit)])
        self._offset += len(chunk)
        return chunk


class _Inflated:
    """A gzip body's uncompressed bytes, in pieces, at most ``limit`` of them. Handles files of
    several gzip members (what ``cat a.gz b.gz`` makes), as gunzip does."""

    def __init__(self, body: bytes, limit: int) -> None:
        self._body = memoryview(body)
        self._offset = 0
        self._left = limit
        self._inflater = zlib.decompressobj(_GZIP_WBITS)
        self.over_limit = False

    def read(self, size: int) -> bytes:
        if self._left <= 0:
            try:
                self.over_limit = bool(self._inflate(1))
            except zlib.error:
                self.over_limit = True  # there was more, if not all of it sound
            return b""
        chunk = self._inflate(min(size, self._left))
        self._left -= len(chunk)
        return chunk

    def _inflate(self, size: int) -> bytes:
        """Up to ``size`` more uncompressed bytes; b"" at the end. Raises zlib.error on corrupt
        or cut data. Bounded: each round returns, or consumes input, or ends a member."""
        while True:
            inflater = self._inflater
            if inflater.eof:
                data = inflater.unused_data
                if not data and self._offset < len(self._body):
                    data = self._next_input()
                if not data or not _GZIP_MAGIC.startswith(data[:2]):
                    return b""  # the last member ended (trailing padding, as gunzip, is ignored)
                inflater = self._inflater = zlib.decompressobj(_GZIP_WBITS)
            else:
                data = inflater.unconsumed_tail
                if not data:
                    if self._offset >= len(self._body):
                        raise zlib.error("the gzip data ends before its end (cut in transfer?)")
                    data = self._next_input()
            out = inflater.decompress(data, size)
            if out:
                return out

    def _next_input(self) -> bytes:
        chunk = bytes(self._body[self._offset:self._offset + _FEED_BYTES])
        self._offset += len(chunk)
        return chunk
