"""URL canonicalisation, host keys, crawl scope and address policy (pure, no I/O).

Every discovered link goes through :func:`normalize_url`, so two spellings of one resource
meet in the same seen-set entry and the same ring arc. The canonical form follows RFC 3986
section 6 (syntax- and scheme-based normalisation) with a few crawler choices on top:
fragment, userinfo and an empty ``?`` are dropped, a trailing dot in the host is dropped.

We resolve and split by hand instead of calling ``urllib.parse.urljoin``: urljoin costs a few
microseconds per link (it re-splits and re-joins twice), and this runs on every link of every
page. The resolution is RFC 3986 section 5.2 with urljoin's non-strict rule (``http:g``
against an http base is relative), so results agree with urljoin on http(s) URLs.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from urllib.parse import unquote

try:  # IDNA 2008 + UTS 46 mapping, as browsers do; usually present (yarl depends on it).
    import idna as _idna

    _HAVE_IDNA = True
except ImportError:  # pragma: no cover - exercised only where idna is missing
    _HAVE_IDNA = False

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_HOST_LENGTH = 253
_MAX_LABEL_LENGTH = 63
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# RFC 3986 appendix B, with the scheme's syntax (section 3.1) checked in the same match:
# text before a colon that is not a valid scheme ("a b:c") belongs to a relative path, and
# the pattern then splits from the start without a scheme. It matches every string.
_URI_PARTS = re.compile(r"(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?")
# pchar plus "/" (path) and plus "/?" (query). Anything else, including "%", needs a look.
_PATH_NEEDS_WORK = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/]")
_QUERY_NEEDS_WORK = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/?]")
_PATH_TOKEN = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/]")
_QUERY_TOKEN = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?]")
_ASCII_HOST = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")
# WHATWG: a host whose last label is a number is an IPv4 address in one of its spellings
_IPV4_NUMBER = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
# WHATWG URL parsing strips these around a URL and removes tab/newline inside it.
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))


class InvalidURL(ValueError):
    """A URL the crawler will not fetch; ``reason`` is short and stable, fit for a counter label."""

    def __init__(self, reason: str, url: str = "") -> None:
        # Both values go to args so the exception survives pickling out of a parse worker.
        super().__init__(reason, url)
        self.reason = reason
        self.url = url

    def __str__(self) -> str:
        shown = self.url if len(self.url) <= 200 else self.url[:200] + "..."
        return f"invalid URL ({self.reason}): {shown!r}"


# A split URL: (scheme as written, "" when absent; authority, None when there is no "//";
# path; query, None when there is no "?"). A plain tuple, unpacked where it is used: a
# NamedTuple's constructor is a Python call, and this runs a few times per link.
_Parts = tuple[str, str | None, str, str | None]


def normalize_url(url: str, base: str | None = None, *, max_length: int = MAX_URL_LENGTH) -> str:
    """Resolve ``url`` against ``base`` (if given) and return its canonical http(s) form.

    Raises :class:`InvalidURL` with ``reason`` one of: scheme, too_long, unparsable, no_host,
    host, port.
    """
    url = _clean(url)
    if len(url) > max_length:
        raise InvalidURL("too_long", url)
    parts = _split(url)
    if base is not None:
        parts = _resolve(_split_base(_clean(base)), parts)
    else:
        scheme, authority, path, query = parts
        parts = (scheme, authority, _remove_dot_segments(path), query)
    result = _assemble(parts, url)
    if len(result) > max_length:
        raise InvalidURL("too_long", url)
    return result


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL."""
    end = url.find("/", url.find("://") + 3)
    return url if end < 0 else url[:end]


def directory_of(url: str, origin: str) -> str:
    """``scheme://host[:port]/dir/`` of a canonical URL (whose path starts with "/"), given its origin."""
    query = url.find("?")
    return url[: url.rfind("/", len(origin), query if query >= 0 else len(url)) + 1]


# A plain reference: a path made of unreserved characters and "/" only, perhaps with a
# fragment (dropped), which is relative ("p/1", "./1", "../p/1"), root-relative ("/p/1"),
# or after "//host[:port]" with or without "http:"/"https:". Most links look like this, and
# the canonical form of one is an origin plus the path without dot segments: no splitting,
# no percent work, and the host checked once per host (_canonical_origin is cached).
_PLAIN_REF = re.compile(
    r"(?:(?:([Hh][Tt][Tt][Pp][Ss]?):)?//([A-Za-z0-9\-.]+(?::[0-9]*)?)(/[A-Za-z0-9\-._~/]*)?"
    r"|(/(?!/)[A-Za-z0-9\-._~/]*|[A-Za-z0-9\-._~][A-Za-z0-9\-._~/]*))(?=#|\Z)"
)


def resolve_plain(ref: str, origin: str, directory: str, *, max_length: int = MAX_URL_LENGTH) -> str | None:
    """``normalize_url(ref, base)`` for a plain ``ref`` (see ``_PLAIN_REF``), given the canonical
    base's ``origin`` ("scheme://host[:port]") and ``directory`` (the base up to the last
    "/" of its path). None when ``ref`` is not plain, or not valid, or too long: then ask
    :func:`normalize_url`, which also says why. Same answer for a fraction of the work;
    tests/test_urls.py compares the two."""
    if len(ref) > max_length:
        return None
    match = _PLAIN_REF.match(ref)
    if match is None:
        return None
    scheme, authority, absolute_path, path = match.groups()
    if authority is not None:
        if scheme is None:
            scheme = origin[: origin.find(":")]
        try:
            origin = _canonical_origin(scheme.lower(), authority)
        except InvalidURL:
            return None
        path = _remove_dot_segments(absolute_path) if absolute_path else "/"
    elif path[0] == "/":
        path = _remove_dot_segments(path)
    else:
        path = _remove_dot_segments(directory[len(origin):] + path)
    url = origin + path
    return url if len(url) <= max_length else None


def host_of(url: str) -> str:
    """``host[:port]`` of a URL already returned by :func:`normalize_url` (the ring/frontier key)."""
    start = url.find("://") + 3
    end = url.find("/", start)
    return url[start:] if end < 0 else url[start:end]


def bare_host(host_port: str) -> str:
    """The host of a ``host[:port]`` (as :func:`host_of` returns it), without the port.

    An IPv6 literal keeps its brackets ("[::1]:8080" gives "[::1]"), as in a URL, a ring key
    and an ``allow_hosts`` glob; ``bare_host(h).strip("[]")`` is the address itself, which a
    resolver or :func:`is_public_address` takes."""
    if host_port.startswith("["):
        return host_port[: host_port.find("]") + 1]
    return host_port.partition(":")[0]


# --- splitting and resolution ---------------------------------------------------------


def _clean(url: str) -> str:
    if not isinstance(url, str):
        raise InvalidURL("unparsable", repr(url))
    url = url.strip(_C0_AND_SPACE)
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.replace("\t", "").replace("\n", "").replace("\r", "")
    return url


def _split(url: str) -> _Parts:
    match = _URI_PARTS.match(url)
    assert match is not None  # the pattern matches every string
    scheme, authority, path, query = match.groups()
    return scheme or "", authority, path, query


@lru_cache(maxsize=256)
def _split_base(base: str) -> _Parts:
    # Every link of a page resolves against the same base: split it once.
    return _split(base)


def _resolve(base: _Parts, ref: _Parts) -> _Parts:
    """RFC 3986 section 5.2.2, non-strict (a same-scheme reference without authority is relative)."""
    scheme, authority, path, query = ref
    base_scheme, base_authority, base_path, base_query = base
    if scheme and (authority is not None or scheme.lower() != base_scheme.lower()):
        return scheme, authority, _remove_dot_segments(path), query
    if authority is not None:
        return base_scheme, authority, _remove_dot_segments(path), query
    if not path:
        return base_scheme, base_authority, base_path, query if query is not None else base_query
    if not path.startswith("/"):
        if base_authority is not None and not base_path:
            path = "/" + path
        else:
            path = base_path[: base_path.rfind("/") + 1] + path
    return base_scheme, base_authority, _remove_dot_segments(path), query


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for the absolute paths an http URL has."""
    if "." not in path:  # fast path: most paths have no dot segment at all
        return path
    segments = path.split("/")
    if "." not in segments and ".." not in segments:
        return path
    absolute = path.startswith("/")
    output: list[str] = []
    for segment in segments[1:] if absolute else segments:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if segments[-1] in (".", ".."):
        output.append("")  # "/a/b/.." names the directory "/a/", keep its slash
    return "/" + "/".join(output) if absolute else "/".join(output)


# --- canonical assembly -----------------------------------------------------------------


def _assemble(parts: _Parts, original: str) -> str:
    scheme, authority, raw_path, query = parts
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidURL("scheme", original)
    if not authority:
        raise InvalidURL("no_host", original)
    try:
        origin = _canonical_origin(scheme, authority)
    except InvalidURL as exc:  # raised without the URL: the cache is shared by many URLs
        raise InvalidURL(exc.reason, original) from exc.__cause__
    path = _normalize_percent(raw_path, _PATH_NEEDS_WORK, _PATH_TOKEN) or "/"
    if "%" in raw_path:
        # Decoded %2E%2E is a dot segment too (as in browsers): remove it now.
        path = _remove_dot_segments(path)
    if not path.startswith("/"):
        path = "/" + path
    if query:
        return f"{origin}{path}?{_normalize_percent(query, _QUERY_NEEDS_WORK, _QUERY_TOKEN)}"
    return f"{origin}{path}"


@lru_cache(maxsize=4096)
def _canonical_origin(scheme: str, authority: str) -> str:
    """``scheme://host[:port]``, canonical. Raises InvalidURL without the URL (the caller adds it).

    Cached because a page's links name a handful of hosts, mostly the page's own; invalid
    ones raise and are not cached, which is fine: they are rare."""
    host, port = _split_authority(authority)
    try:
        netloc = _canonical_host(host)
    except ValueError as exc:
        raise InvalidURL("host") from exc
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    return f"{scheme}://{netloc}"


def _split_authority(authority: str) -> tuple[str, int | None]:
    hostport = authority.rpartition("@")[2]  # userinfo is dropped, never sent
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise InvalidURL("unparsable")
        host, rest = hostport[: end + 1], hostport[end + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidURL("port")
        port_text = rest[1:]
    else:
        host, _, port_text = hostport.partition(":")
    if not host:
        raise InvalidURL("no_host")
    if not port_text:
        return host, None  # "host:" with an empty port means the default (RFC 3986 6.2.3)
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise InvalidURL("port")
    port = int(port_text)
    if not 0 < port < 65536:
        raise InvalidURL("port")
    return host, port


def _canonical_host(host: str) -> str:
    """The canonical form of a host; ValueError when it is not a valid one."""
    if host.startswith("["):
        address = ipaddress.IPv6Address(host[1:-1])  # zone ids are rejected: no use to a crawler
        return f"[{address.compressed}]"
    if "%" in host:
        host = _percent_decode_host(host)
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]  # "example.com." is the same DNS name; one key, not two
    if not host.isascii():
        host = idna_encode(host)
    if (ipv4 := _ipv4_host(host)) is not None:
        return ipv4
    if (
        len(host) > _MAX_HOST_LENGTH
        or not _ASCII_HOST.fullmatch(host)
        or any(len(label) > _MAX_LABEL_LENGTH for label in host.split("."))
    ):
        raise ValueError(f"not a valid host name: {host!r}")
    return host


def _ipv4_host(host: str) -> str | None:
    """The dotted-quad form of a host that ends in a number, as the WHATWG URL standard reads
    it ("2130706433", "0177.0.0.1", "0x7f.1" and "127.1" are all 127.0.0.1); None for a name.
    Browsers go there, and aiohttp refuses to fetch the other spellings, so a URL that kept
    one would wait in its queue forever; in dotted-quad form the address guard sees it, too.
    A host that ends in a number but is no address ("1.2.3.4.5", "09") is not a valid host."""
    labels = host.split(".")
    if labels[-1] == "" and len(labels) > 1:
        labels.pop()
    if not _IPV4_NUMBER.fullmatch(labels[-1]):
        return None
    if len(labels) > 4:
        raise ValueError(f"not an IPv4 address: {host!r}")
    numbers = [_ipv4_number(label, host) for label in labels]
    *leading, last = numbers
    if any(number > 255 for number in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"not an IPv4 address: {host!r}")
    address = last + sum(number << (8 * (3 - index)) for index, number in enumerate(leading))
    return str(ipaddress.IPv4Address(address))


def _ipv4_number(label: str, host: str) -> int:
    try:
        if label[:2] in ("0x", "0X"):
            return int(label[2:] or "0", 16)
        if len(label) > 1 and label.startswith("0"):
            return int(label[1:], 8)
        return int(label, 10)
    except ValueError:
        raise ValueError(f"not an IPv4 address: {host!r}") from None


def _percent_decode_host(host: str) -> str:
    return unquote(host, errors="strict")  # invalid UTF-8 raises, so the host is rejected


def idna_encode(host: str) -> str:
    if _HAVE_IDNA:
        try:
            return _idna.encode(host, uts46=True).decode("ascii")
        except _idna.IDNAError as exc:
            raise ValueError(str(exc)) from exc
    # IDNA 2003 from the standard library: older rules, but the same answer for common names.
    return host.encode("idna").decode("ascii")  # UnicodeError is a ValueError


def _normalize_percent(text: str, needs_work: re.Pattern[str], token: re.Pattern[str]) -> str:
    if needs_work.search(text) is None:
        return text  # fast path: already canonical (the common case)
    return token.sub(_fix_token, text)


def _fix_token(match: re.Match[str]) -> str:
    token = match.group()
    if len(token) == 3:  # a well-formed escape: decode unreserved, upper-case the rest
        char = chr(int(token[1:], 16))
        return char if char in _UNRESERVED else token.upper()
    # A character that must be escaped (space, non-ASCII, a lone "%"): escape its UTF-8 bytes.
    return "".join(f"%{byte:02X}" for byte in token.encode("utf-8", "surrogatepass"))
