"""Sitemaps (https://www.sitemaps.org/protocol.html), pure: the URLs a sitemap lists.

A sitemap's bytes are inflated from gzip no further than ``max_bytes`` (parse.sitemap_input),
then read as XML: a ``<urlset>`` lists pages, a ``<sitemapindex>`` more sitemaps, an RSS 2.0
or Atom feed pages (parse.sitemap_xml, which bounds what hostile XML costs); or, where the
caller allows it, as a text sitemap: one URL per line, in UTF-8. At most ``max_urls`` URLs
are kept, and the time spent is linear in the bytes read.
"""

from __future__ import annotations

import re
import zlib

from crawler_node.parse.sitemap_input import FEED_BYTES, MAX_LOC_CHARS, Body, Sitemap, is_gzip, open_body
from crawler_node.parse.sitemap_xml import SITEMAP_NAMESPACE, read_xml

__all__ = ["SITEMAP_NAMESPACE", "Sitemap", "is_gzip", "read_sitemap"]

_UTF8_BOM = b"\xef\xbb\xbf"
# The first bytes of an XML document: "<" (after a BOM or blanks), or "<" in UTF-16.
_XML_START = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*<|\xff\xfe|\xfe\xff|\x00<|<\x00")
# A text sitemap's first line: "You must fully specify URLs, including the http."
_FIRST_URL = re.compile(rb"https?://[^\s/?#]", re.IGNORECASE)
_LINE = re.compile(rb"\S[^\n]*")  # a line from its first non-blank byte: blank lines are skipped in C
_SCHEME = re.compile(rb"[A-Za-z][A-Za-z0-9+.\-]*:")


def read_sitemap(body: bytes, *, max_urls: int, max_bytes: int, text: bool = False) -> Sitemap:
    """The URLs of the sitemap in ``body`` (XML, or gzip of XML: told by the magic bytes, not
    the URL or the Content-Type, which servers get wrong both ways). An XML document of
    another kind (an XHTML page) is ``Sitemap(kind=None)``; malformed XML, a DTD or corrupt
    gzip gives an ``error``, never an exception. With ``text``, a body that does not begin as
    XML is read as a text sitemap (see read_text): the caller allows it only where a text
    sitemap is expected, as any text/plain page could pass for one."""
    source = open_body(body, max_bytes)
    try:
        first = source.read(FEED_BYTES)
    except zlib.error as exc:
        return Sitemap(kind=None, error=f"{type(exc).__name__}: {exc}")
    if text and not _XML_START.match(first):
        return read_text(first, source, max_urls=max_urls)
    return read_xml(first, source, max_urls=max_urls)


def read_text(first: bytes, body: Body, *, max_urls: int) -> Sitemap:
    """A text sitemap (sitemaps.org, "Text file"), whose first bytes are ``first`` and whose
    rest ``body`` holds: one URL per line, UTF-8, nothing else. Its first line that is not
    blank must be an http(s) URL, or it is no sitemap (a text/plain "not found" page, a
    robots.txt). After that, a line that does not begin with a scheme, is not UTF-8 or is
    longer than any URL kept is no URL and is skipped, as a ``<loc>`` of no use is."""
    lines = _TextLines(max_urls)
    partial = b""  # the line the last piece ended in
    skipping = False  # inside a line too long to be a URL: dropped up to its end
    piece = first.removeprefix(_UTF8_BOM)
    try:
        while piece:  # bounded: the body ends at its limit
            if skipping:
                newline = piece.find(b"\n")
                if newline < 0:
                    piece = body.read(FEED_BYTES)
                    continue
                piece, skipping = piece[newline + 1:], False
            cut = piece.rfind(b"\n") + 1  # 0: no line ends in this piece
            whole, partial = (partial + piece[:cut], piece[cut:]) if cut else (b"", partial + piece)
            if len(partial) > MAX_LOC_CHARS:
                partial, skipping = b"", True
            if (stop := lines.take(whole)) is not None:
                return stop
            piece = body.read(FEED_BYTES)
    except zlib.error as exc:
        return lines.result(error=f"{type(exc).__name__}: {exc}")
    if body.over_limit:
        return lines.result(truncated="bytes")  # the last line may be cut short: not read
    return lines.take(partial) or lines.result()


class _TextLines:
    """The URLs of a text sitemap's lines, taken a run of whole lines at a time."""

    def __init__(self, max_urls: int) -> None:
        self._max_urls = max_urls
        self.kind: str | None = None
        self.urls: list[str] = []

    def take(self, lines: bytes) -> Sitemap | None:
        """None, or the result when reading stops here: not a sitemap, or max_urls reached."""
        urls = self.urls
        for match in _LINE.finditer(lines):
            line = match[0].rstrip()
            if self.kind is None:
                if not _FIRST_URL.match(line):
                    return Sitemap(kind=None)
                self.kind = "text"
            if len(line) > MAX_LOC_CHARS or not _SCHEME.match(line):
                continue
            try:
                url = line.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(urls) >= self._max_urls:
                return self.result(truncated="urls")
            urls.append(url)
        return None

    def result(self, *, truncated: str | None = None, error: str | None = None) -> Sitemap:
        return Sitemap(kind=self.kind, urls=self.urls, truncated=truncated, error=error)
