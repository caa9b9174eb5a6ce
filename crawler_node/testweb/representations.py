"""What a 200 answer of testweb carries, and when a 304 answers instead: pure, no I/O.

A `Representation` is the exact body bytes served for a URL in one content coding, with its
validators: a strong ETag (the first 16 hex digits of the SHA-1 of those bytes, so a gzip body
has another ETag than the identity body) and its modification time. A stable resource was last
modified at the second testweb started; a changing page was modified at the visit that rendered
it. The Last-Modified header is that time rounded down to the second (an HTTP-date has no finer
resolution), while the comparison with If-Modified-Since uses the exact time: a changing page
rendered now is newer than any date a client copied from an earlier visit, even one in the same
second, so it is never wrongly answered 304.

Request header parsing is aiohttp's (`request.if_none_match`, `request.if_modified_since`:
`*`, lists, `W/` and invalid dates handled there); the precedence of RFC 9110 section 13.2.2
and the weak comparison of 13.1.2 are here, as aiohttp's FileResponse does them.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from aiohttp.helpers import ETAG_ANY, ETag

# The codings a client names when it accepts gzip (RFC 9110 section 8.4.1.3: x-gzip is gzip).
_GZIP_NAMES = ("gzip", "x-gzip")


@dataclass(frozen=True, slots=True)
class Representation:
    """The bytes served for one URL in one coding, and their validators."""

    body: bytes
    etag: str  # the opaque tag without quotes; the header is '"' + etag + '"'
    modified: float  # seconds since the epoch; Last-Modified shows it rounded down
    encoding: str | None = None  # the Content-Encoding of body (None: identity)


def represent(body: bytes, *, modified: float, compress: bool = False) -> Representation:
    """`body` as served (gzip-compressed when `compress`), with its validators."""
    if compress:
        # mtime=0 keeps the gzip header, and so the bytes and the ETag, the same on every call.
        body = gzip.compress(body, compresslevel=6, mtime=0)
    return Representation(body, strong_etag(body), modified, "gzip" if compress else None)


def strong_etag(body: bytes) -> str:
    """The opaque tag of these exact bytes (a strong validator: another byte, another tag)."""
    return hashlib.sha1(body).hexdigest()[:16]


def etag_matches(etag: str, if_none_match: tuple[ETag, ...]) -> bool:
    """If-None-Match's weak comparison (RFC 9110 section 13.1.2): `*` matches any current
    representation, and `W/"x"` matches `"x"`."""
    if len(if_none_match) == 1 and if_none_match[0].value == ETAG_ANY:
        return True
    return any(candidate.value == etag for candidate in if_none_match)


def is_not_modified(
    representation: Representation,
    *,
    if_none_match: tuple[ETag, ...] | None,
    if_modified_since: datetime.datetime | None,
) -> bool:
    """Whether a GET or HEAD is answered 304. If-Modified-Since counts only when no
    If-None-Match was sent (RFC 9110 section 13.2.2); an unparseable date is None, ignored."""
    if if_none_match is not None:
        return etag_matches(representation.etag, if_none_match)
    if if_modified_since is not None:
        return representation.modified <= if_modified_since.timestamp()
    return False


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding value lets gzip be sent (RFC 9110 section 12.5.3): gzip (or
    x-gzip) with a non-zero weight, or else `*` with one. No header at all gets identity: the
    RFC would allow gzip, but clients that send nothing often cannot decode it."""
    if accept_encoding is None:
        return False
    weights: dict[str, float] = {}
    for member in accept_encoding.split(","):
        coding, *parameters = (part.strip() for part in member.split(";"))
        weight = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value.strip())
                except ValueError:
                    weight = 0.0  # a weight that does not parse allows nothing
        if coding:
            weights[coding.lower()] = weight
    named = [weights[name] for name in _GZIP_NAMES if name in weights]
    if named:
        return max(named) > 0
    return weights.get("*", 0.0) > 0


class RepresentationCache:
    """A least-recently-used cache of stable representations, bounded by total body bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: OrderedDict[tuple[str, str, str], Representation] = OrderedDict()

    def get(self, key: tuple[str, str, str]) -> Representation | None:
        representation = self._items.get(key)
        if representation is not None:
            self._items.move_to_end(key)
        return representation

    def put(self, key: tuple[str, str, str], representation: Representation) -> None:
        size = len(representation.body)
        if size > self._max_bytes // 4 or key in self._items:
            return
        self._items[key] = representation
        self._bytes += size
        while self._bytes > self._max_bytes:
            _, evicted = self._items.popitem(last=False)
            self._bytes -= len(evicted.body)
