"""WARC 1.1 records as bytes: pure functions, no I/O.

The store writes two records per HTTP exchange, so this is the crawler's hottest pure code
after link extraction. warcio's writer spent ~120 µs per exchange on generic header objects,
header rewriting, streamed digests and a flush per record; building the few headers a crawler
writes directly costs a fraction of that. warcio stays the reader: the tests read these files
back with it and check every digest with its checker.

Each record is its own gzip member (WARC 1.1, annex D), so a file is readable up to its last
complete record even while it is being written or after a crash. The members are deflated by
ISA-L (python-isal) when it is installed, as it is with the package: about 3x less CPU than
zlib for records within 2% of zlib's level-6 size, and an ordinary gzip stream to any reader.
Small records (requests, redirects) are deflated with the fixed Huffman code: see `gzip_member`.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

try:
    from isal import isal_zlib as _deflate

    GZIP_LEVEL = 2  # ISA-L's default of its 0-3 scale
    SMALL_GZIP_LEVEL = 0  # the one level at which ISA-L takes the fixed Huffman code
except ImportError:  # pragma: no cover - a platform without an isal wheel
    # The same API as isal_zlib; mypy will not give one name two modules' types.
    _deflate = zlib  # type: ignore[misc]
    GZIP_LEVEL = SMALL_GZIP_LEVEL = 6  # zlib's default; warcio's 9 costs more CPU for <1% smaller records

WARC_VERSION = "1.1"
SMALL_RECORD_BYTES = 1024  # records below this get the fixed Huffman code (see gzip_member)
_GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer around the deflate stream


def record_id() -> str:
    """A random (version 4) UUID URN, as `uuid.uuid4()` would give."""
    return record_ids(1)[0]


_UUID_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def record_ids(count: int) -> list[str]:
    """`count` random (version 4) UUID URNs from one `os.urandom` call: a writer draws a
    batch's ids at once, as one syscall per record was a tenth of the store's CPU."""
    h = os.urandom(16 * count).hex()
    variant = _UUID_VARIANT
    return [f"<urn:uuid:{h[i:i + 8]}-{h[i + 8:i + 12]}-4{h[i + 13:i + 16]}-"
            f"{variant[h[i + 16]]}{h[i + 17:i + 20]}-{h[i + 20:i + 32]}>" for i in range(0, 32 * count, 32)]


_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]  # 10 bits -> two characters


def sha1_label(data: bytes) -> str:
    """The digest form WARC readers expect: `sha1:` + base32 of the SHA-1."""
    return _label(hashlib.sha1(data).digest())


def _label(sha1: bytes) -> str:
    # A SHA-1 is 160 bits, exactly 32 base32 characters without padding; read as one integer
    # it is 16 table lookups. `base64.b32encode` is pure Python before 3.12 (~3x slower), and
    # spelled out, the lookups cost half of what a loop over them does.
    n = int.from_bytes(sha1, "big")
    p = _BASE32_PAIRS
    return (f"sha1:{p[n >> 150]}{p[n >> 140 & 1023]}{p[n >> 130 & 1023]}{p[n >> 120 & 1023]}"
            f"{p[n >> 110 & 1023]}{p[n >> 100 & 1023]}{p[n >> 90 & 1023]}{p[n >> 80 & 1023]}"
            f"{p[n >> 70 & 1023]}{p[n >> 60 & 1023]}{p[n >> 50 & 1023]}{p[n >> 40 & 1023]}"
            f"{p[n >> 30 & 1023]}{p[n >> 20 & 1023]}{p[n >> 10 & 1023]}{p[n & 1023]}")


def _header_block(lines: Sequence[tuple[str, str]]) -> str:
    if not lines:
        return ""
    block = "\r\n".join(map(": ".join, lines))  # C-level all the way: no Python frame per line
    if block.count("\n") != len(lines) - 1 or block.count("\r") != len(lines) - 1:
        # A header value never spans lines; aiohttp already rejects such headers, this keeps
        # a record well-formed whatever a caller passes.
        block = "\r\n".join(f"{_one_line(name)}: {_one_line(value)}" for name, value in lines)
    return block + "\r\n"


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def http_head(first_line: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """An HTTP message head: the first line, the headers, the blank line."""
    # surrogateescape: header bytes that were not UTF-8 go back out exactly as they came in.
    return (f"{first_line}\r\n{_header_block(headers)}\r\n").encode("utf-8", "surrogateescape")


def record(warc_type: str, fields: Sequence[tuple[str, str]], block: bytes, *, content_type: str,
           payload_digest: str | None = None) -> bytes:
    """One uncompressed WARC record. `fields` come after WARC-Type, WARC-Record-ID (or the
    caller's own, when it needs to point at the record) and before the digests."""
    return _record(warc_type, _header_block(fields), block, b"", content_type, payload_digest)


def _record(warc_type: str, fields: str, block: bytes, payload: bytes, content_type: str,
            payload_digest: str | None) -> bytes:
    # `fields` are header lines, formatted. The record's block is `block` then `payload`,
    # passed apart so that a response body is copied once, into the record.
    block_digest = hashlib.sha1(block)
    block_digest.update(payload)
    payload_field = "" if payload_digest is None else f"WARC-Payload-Digest: {payload_digest}\r\n"
    text = (f"WARC/{WARC_VERSION}\r\nWARC-Type: {warc_type}\r\n{fields}{payload_field}"
            f"WARC-Block-Digest: {_label(block_digest.digest())}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(block) + len(payload)}\r\n\r\n")
    return b"".join((text.encode("utf-8", "surrogateescape"), block, payload, b"\r\n\r\n"))


def gzip_member(data: bytes) -> bytes:
    if len(data) >= SMALL_RECORD_BYTES:
        return _deflate.compress(data, GZIP_LEVEL, _GZIP_WBITS)
    # Building a Huffman code for a record costs ISA-L ~4 µs whatever its size: most of the
    # ~6 µs it spends on a request record (~600 bytes), which the code makes only ~13% (~65
    # bytes) smaller than the fixed code of RFC 1951 does. With the fixed code an exchange of a
    # 2 KB page costs a quarter less deflate CPU for ~4% more bytes (less with larger pages).
    compressor = _deflate.compressobj(SMALL_GZIP_LEVEL, _deflate.DEFLATED, _GZIP_WBITS,
                                      _deflate.DEF_MEM_LEVEL, _deflate.Z_FIXED)
    return compressor.compress(data) + compressor.flush()


def warcinfo(filename: str, date: str, info: Sequence[tuple[str, str]]) -> bytes:
    body = _header_block(info).encode("utf-8")
    fields = [("WARC-Record-ID", record_id()), ("WARC-Date", date), ("WARC-Filename", filename)]
    return record("warcinfo", fields, body, content_type="application/warc-fields")


REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"


def chunked(body: bytes) -> bytes:
    """``body`` in HTTP/1.1 chunked framing, as one chunk (and the last, empty one).

    The HTTP client removes the server's chunk framing before the node sees the body; a
    response that said ``Transfer-Encoding: chunked`` is stored with its headers unchanged,
    so its body is framed again, in one chunk: any reader de-chunks it to the exact bytes
    received. (The server's own chunk sizes are not kept.)"""
    if not body:
        return b"0\r\n\r\n"
    return b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)


def exchange(url: str, date: str, *, status_line: str, response_headers: Sequence[tuple[str, str]],
             body: bytes, request_line: str, request_headers: Sequence[tuple[str, str]],
             ip_address: str | None = None, truncated: str | None = None,
             ids: tuple[str, str] | None = None, revisit: Revisit | None = None,
             payload_digest: str | None = None) -> tuple[bytes, bytes]:
    """The response record (or, with ``revisit``, a revisit record) and the request record
    (WARC-Concurrent-To the first) of one HTTP exchange. ``body`` is the payload as the
    record holds it (see `chunked`); the payload digest is its digest, as WARC readers
    (warcio) compute it. `ids` are the two records' ids (from `record_ids`), drawn here when
    not given."""
    response_id, request_id = ids or record_ids(2)
    # The fields both records have, formatted once; no value spans lines (see _header_block).
    where = f"WARC-Date: {_one_line(date)}\r\nWARC-Target-URI: {_one_line(url)}\r\n"
    response_fields = f"WARC-Record-ID: {response_id}\r\n{where}"
    if ip_address:
        response_fields += f"WARC-IP-Address: {_one_line(ip_address)}\r\n"
    head = http_head(status_line, response_headers)
    if revisit is not None:
        # The HTTP head only: the payload is the original's (identical-payload-digest) or
        # the server said it has not changed (server-not-modified).
        response_fields += revisit.fields()
        response = _record("revisit", response_fields, head, b"", "application/http; msgtype=response",
                           revisit.payload_digest)
    else:
        if truncated:
            response_fields += f"WARC-Truncated: {_one_line(truncated)}\r\n"
        response = _record("response", response_fields, head, body, "application/http; msgtype=response",
                           payload_digest or sha1_label(body))
    request_fields = f"WARC-Record-ID: {request_id}\r\n{where}WARC-Concurrent-To: {response_id}\r\n"
    request = _record("request", request_fields, http_head(request_line, request_headers), b"",
                      "application/http; msgtype=request", None)
    return response, request


@dataclass(frozen=True, slots=True)
class Revisit:
    """What a revisit record says of the record it stands in for."""

    profile: str  # REVISIT_IDENTICAL or REVISIT_NOT_MODIFIED
    payload_digest: str | None = None  # of the original payload (identical-payload-digest)
    refers_to: str | None = None  # the original's WARC-Record-ID
    refers_to_uri: str | None = None
    refers_to_date: str | None = None

    def fields(self) -> str:
        lines = [("WARC-Profile", self.profile)]
        if self.refers_to:
            lines.append(("WARC-Refers-To", self.refers_to))
        if self.refers_to_uri:
            lines.append(("WARC-Refers-To-Target-URI", self.refers_to_uri))
        if self.refers_to_date:
            lines.append(("WARC-Refers-To-Date", self.refers_to_date))
        return _header_block(lines)


def metadata(url: str, date: str, concurrent_to: str, block: str, record_id: str) -> bytes:
    """A metadata record about the response ``concurrent_to`` (outlinks, via, hops), its
    ``block`` already application/warc-fields (see `warc_fields`), the form Heritrix writes."""
    fields = (f"WARC-Record-ID: {record_id}\r\nWARC-Date: {_one_line(date)}\r\nWARC-Target-URI: {_one_line(url)}\r\n"
              f"WARC-Concurrent-To: {concurrent_to}\r\n")
    return _record("metadata", fields, block.encode("utf-8", "surrogateescape"), b"", "application/warc-fields", None)


def warc_fields(fields: Sequence[tuple[str, str]], name: str = "", values: str = "") -> str:
    """application/warc-fields text: ``fields``, then one ``name: value`` line per line of
    ``values`` (newline-separated, as a page's links come from the parser: one string, not a
    list, so a page's hundred links cost one join and one replace here, not a line each)."""
    text = _header_block(fields)
    if values:
        if "\r" in values:
            values = values.replace("\r", " ")
        text += f"{name}: " + values.replace("\n", f"\r\n{name}: ") + "\r\n"
    return text
