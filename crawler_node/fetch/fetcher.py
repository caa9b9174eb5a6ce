"""One HTTP request, turned into a FetchResult that says what happened and nothing more.

The fetcher does not retry, redirect or decide politeness: it reports status, headers, body
(capped) and a named error kind, and the node routes each signal to the limiter it describes.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from crawler_node.core.addresses import is_ip_literal, is_public_address
from crawler_node.core.outcomes import ErrorKind
from crawler_node.core.response import FetchResult


class PrivateAddressError(OSError):
    def __init__(self, host: str, addresses: list[str]) -> None:
        super().__init__(f"{host} resolves only to non-public addresses {addresses}")
        self.host = host
        self.addresses = addresses


class PublicOnlyResolver(AbstractResolver):
    """Drops private, loopback and link-local answers, so a hostile DNS name cannot point the
    crawler at the machine's own network (SSRF). Used only for direct fetches."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        public = [a for a in answers if is_public_address(a["host"])]
        if not public:
            raise PrivateAddressError(host, [a["host"] for a in answers])
        return public

    async def close(self) -> None:
        await self._inner.close()


_PROXY_CREDENTIALS = ("Authorization", "Proxy-Authorization")  # looked up case-insensitively


class ProxyConnector(aiohttp.TCPConnector):
    """aiohttp's connector without a throwaway request per proxied request.

    Since 3.14 (which fixed proxy credentials missing from requests on pooled connections),
    aiohttp builds a second ClientRequest, addressed to the proxy, for every request through
    a proxy; on a pooled keep-alive connection it only serves to move the credentials into a
    Proxy-Authorization header. Without credentials and for an http:// target, that request
    only names the proxy a new connection goes to, the same every time: it is built once per
    proxy and reused. That took ~2 µs per request off the event loop: +1-4% pages/s,
    paired, in bench/throughput.py. With credentials, and for https:// targets (tunnelled by
    CONNECT through a request aiohttp then changes), aiohttp's own code runs."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._proxy_requests: dict[URL, aiohttp.ClientRequest] = {}  # one per proxy

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


class Fetcher:
    def __init__(
        self,
        *,
        user_agent: str,
        proxy: str | None,
        allow_private: bool,
        connect_timeout_s: float,
        fetch_timeout_s: float,
        max_body_bytes: int,
        max_connections: int,
    ) -> None:
        self._user_agent = user_agent
        self._proxy = proxy
        self._proxy_url = URL(proxy) if proxy else None  # parsed once, not on every request
        self._allow_private = allow_private or proxy is not None  # with a proxy we only reach the proxy
        self._timeout = aiohttp.ClientTimeout(total=fetch_timeout_s, sock_connect=connect_timeout_s)
        self._max_body_bytes = max_body_bytes
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        resolver = None if self._allow_private else PublicOnlyResolver()
        connector = ProxyConnector(
            # aiohttp pools proxied connections per *target* host, so a cap below the number of
            # hosts would close and reopen connections all the time; concurrency is bounded by
            # the node's global in-flight limit instead.
            limit=0 if self._proxy else self._max_connections,
            limit_per_host=0,  # per-host politeness is the host table's job
            resolver=resolver,
            ttl_dns_cache=300,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            headers={"User-Agent": self._user_agent, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
            auto_decompress=True,
            trust_env=False,  # the proxy is configured explicitly, never from the environment
            skip_auto_headers=(),
            max_field_size=16_384,
            read_bufsize=2**16,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, url: str, *, max_body_bytes: int | None = None) -> FetchResult:
        assert self._session is not None, "Fetcher.start() must be awaited first"
        limit = self._max_body_bytes if max_body_bytes is None else max_body_bytes
        result = FetchResult(url=url, started_at=time.time())
        started = time.monotonic()
        if not self._allow_private:
            host = urlsplit(url).hostname or ""
            if is_ip_literal(host) and not is_public_address(host.strip("[]")):
                result.error, result.error_detail = ErrorKind.NOT_ALLOWED, f"{host} is not a public address"
                return result
        try:
            async with self._session.get(_request_url(url), proxy=self._proxy_url, allow_redirects=False) as response:
                result.headers_s = time.monotonic() - started
                result.status = response.status
                result.headers = decode_headers(response.raw_headers)
                result._by_name = response.headers  # case-insensitive, first value first
                result.request_headers = list(response.request_info.headers.items())
                if self._proxy is None:  # through a proxy, the peer is the proxy: not recorded
                    transport = response.connection.transport if response.connection else None
                    peer = transport.get_extra_info("peername") if transport else None
                    result.remote_addr = peer[0] if peer else None
                result.body, cut = await _read_capped(response, limit)
                if cut:
                    result.truncated = "length"
                    result.error, result.error_detail = ErrorKind.TOO_LARGE, f"body exceeds {limit} bytes"
        except TimeoutError:
            result.error, result.error_detail = ErrorKind.TIMEOUT, "timed out"
        except PrivateAddressError as exc:
            result.error, result.error_detail = ErrorKind.NOT_ALLOWED, str(exc)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, PrivateAddressError):
                result.error, result.error_detail = ErrorKind.NOT_ALLOWED, str(exc.os_error)
            else:
                result.error, result.error_detail = ErrorKind.CONNECTION, str(exc)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            # ValueError: aiohttp rejects some malformed headers or URLs that way.
            result.error, result.error_detail = ErrorKind.CONNECTION, f"{type(exc).__name__}: {exc}"
        result.elapsed_s = time.monotonic() - started
        return result


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


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """Read at most ``limit`` decoded bytes. aiohttp inflates gzip in bounded chunks, so a
    gzip bomb costs at most about ``limit`` plus one chunk of memory before we stop."""
    declared = response.content_length
    if declared is not None and "Content-Encoding" not in response.headers:
        if declared > limit:
            return b"", True
        # The framing bounds the body: aiohttp reads exactly the declared length, in one call
        # rather than an async iteration per chunk.
        return await response.read(), False
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(65_536):
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), True
        chunks.append(chunk)
    return b"".join(chunks), False
