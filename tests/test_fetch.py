"""The fetcher asks the server for exactly the URL the frontier holds."""

from __future__ import annotations

import asyncio

from aiohttp import web

from crawler_node.fetch import Fetcher


def test_the_request_line_is_the_canonical_url_byte_for_byte() -> None:
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.Response(text="ok")

    async def scenario() -> list[int | None]:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", record)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        fetcher = Fetcher(user_agent="test", proxy=None, allow_private=True, connect_timeout_s=5,
                          fetch_timeout_s=10, max_body_bytes=1000, max_connections=4)
        await fetcher.start()
        try:
            # Reserved characters kept encoded are another URL than the decoded ones
            # (RFC 3986 6.2.2.2): the server must see what the crawl records.
            return [(await fetcher.fetch(f"http://127.0.0.1:{port}{path}")).status
                    for path in ("/a%3Bb/c%29?q=%3D%26", "/plain?x=1")]
        finally:
            await fetcher.close()
            await runner.cleanup()

    assert asyncio.run(scenario()) == [200, 200]
    assert seen == ["/a%3Bb/c%29?q=%3D%26", "/plain?x=1"]
