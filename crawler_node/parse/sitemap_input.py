"""What a sitemap file yields, and its bytes as the readers take them: inflated from gzip piece
by piece (zlib ``max_length``), never more than ``max_bytes`` in all, so a gzip bomb costs what
its first ``max_bytes`` cost. Pure: no I/O."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Protocol

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer around deflate data
FEED_BYTES = 65_536  # read at a time: what a stop (enough URLs) may overshoot by
MAX_LOC_CHARS = 16_384  # a longer URL is not one anyone serves; dropped, not kept in memory


@dataclass(frozen=True, slots=True)
class Sitemap:
    """What one sitemap file lists. ``urls`` holds what was read before any limit or error."""

    # "urlset" (page URLs), "sitemapindex" (sitemap URLs), "text", "rss" or "atom" (page
    # URLs); None: not a sitemap
    kind: str | None
    urls: list[str] = field(default_factory=list)  # in document order
    truncated: str | None = None  # "urls": more than max_urls listed; "bytes": larger than max_bytes
    error: str | None = None  # why it could not be read to its end


def is_gzip(body: bytes) -> bool:
    return body[:2] == GZIP_MAGIC


class Body(Protocol):
    """A sitemap's bytes, uncompressed, in pieces: ``read`` gives b"" at the end or at the
    limit; ``over_limit`` then says whether there was more. Raises zlib.error on corrupt gzip."""

    over_limit: bool

    def read(self, size: int) -> bytes: ...


def open_body(body: bytes, max_bytes: int) -> Body:
    """``body`` as received: gzip (told by its magic bytes, not the URL or the Content-Type,
    which servers get wrong both ways) or not."""
    return _Inflated(body, max_bytes) if is_gzip(body) else _Plain(body, max_bytes)


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
                if not data or not GZIP_MAGIC.startswith(data[:2]):
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
        chunk = bytes(self._body[self._offset:self._offset + FEED_BYTES])
        self._offset += len(chunk)
        return chunk
