"""A body's Content-Encoding undone, within a size limit: pure, no I/O.

The fetcher keeps a body as the server sent it (the WARC record stores it that way); whoever
reads the content (the parser, the robots.txt rules) decodes it here, and stops at ``limit``
decoded bytes, so a gzip bomb costs at most the limit plus one step of memory. The node asks
for ``gzip, deflate`` only (ACCEPT_ENCODING). A server that sends another coding anyway (br,
zstd, compress) gets its body archived as it came, and not read: Python's brotli bindings
cannot stop inflating at a limit, and a decoder we cannot bound is a bomb we cannot refuse.

ISA-L (python-isal, a dependency for the WARC writer) inflates gzip about 2x faster than
zlib, with the same API; zlib stands in where isal is missing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

try:
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - a platform without an isal wheel
    _inflate = zlib  # type: ignore[misc]

ACCEPT_ENCODING = "gzip, deflate"
# isal raises its own error class (IsalError), zlib its own.
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, getattr(_inflate, "error", zlib.error))
_GZIP_OR_ZLIB = zlib.MAX_WBITS | 32  # a gzip or a zlib header, told apart by inflate itself
_RAW_DEFLATE = -zlib.MAX_WBITS
_STEP = 1 << 18  # decoded bytes per inflate call: the memory held beyond the limit


@dataclass(frozen=True, slots=True)
class DecodedBody:
    body: bytes
    truncated: bool = False  # more decoded bytes than the limit: `body` holds the first `limit`
    error: str | None = None  # why the body could not be decoded (then `body` is what was had)


def codings(content_encoding: str | None) -> list[str]:
    """The codings of a Content-Encoding header, in the order they were applied."""
    if not content_encoding:
        return []
    return [coding for part in content_encoding.split(",") if (coding := part.strip().lower()) != "identity" and coding]


def decode_body(body: bytes, content_encoding: str | None, limit: int) -> DecodedBody:
    """``body`` with its codings undone, last applied first, up to ``limit`` bytes.

    A stream cut short (a body truncated at the fetch size cap, a timeout) yields what
    inflated before the cut, without an error: the page's start is still worth reading."""
    applied = codings(content_encoding)
    if not applied:
        return DecodedBody(body[:limit], truncated=len(body) > limit)
    for position, coding in enumerate(reversed(applied)):
        last = position == len(applied) - 1
        if coding in ("gzip", "x-gzip", "deflate"):
            decoded = _inflate_capped(body, limit if last else limit * 64, raw_fallback=coding == "deflate")
        else:
            return DecodedBody(body[:limit], error=f"content-encoding {coding!r} is not decoded")
        if decoded.error is not None or decoded.truncated and not last:
            return DecodedBody(decoded.body[:limit], truncated=decoded.truncated, error=decoded.error)
        body = decoded.body
        if last:
            return decoded
    raise AssertionError("unreachable")  # pragma: no cover


def _inflate_capped(data: bytes, limit: int, *, raw_fallback: bool) -> DecodedBody:
    try:
        return _inflate_members(data, limit, _GZIP_OR_ZLIB)
    except _INFLATE_ERRORS as exc:
        if raw_fallback:  # "deflate" as many servers send it: no zlib header (RFC 9110 8.4.1.2)
            try:
                return _inflate_members(data, limit, _RAW_DEFLATE)
            except _INFLATE_ERRORS:
                pass
        return DecodedBody(data[:limit], error=f"could not inflate: {exc}")


def _inflate_members(data: bytes, limit: int, wbits: int) -> DecodedBody:
    """Inflate every gzip member in turn (a gzip file may hold several), ``_STEP`` at a time."""
    out: list[bytes] = []
    size = 0
    while data:
        inflater = _inflate.decompressobj(wbits)
        pending = data
        while pending:
            chunk = inflater.decompress(pending, min(_STEP, limit - size + 1))
            out.append(chunk)
            size += len(chunk)
            if size > limit:
                return DecodedBody(b"".join(out)[:limit], truncated=True)
            pending = inflater.unconsumed_tail
            if not chunk and not pending:
                break
        if not inflater.eof:
            break  # cut short: keep what inflated
        data = inflater.unused_data
        if wbits == _RAW_DEFLATE or not data.startswith(b"\x1f\x8b"):
            break  # trailing bytes after the stream are not another member: ignored, as browsers do
    return DecodedBody(b"".join(out))
