"""The SURT key of a URL, as cdxj-indexer and pywb compute it (``surt.surt(url)``), and a
direct computation of it for the URLs a crawl mostly records.

surt parses, unescapes, canonicalises and reassembles every URL in Python: ~26 µs per call,
about a fifteenth of what the store spends on a real page (its WARC records, digests and
gzip included). Most URLs the crawl records are canonical (core.urls) and plain: http(s), a
lowercase DNS name or a dotted IPv4 address, perhaps a port, a path of unreserved characters
and "/", no query. For those, surt's canonicalisation does only this: "www", "www1"... is
stripped from the host, the host's labels are reversed and joined by ",", a default port is
dropped, empty path segments but the last are dropped, the path is lowercased and a trailing
"/" is stripped unless the path is "/". ``plain_key`` does that (~1.5 µs) and returns None for
anything else, which goes to surt. tests/test_cdxj.py compares the two on generated URLs.
"""

from __future__ import annotations

import re

# A host with anything but digits and dots: surt tries no IP forms on it (they are only those).
_PLAIN_URL = re.compile(r"(https?)://([a-z0-9-]++(?:\.[a-z0-9-]++)*+)(?::([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*+)?")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
# A dotted quad without leading zeros surt keeps as it is (first octet not 0: "0.x" is octal to it).
_IPV4 = re.compile(rf"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[1-9])(?:\.{_OCTET}){{3}}")
_WWW = re.compile(r"www[0-9]*\.")
_DEFAULT_PORT = {"http": "80", "https": "443"}


def url_key(url: str) -> str:
    """surt.surt(url), or the URL itself where surt raises (as cdxj-indexer does)."""
    key = plain_key(url)
    if key is not None:
        return key
    import surt  # type: ignore[import-untyped]  # (loaded as the store opens: cdxj.load_libraries)

    try:
        return surt.surt(url)
    except Exception:  # noqa: BLE001 - as cdxj-indexer does: the URL itself is the key
        return url


def plain_key(url: str) -> str | None:
    """``surt.surt(url)`` for a plain URL (see the module's docstring), else None."""
    match = _PLAIN_URL.fullmatch(url)
    if match is None:
        return None
    scheme, host, port, path = match.groups()
    if not host.strip("0123456789."):
        if _IPV4.fullmatch(host) is None:
            return None  # "1.2.3", "010.0.0.1", "999.1.1.1": surt reads these its own way
    elif (www := _WWW.match(host)) is not None:
        host = host[www.end():]
    if port is not None:
        if int(port) > 65535:
            return None  # surt raises on it
        if port == _DEFAULT_PORT[scheme]:
            port = None
    if not path:
        path = "/"
    elif "//" in path or "/." in path:
        segments = path[1:].split("/")
        if any(segment in (".", "..") for segment in segments):
            return None
        path = "/" + "".join(segment + "/" for segment in segments[:-1] if segment) + segments[-1]
    path = path.lower()
    if len(path) > 1 and path[-1] == "/":
        path = path[:-1]
    reversed_host = ",".join(reversed(host.split(".")))
    return f"{reversed_host}:{port}){path}" if port else f"{reversed_host}){path}"
