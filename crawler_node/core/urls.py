"""URLs as the WHATWG URL Standard reads them, in the crawler's canonical form (pure, no I/O).

Every discovered link goes through :func:`normalize_url`, so two spellings of one resource
meet in the same seen-set entry and the same ring arc. Parsing and resolution are the URL
Standard's, as browsers do them: Ada (PyPI ``ada-url``, the parser in Node.js) passes all of
web-platform-tests' http(s) cases (tests/test_urls_wpt.py). So ``..\\page`` and ``http:\\\\h\\p``
read ``\\`` as ``/``, ``http:example.com/`` and ``///host`` name a host, and hosts go through
IDNA (UTS 46), IPv4 in any spelling becomes a dotted quad, and IPv6 is compressed. The canonical
form is the standard's URL with the crawler's rules on top, each applied here and only here
(docs/realweb.md lists the same):

- only http and https are crawled: ``mailto:x`` or ``ftp://h/`` is refused ("scheme");
- the fragment is dropped (it is never sent): ``/a#top`` is ``/a``;
- userinfo is dropped (never sent: the crawler logs in nowhere): ``http://u:p@h/`` is ``http://h/``;
- an empty query is dropped: ``/a?`` is ``/a``;
- a trailing dot of the host is dropped (the same DNS name: one seen-set key, one ring arc):
  ``h.test.`` is ``h.test``;
- a host that cannot be a DNS name (an empty label, a label over 63 characters, a name over
  253, a character other than a letter, a digit, "-" or "_") is refused, as no resolver finds
  it ("host"): ``a..b``, ``exa*mple.com``;
- escapes of unreserved characters are decoded and the other escapes upper-cased, as RFC 3986
  section 6.2.2 says they name the same resource: ``/%7euser/a%2fb`` is ``/~user/a%2Fb``;
- a URL longer than ``MAX_URL_LENGTH`` is refused ("too_long"): servers and logs cap URLs
  near 2 KB.

The standard itself lower-cases the host, drops the default port, removes dot segments, and
percent-encodes what it must (in UTF-8, but a query in the document's encoding: see
``query_codec``). It leaves a lone ``%`` as it is, and so does the canonical form.

Refusals raise :class:`InvalidURL`, whose ``reason`` is one of scheme, too_long, unparsable,
no_host, host, port. The parser says only "failure", so :func:`_failure_reason` names the part
that failed from the input's shape. The names are the ones the API and crawl.log always gave.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Ada's C API, through the cffi module ada_url's own classes call. Going through the classes
# costs a Python object and one call per component: the API gives the whole href and the
# offsets of its parts in two calls.
from ada_url._ada_wrapper import ffi as _ffi
from ada_url._ada_wrapper import lib as _ada

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_HOST_LENGTH = 253
_MAX_LABEL_LENGTH = 63
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_OMITTED = 0xFFFFFFFF  # ada_url_omitted: a component the URL does not have
_HTTP, _HTTPS = 0, 2  # ada_get_scheme_type (ada_url.SchemeType)
_DOMAIN = 0  # ada_get_host_type: a name, not an IPv4 or IPv6 address (ada_url.HostType)
# What a host name can hold for the crawler: letters, digits, "-" and "_" (sites use "_" in
# names, and resolvers look those up), in non-empty labels.
_DNS_NAME = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
# The URL Standard strips C0 controls and spaces around a URL and removes tabs and newlines in it.
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_AUTHORITY = re.compile(r"[/\\]*([^/\\?#]*)")
# The special-query percent-encode set: a query byte outside this range, or one of " # < > ',
# is escaped (URL Standard, "query state").
_QUERY_KEPT = frozenset(range(0x21, 0x7F)) - frozenset(b"\"#<>'")


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


def normalize_url(url: str, base: str | None = None, *, max_length: int = MAX_URL_LENGTH,
                  query_codec: str | None = None) -> str:
    """Parse ``url`` by the URL Standard, against ``base`` if given, and return its canonical
    http(s) form (see the module's docstring).

    ``query_codec`` is the Python codec of the document the link is in, when that is not UTF-8
    (see parse.charset.url_query_codec): the standard encodes the query of a link in a legacy
    document in the document's encoding. So ``?q=café`` on a windows-1252 page is ``?q=caf%E9``,
    and a character the encoding lacks becomes an escaped HTML character reference
    (``%26%2310003%3B`` for U+2713). The path is UTF-8 whatever the document's encoding.

    Raises :class:`InvalidURL` with ``reason`` one of: scheme, too_long, unparsable, no_host,
    host, port.
    """
    if not isinstance(url, str):
        raise InvalidURL("unparsable", repr(url))
    if len(url) > max_length and len(_cleaned(url)) > max_length:
        raise InvalidURL("too_long", url)
    result = _canonical(url, base)
    if query_codec is not None and not url.isascii():
        result = _with_query_in(result, url, query_codec)
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
# the canonical form of one is an origin plus the path without dot segments: no parse, no
# percent work, and the host checked once per host (_canonical_origin is cached).
_PLAIN_REF = re.compile(
    r"(?:(?:([Hh][Tt][Tt][Pp][Ss]?):)?//([A-Za-z0-9\-.]+(?::[0-9]*)?)(/[A-Za-z0-9\-._~/]*)?"
    r"|(/(?!/)[A-Za-z0-9\-._~/]*|[A-Za-z0-9\-._~][A-Za-z0-9\-._~/]*))(?=#|\Z)"
)


def resolve_plain(ref: str, origin: str, directory: str, *, max_length: int = MAX_URL_LENGTH) -> str | None:
    """``normalize_url(ref, base)`` for a plain ``ref`` (see ``_PLAIN_REF``), given the canonical
    base's ``origin`` ("scheme://host[:port]") and ``directory`` (the base up to the last
    "/" of its path). None when ``ref`` is not plain, or not valid, or too long: then ask
    :func:`normalize_url`, which also says why. The same answer for a fraction of the work:
    for such a path, the standard's path parsing is RFC 3986's dot-segment removal, and the
    host is canonicalised by the parser once per host. tests/test_urls.py fuzzes the two
    against each other, and tests/test_urls_wpt.py runs the standard's suite through both."""
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


def idna_encode(host: str) -> str:
    """A host name as the URL parser writes it: UTS 46 mapping, then IDNA to ASCII
    ("BÜCHER.example" gives "xn--bcher-kva.example"). ValueError (InvalidURL) when it is none."""
    return host_of(normalize_url(f"http://{host}/"))


# --- the parser, and the canonical form on top of it -----------------------------------


def _canonical(url: str, base: str | None) -> str:
    """The canonical form of ``url`` parsed against ``base``; InvalidURL when there is none."""
    try:
        data = url.encode()
    except UnicodeEncodeError:  # a lone surrogate: the standard's input is scalar values
        data = _SURROGATE.sub("\ufffd", url).encode()
    if base is None:
        parsed = _ada.ada_parse(data, len(data))
    else:
        base_data = base.encode() if base.isascii() else _SURROGATE.sub("\ufffd", base).encode()
        parsed = _ada.ada_parse_with_base(data, len(data), base_data, len(base_data))
    try:
        if not _ada.ada_is_valid(parsed):
            raise InvalidURL(_failure_reason(url, base), url)
        if _ada.ada_get_scheme_type(parsed) not in (_HTTP, _HTTPS):
            raise InvalidURL("scheme", url)
        href_view = _ada.ada_get_href(parsed)
        href = _ffi.unpack(href_view.data, href_view.length).decode("ascii")  # an http(s) href is ASCII
        parts = _ada.ada_get_components(parsed)
        host_start, host_end = parts.host_start, parts.host_end
        search, fragment = parts.search_start, parts.hash_start
        is_domain = _ada.ada_get_host_type(parsed) == _DOMAIN
        scheme_end = parts.protocol_end + 2  # "http://"
    finally:
        _ada.ada_free(parsed)
    if href[host_start] == "@":  # after userinfo, which goes
        host_start += 1
    host = href[host_start:host_end]
    if is_domain:
        try:
            host = _crawlable_name(host)
        except ValueError as exc:
            raise InvalidURL("host", url) from exc
    end = len(href) if fragment == _OMITTED else fragment
    path_end = end if search == _OMITTED else search
    port_and_path = href[host_end:path_end]
    if "%" in port_and_path:
        port_and_path = _ESCAPE.sub(_fix_escape, port_and_path)
    canonical = href[:scheme_end] + host + port_and_path
    if search == _OMITTED or end - search <= 1:
        return canonical  # no query, or an empty one
    query = href[search:end]
    return canonical + (_ESCAPE.sub(_fix_escape, query) if "%" in query else query)


@lru_cache(maxsize=4096)
def _crawlable_name(host: str) -> str:
    """A host name the parser gave (lower-case ASCII) without its trailing dot; ValueError when
    it cannot be a DNS name. Cached: a page's links name a handful of hosts."""
    name = host[:-1] if host.endswith(".") else host
    if len(name) > _MAX_HOST_LENGTH or not _DNS_NAME.fullmatch(name) \
            or any(len(label) > _MAX_LABEL_LENGTH for label in name.split(".")):
        raise ValueError(f"not a DNS name: {host!r}")
    return name


@lru_cache(maxsize=4096)
def _canonical_origin(scheme: str, authority: str) -> str:
    """``scheme://host[:port]`` of a plain authority, canonical, for resolve_plain. Cached:
    a page's links name a handful of hosts, mostly the page's own. Invalid ones raise and
    are not cached, which is fine: they are rare."""
    return _canonical(f"{scheme}://{authority}/", None)[:-1]


def _fix_escape(match: re.Match[str]) -> str:
    # A well-formed escape: decode an unreserved character, upper-case the rest.
    escape = match.group()
    char = chr(int(escape[1:], 16))
    return char if char in _UNRESERVED else escape.upper()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for the absolute paths an http URL has (the URL Standard's path
    state does the same to a path of unreserved characters and "/")."""
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


def _cleaned(url: str) -> str:
    """``url`` as the parser reads it: C0 controls and spaces stripped around it, tabs and
    newlines removed."""
    url = url.strip(_C0_AND_SPACE)
    return _TAB_OR_NEWLINE.sub("", url) if "\t" in url or "\n" in url or "\r" in url else url


def _failure_reason(url: str, base: str | None) -> str:
    """Which part of ``url`` the parser refused, from its shape: a name for the counters, not a
    second parse. Only an http(s) URL with an authority can fail against a valid http(s) base."""
    text = _cleaned(url)
    scheme = _SCHEME.match(text)
    if scheme is not None:
        if scheme[0][:-1].lower() not in DEFAULT_PORTS:
            return "scheme"
        text = text[scheme.end():]
    elif base is None:
        return "scheme"  # a relative reference, and nothing to resolve it against
    authority = _AUTHORITY.match(text)
    assert authority is not None  # the pattern matches every string
    host_port = authority[1].rpartition("@")[2]
    if host_port.startswith("["):
        end = host_port.find("]")
        if end < 0:
            return "unparsable"
        host, after = host_port[: end + 1], host_port[end + 1:]
        if after and not after.startswith(":"):
            return "port"
        port = after[1:]
    else:
        host, _, port = host_port.partition(":")
    if not host:
        return "no_host"
    if port and not (port.isascii() and port.isdigit() and int(port) < 65536):
        return "port"
    return "host"


# --- a query in a legacy document's encoding ---------------------------------------------


def _with_query_in(canonical: str, url: str, codec: str) -> str:
    """``canonical`` with the query that ``url`` wrote, encoded in ``codec`` as the URL
    Standard's query state does for a document in that encoding. Only a link whose own query
    has a non-ASCII character needs it (ASCII is the same in every such encoding); a link
    without a query of its own ("", "#f") takes its base's, which is already encoded."""
    text = _cleaned(url)
    start = text.find("?")
    fragment = text.find("#")
    if start < 0 or 0 <= fragment < start:
        return canonical
    query = text[start + 1:] if fragment < 0 else text[start + 1:fragment]
    if query.isascii():
        return canonical
    encoded = _encode_query(query, codec)
    encoded = _ESCAPE.sub(_fix_escape, encoded) if "%" in encoded else encoded
    question = canonical.find("?")
    return (canonical if question < 0 else canonical[:question]) + "?" + encoded


def _encode_query(query: str, codec: str) -> str:
    """The URL Standard's "percent-encode after encoding" with the special-query set: the bytes
    of ``query`` in ``codec``, escaped where the set says; a character the encoding lacks
    becomes ``%26%23`` + its code point in decimal + ``%3B`` (an HTML character reference).
    Runs of encodable characters are encoded whole, so a stateful encoding (ISO-2022-JP)
    switches modes as it does for the whole string: its encoder returns to ASCII before an
    error, as Python's does at the end of a run."""
    out: list[str] = []
    run: list[str] = []
    for char in query:
        try:
            char.encode(codec)
        except UnicodeEncodeError:
            out.append(_escape_bytes("".join(run).encode(codec)))
            run.clear()
            out.append(f"%26%23{ord(char)}%3B")
        else:
            run.append(char)
    out.append(_escape_bytes("".join(run).encode(codec)))
    return "".join(out)


def _escape_bytes(data: bytes) -> str:
    return "".join(chr(byte) if byte in _QUERY_KEPT else f"%{byte:02X}" for byte in data)
