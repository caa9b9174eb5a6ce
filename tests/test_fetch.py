"""The fetcher asks the server for exactly the URL the frontier holds, reads no more of a
body than the cap allows, whether its length is declared or it arrives compressed, and hands
over response headers that store back as the bytes that came. Through a proxy, every request
reaches its own host and carries the proxy's credentials, if any."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip

import aiohttp
from aiohttp import web

from crawler_node.config import FetchConfig
from crawler_node.core.encoding import decode_body
from crawler_node.fetch.fetcher import ErrorKind, Fetcher, FetchResult, decode_headers
from crawler_node.store.warc import http_head


@contextlib.asynccontextmanager
async def _fetcher_and_server(handler, *, proxy_userinfo: str | None = None, max_body_bytes: int = 1000):
    """A Fetcher and a local server answering every GET with ``handler``: fetched directly,
    or used as the fetcher's HTTP proxy when ``proxy_userinfo`` is given ("" for none)."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = f"127.0.0.1:{runner.addresses[0][1]}"
    proxy = None if proxy_userinfo is None else f"http://{proxy_userinfo}{server}"
    fetcher = Fetcher(config=FetchConfig(user_agent="test", proxy=proxy, allow_private=True, connect_timeout_s=5,
                                         fetch_timeout_s=10, max_body_bytes=max_body_bytes))
    await fetcher.start()
    try:
        yield fetcher, server
    finally:
        await fetcher.close()
        await runner.cleanup()


async def _serve(handler, fetch_paths: list[str], *, max_body_bytes: int = 1000) -> list[FetchResult]:
    async with _fetcher_and_server(handler, max_body_bytes=max_body_bytes) as (fetcher, server):
        return [await fetcher.fetch(f"http://{server}{path}") for path in fetch_paths]


def test_body_cap_holds_for_declared_lengths_and_for_compressed_bodies() -> None:
    async def body(request: web.Request) -> web.Response:
        size = int(request.query["size"])
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        if "gzip" in request.query:
            return web.Response(body=gzip.compress(data), headers={"Content-Encoding": "gzip"})
        return web.Response(body=data)

    at_cap, over_cap, gzip_at_cap, gzip_bomb = asyncio.run(_serve(body, [
        "/?size=1000", "/?size=1001", "/?size=1000&gzip", "/?size=5000000&gzip"]))
    assert (at_cap.error, len(at_cap.body), at_cap.truncated) == (None, 1000, None)
    assert at_cap.body == bytes(range(256)) * 3 + bytes(232)
    # Content-Length announced more than the cap: the first max_body_bytes are kept.
    assert (over_cap.error, over_cap.truncated) == (ErrorKind.TOO_LARGE, "length")
    assert over_cap.body == at_cap.body
    # A gzip body is kept as sent (the WARC record stores it so); its readers inflate it.
    assert gzip_at_cap.error is None and gzip_at_cap.content_encoding == "gzip"
    assert decode_body(gzip_at_cap.body, gzip_at_cap.content_encoding, 10_000).body == at_cap.body
    # 5 MB inflate from a few kB on the wire: the cap holds for the bytes received, and
    # inflating stops at the reader's limit.
    assert gzip_bomb.error == ErrorKind.TOO_LARGE and gzip_bomb.truncated == "length"
    assert len(gzip_bomb.body) == 1000
    inflated = decode_body(gzip_bomb.body, "gzip", 2000)
    assert len(inflated.body) == 2000 and inflated.truncated


def test_the_request_line_is_the_canonical_url_byte_for_byte() -> None:
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.Response(text="ok")

    # Reserved characters kept encoded are another URL than the decoded ones
    # (RFC 3986 6.2.2.2): the server must see what the crawl records.
    results = asyncio.run(_serve(record, ["/a%3Bb/c%29?q=%3D%26", "/plain?x=1"]))
    assert [result.status for result in results] == [200, 200]
    assert seen == ["/a%3Bb/c%29?q=%3D%26", "/plain?x=1"]


def test_response_headers_are_stored_as_the_bytes_that_came() -> None:
    async def named(request: web.Request) -> web.Response:
        return web.Response(text="x", headers={"Content-Disposition": 'attachment; filename="café.txt"'})

    [result] = asyncio.run(_serve(named, ["/"]))
    head = http_head("HTTP/1.1 200 OK", result.headers)
    assert b'filename="caf\xc3\xa9.txt"' in head  # UTF-8 as sent, not encoded twice
    # Bytes that are not UTF-8 at all come back out unchanged too.
    raw = ((b"X-Legacy", b"caf\xe9"), (b"Content-Type", b"text/html"))
    assert http_head("HTTP/1.1 200 OK", decode_headers(raw)) == (
        b"HTTP/1.1 200 OK\r\nX-Legacy: caf\xe9\r\nContent-Type: text/html\r\n\r\n")


async def _through_proxy(proxy_userinfo: str, urls: list[str]) -> list[str]:
    """Fetch ``urls`` through a stand-in HTTP proxy that answers with the request line's
    target, the Host header and the Proxy-Authorization it received."""
    async def answer(request: web.Request) -> web.Response:
        credentials = request.headers.get("Proxy-Authorization")
        return web.Response(text=f"{request.url}|{request.headers['Host']}|{credentials}")

    async with _fetcher_and_server(answer, proxy_userinfo=proxy_userinfo) as (fetcher, _):
        one_by_one = [await fetcher.fetch(url) for url in urls]  # later ones on pooled connections
        at_once = await asyncio.gather(*(fetcher.fetch(url) for url in urls))  # new connections too
        return [result.body.decode() for result in one_by_one + list(at_once)]


URLS = ["http://a.test/1", "http://b.test:8080/2", "http://a.test/3", "http://b.test:8080/4"]


def test_through_a_proxy_each_request_reaches_its_own_host(monkeypatch) -> None:
    built = []
    build = aiohttp.TCPConnector._update_proxy_auth_header_and_build_proxy_req
    monkeypatch.setattr(aiohttp.TCPConnector, "_update_proxy_auth_header_and_build_proxy_req",
                        lambda connector, request: built.append(request) or build(connector, request))
    answers = asyncio.run(_through_proxy("", URLS))
    hosts = [url.split("/")[2] for url in URLS]
    assert answers == [f"{url}|{host}|None" for url, host in zip(URLS, hosts)] * 2
    # The request that names the proxy was built once, not once per request (FetchConnector).
    assert len(built) == 1


def test_proxy_credentials_go_with_every_request() -> None:
    answers = asyncio.run(_through_proxy("crawler:s3cret@", URLS))
    credentials = "Basic " + base64.b64encode(b"crawler:s3cret").decode()
    assert [answer.split("|")[-1] for answer in answers] == [credentials] * 2 * len(URLS)
