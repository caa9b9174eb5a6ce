"""One HTTP request, turned into a FetchResult that says what happened and nothing more.

The fetcher does not retry, redirect or decide politeness: it reports status, headers, body
(capped) and a named error kind, and the node routes each signal to the limiter it describes.

Trust (TLS): with ``ca_bundle`` (``--ca-bundle FILE``) the CAs of that PEM file are trusted,
and only they. Without it, the system's: ``ssl.create_default_context()`` at start, which
loads OpenSSL's default locations, and OpenSSL's own environment variables replace those:
``SSL_CERT_FILE`` (a PEM bundle) and ``SSL_CERT_DIR`` (a directory of hashed certificates,
``openssl rehash``). They are read when the fetcher is made, so they must be set in the node's
environment before it starts. A certificate that fails verification (expired, self-signed, an
unknown CA, another host's name) ends that URL with ErrorKind.TLS, OpenSSL's reason in the
error, and is never retried.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from crawler_node.config import FetchConfig
from crawler_node.core.addresses import is_ip_literal, is_public_address
from crawler_node.core.encoding import ACCEPT_ENCODING
from crawler_node.core.outcomes import ErrorKind
from crawler_node.core.response import FetchResult
from crawler_node.fetch.dns import PrivateAddressError, Resolver

__all__ = ["ErrorKind", "Fetcher", "FetchResult", "PrivateAddressError", "decode_headers", "tls_context"]


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """The context every https request verifies with (see the module's docstring)."""
    return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else ssl.create_default_context()


class PeerResponse(aiohttp.ClientResponse):
    """A response that remembers the address of the server that sent it.

    ``start`` is handed the connection before the response is read; by the time the caller
    sees the headers, aiohttp has often read a small body too and given the connection back
    to the pool (or closed it), and the transport is gone from the response. Reading the peer
    here works the same for new and pooled keep-alive connections, and costs one dict lookup
    (asyncio keeps the peername of a socket transport from its creation)."""

    peer_address: str | None = None

    async def start(self, connection):
        transport = connection.transport
        if transport is not None:
            peer = transport.get_extra_info("peername")
            if peer:
                self.peer_address = peer[0]
        return await super().start(connection)


_PROXY_CREDENTIALS = ("Authorization", "Proxy-Authorization")  # looked up case-insensitively


class FetchConnector(aiohttp.TCPConnector):
    """aiohttp's connector with a bound on idle connections, and without a throwaway request
    per proxied request.

    **Idle connections.** aiohttp keeps a keep-alive connection per *target* host (through a
    proxy too: a proxied connection is keyed by the host it last asked for) for
    ``keepalive_timeout``, and counts only connections in use against its limit. Crawling many
    hosts, that is one open socket per host fetched from in the last 15 s: 1,500 held open to
    the proxy by a node that had just crawled 1,500 one-page hosts (tests/test_idle_connections.py),
    ~20,000 at 2,000 hosts/s, past a default RLIMIT_NOFILE of 1,024. Here at most
    ``keepalive_hosts`` hosts keep idle connections (each as many as it had requests in
    flight); past that, the host whose idle connections went into the pool first loses them
    (closed), which is the least recently used but for a host that never went fully idle.

    **Proxied requests.** Since 3.14 (which fixed proxy credentials missing from requests on
    pooled connections), aiohttp builds a second ClientRequest, addressed to the proxy, for
    every request through a proxy; on a pooled keep-alive connection it only serves to move the
    credentials into a Proxy-Authorization header. Without credentials and for an http://
    target, that request only names the proxy a new connection goes to, the same every time:
    it is built once per proxy and reused. That took ~2 µs per request off the event loop:
    +1-4% pages/s, paired, in bench/throughput.py. With credentials, and for https:// targets
    (tunnelled by CONNECT through a request aiohttp then changes), aiohttp's own code runs.

    Both override private parts of aiohttp 3.14 (``_release`` and its ``_conns``; the proxy
    hook); tests/test_idle_connections.py and tests/test_fetch.py fail should they change."""

    def __init__(self, *, keepalive_hosts: int, **kwargs) -> None:
        if keepalive_hosts < 0:
            raise ValueError(f"keepalive_hosts must be >= 0, got {keepalive_hosts}")
        super().__init__(**kwargs)
        self._keepalive_hosts = keepalive_hosts
        self.idle_closed = 0  # idle connections closed to keep the bound
        self._proxy_requests: dict[URL, aiohttp.ClientRequest] = {}  # one per proxy

    def _release(self, key, protocol, *, should_close: bool = False) -> None:
        super()._release(key, protocol, should_close=should_close)
        # A dict keeps insertion order, and a host's entry is made when its first idle
        # connection goes in and dropped when its last one is taken out again (aiohttp's _get).
        pool = self._conns
        while len(pool) > self._keepalive_hosts:
            oldest = next(iter(pool))
            for idle, _ in pool.pop(oldest):
                idle.close()
                self.idle_closed += 1

    def _update_proxy_auth_header_and_build_proxy_req(self, req: aiohttp.ClientRequest, *args, **kwargs):
        # A private hook of aiohttp (3.14): should a later version call it differently, its own
        # code runs, unchanged.
        proxy = req.proxy
        if (args or kwargs or proxy is None or req.is_ssl() or req.proxy_auth is not None or proxy.raw_user is not None
                or (req.proxy_headers is not None and any(name in req.proxy_headers for name in _PROXY_CREDENTIALS))):
            return super()._update_proxy_auth_header_and_build_proxy_req(req, *args, **kwargs)
        proxy_request = self._proxy_requests.get(proxy)
        if proxy_request is None:
            proxy_request = self._proxy_requests[proxy] = super()._update_proxy_auth_header_and_build_proxy_req(req)
        return proxy_request


def cookie_jar() -> aiohttp.CookieJar:
    """Cookies kept as a browser keeps them: by RFC 6265's domain and path rules, expired when
    they say, for IP-address hosts too (`unsafe`: aiohttp's default ignores those), and sent
    back as they came (`quote_cookie=False`: aiohttp would quote a value with "/" or "=", and a
    base64 session id then reaches the server changed). Bounded by aiohttp (since 3.14.4): 180
    cookies per domain, 3,300 in all, evicted as Firefox does; a Cookie header of at most 150
    cookies and 8,190 bytes. In memory: a restart, or a takeover by another node, starts
    without them."""
    return aiohttp.CookieJar(unsafe=True, quote_cookie=False)


class Fetcher:
    def __init__(self, *, config: FetchConfig, resolver: Resolver | None = None) -> None:
        """``resolver``: resolves the sites' names for direct fetches (fetch.dns), shared with
        the per-IP gates; made here when not given; the fetcher closes it. Through a proxy,
        the proxy resolves, and no resolver of ours is used. ``config.keepalive_hosts``: hosts
        whose idle keep-alive connections are kept (FetchConnector). ``config.cookies``: keep
        what sites set and send it back (`cookie_jar`), or neither."""
        proxy = config.proxy
        if proxy is not None and resolver is not None:
            raise ValueError("through a proxy the proxy resolves names: pass no resolver")
        self._user_agent = config.user_agent
        self._proxy = proxy
        self._proxy_url = URL(proxy) if proxy else None  # parsed once, not on every request
        self._allow_private = config.allow_private or proxy is not None  # with a proxy we only reach the proxy
        self._timeout = aiohttp.ClientTimeout(total=config.fetch_timeout_s, sock_connect=config.connect_timeout_s)
        self._max_body_bytes = config.max_body_bytes
        # a few more than the requests in flight: robots.txt and a redirect's next hop share them
        self._max_connections = config.global_inflight + 8
        self._keepalive_hosts = config.keepalive_hosts
        self._cookies = config.cookies
        self._tls = tls_context(config.ca_bundle)  # made now: a bad bundle fails the node at its start
        if proxy is None and resolver is None:
            resolver = Resolver(server=None, allow_private=config.allow_private, cache_hosts=config.dns_cache_hosts,
                                cache_s=config.dns_cache_s, timeout_s=config.dns_timeout_s)
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = FetchConnector(
            keepalive_hosts=self._keepalive_hosts,
            # aiohttp pools proxied connections per *target* host, so a cap below the number of
            # hosts would close and reopen connections all the time; concurrency is bounded by
            # the node's global in-flight limit instead.
            limit=0 if self._proxy else self._max_connections,
            limit_per_host=0,  # per-host politeness is the host table's job
            resolver=self._resolver,
            # Our resolver caches each name for its TTL; aiohttp's cache would keep it for a
            # fixed time. Through a proxy, aiohttp's resolver and cache find the proxy.
            use_dns_cache=self._resolver is None,
            ttl_dns_cache=300,
            ssl=self._tls,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            headers={"User-Agent": self._user_agent, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8",
                     "Accept-Encoding": ACCEPT_ENCODING},
            # The body is kept as the server sent it (Content-Encoding and all): the WARC record
            # stores it so, and its readers decode it (core.encoding) within their own limits.
            auto_decompress=False,
            trust_env=False,  # the proxy is configured explicitly, never from the environment
            skip_auto_headers=(),
            max_field_size=16_384,
            read_bufsize=2**16,
            # Through a proxy, the peer is the proxy: no address is recorded.
            response_class=aiohttp.ClientResponse if self._proxy else PeerResponse,
            cookie_jar=cookie_jar() if self._cookies else aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._resolver is not None:  # a resolver passed in is not the connector's to close
            await self._resolver.close()

    async def fetch(self, url: str, *, max_body_bytes: int | None = None,
                    headers: dict[str, str] | None = None) -> FetchResult:
        """``headers``: sent with this request besides the session's (a recrawl's validators)."""
        assert self._session is not None, "Fetcher.start() must be awaited first"
        limit = self._max_body_bytes if max_body_bytes is None else max_body_bytes
        result = FetchResult(url=url, started_at=time.time())
        started = time.monotonic()
        if not self._allow_private:
            host = urlsplit(url).hostname or ""
            if is_ip_literal(host) and not is_public_address(host.strip("[]")):
                result.error, result.error_detail = ErrorKind.NOT_ALLOWED, f"{host} is not a public address"
                return result
        chunks: list[bytes] = []  # the body so far: kept when a timeout or a reset cuts it
        try:
            async with self._session.get(_request_url(url), proxy=self._proxy_url, allow_redirects=False,
                                         headers=headers) as response:
                result.headers_s = time.monotonic() - started
                result.status = response.status
                version = response.version
                protocol = f"HTTP/{version.major}.{version.minor}" if version is not None else "HTTP/1.1"
                result.status_line = f"{protocol} {response.status} {response.reason or ''}"
                result.headers = decode_headers(response.raw_headers)
                result._by_name = response.headers  # case-insensitive, first value first
                result.request_headers = list(response.request_info.headers.items())
                if self._proxy is None:
                    result.remote_addr = response.peer_address  # type: ignore[attr-defined]
                if await _read_capped(response, limit, chunks):
                    result.truncated = "length"
                    result.error, result.error_detail = ErrorKind.TOO_LARGE, f"body exceeds {limit} bytes"
                    response.close()  # the rest of the body is unread: the connection cannot be reused
                result.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except TimeoutError:
            result.error, result.error_detail = ErrorKind.TIMEOUT, "timed out"
            _keep_partial(result, chunks, "time")
        except aiohttp.ClientConnectorCertificateError as exc:
            result.error, result.error_detail = ErrorKind.TLS, _certificate_reason(exc.certificate_error)
        except aiohttp.ClientConnectorSSLError as exc:
            result.error, result.error_detail = _handshake_failure(exc.os_error)
        except aiohttp.ClientConnectorDNSError as exc:
            cause = exc.os_error
            if isinstance(cause, PrivateAddressError):
                result.error, result.error_detail = ErrorKind.NOT_ALLOWED, str(cause)
            elif self._proxy is not None:  # the proxy's own name: the proxy cannot be reached
                result.error, result.error_detail = ErrorKind.PROXY, f"proxy: {cause}"
            else:
                result.error, result.error_detail = ErrorKind.DNS, str(cause)
        except aiohttp.ClientConnectorError as exc:
            result.error, result.error_detail = ErrorKind.CONNECTION, str(exc)
        except ssl.SSLCertVerificationError as exc:  # not wrapped by aiohttp (a tunnel's TLS, say)
            result.error, result.error_detail = ErrorKind.TLS, _certificate_reason(exc)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            # ValueError: aiohttp rejects some malformed headers or URLs that way.
            result.error, result.error_detail = ErrorKind.CONNECTION, f"{type(exc).__name__}: {exc}"
            _keep_partial(result, chunks, "disconnect")
        result.elapsed_s = time.monotonic() - started
        return result


def _keep_partial(result: FetchResult, chunks: list[bytes], why: str) -> None:
    """The response began (its headers came) and was cut: keep what was read, and say so, so
    the WARC record is marked WARC-Truncated and is never a complete, empty 200. "time" and
    "disconnect" are WARC 1.1's words for a timeout and a connection lost mid-body."""
    if result.status is not None:
        result.body = b"".join(chunks)
        result.truncated = why


def _certificate_reason(error: BaseException) -> str:
    """OpenSSL's reason: "certificate has expired", "self-signed certificate", "unable to get
    local issuer certificate", "Hostname mismatch, certificate is not valid for 'x'."..."""
    reason = getattr(error, "verify_message", None) or getattr(error, "reason", None) or str(error)
    return f"certificate verify failed: {reason}"


def _handshake_failure(error: BaseException) -> tuple[ErrorKind, str]:
    """A TLS handshake that failed without a certificate verdict.

    The peer closing mid-handshake (an EOF, a reset) is what an overloaded server or a
    middlebox does for a while: a connection error, retried. Everything else (no common
    protocol version or cipher, a plain-http server on the https port, a TLS alert such as
    "unrecognized name") is how that server is configured and will fail the same way on every
    attempt: TLS, final for the URL, like a certificate error."""
    if isinstance(error, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionError):
        return ErrorKind.CONNECTION, f"TLS handshake cut: {error}"
    reason = getattr(error, "reason", None)
    return ErrorKind.TLS, f"TLS handshake failed: {reason or error}"


def decode_headers(raw_headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Header lines as text that encodes back to the exact bytes received: UTF-8 with
    surrogateescape, as the store writes them (warc.http_head). Decoded as Latin-1 before,
    a UTF-8 value (a file name, an IRI in a Link header) was stored double-encoded."""
    return [(name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
            for name, value in raw_headers]


def _request_url(url: str) -> URL | str:
    """The URL to put on the wire. A canonical URL (urls.normalize_url: ASCII, already
    percent-encoded) goes out exactly as the frontier holds it: re-quoted by yarl it would
    also cost a parse, and yarl decodes some reserved characters ("%3B" becomes ";"), which
    asks the server for another URL than the one recorded in the WARC and crawl.log."""
    if url.isascii() and " " not in url:
        return URL(url, encoded=True)
    return url


async def _read_capped(response: aiohttp.ClientResponse, limit: int, chunks: list[bytes]) -> bool:
    """Append the body as sent (de-chunked, still content-encoded) to ``chunks`` up to ``limit``
    bytes; True when there was more (then exactly ``limit`` bytes were kept, also when
    Content-Length announced more). The chunks stay with the caller, so what was read before
    a timeout is kept."""
    content = response.content
    size = 0
    while True:
        # Whatever is buffered, in one piece: a small body that came with the headers is one
        # call that does not wait.
        chunk = await content.readany()
        if not chunk:
            return False
        size += len(chunk)
        if size > limit:
            chunks.append(chunk[:len(chunk) - (size - limit)])
            return True
        chunks.append(chunk)
