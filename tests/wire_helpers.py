"""What a node's outbox puts on the wire: URL entries forwarded to a recording peer through the
real Outboxes, decoded as that peer received them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import pytest
from aiohttp import web

from crawler_node.cluster.forwarding import Outboxes
from crawler_node.cluster.membership import Membership
from crawler_node.cluster.peer_client import PeerClient
from crawler_node.cluster.routing import Router
from crawler_node.frontier import FRONTIER_FILENAME, FrontierService, UrlEntry
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup


@asynccontextmanager
async def peer_at(handle: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[str]:
    """A peer on loopback whose ``POST /v1/urls`` is ``handle``; yields its URL."""
    app = web.Application()
    app.router.add_post("/v1/urls", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def peer_server(take: Callable[[dict], Awaitable[None]]) -> AsyncIterator[str]:
    """A peer on loopback whose ``POST /v1/urls`` hands each decoded batch to ``take`` and then
    acknowledges it (202); yields its URL."""

    async def handle(request: web.Request) -> web.Response:
        body = msgpack.unpackb(await request.read())
        await take(body)
        return web.json_response({"accepted": len(body["urls"])}, status=202)

    async with peer_at(handle) as url:
        yield url


async def forwarded_on_the_wire(tmp_path: Path, entries: list[UrlEntry]) -> list[dict]:
    """Forward ``entries`` from node a's outbox to a peer b that keeps every URL object it is
    sent; returns them as b decoded them (bounded: 10 s)."""
    received: list[dict] = []

    async def take(body: dict) -> None:
        received.extend(body["urls"])

    async with peer_server(take) as peer_url:
        frontier = FrontierService(path=tmp_path / FRONTIER_FILENAME, lease_timeout_s=60.0)
        await frontier.open()
        try:
            await frontier.outbox_put([("b", entry) for entry in entries])
            membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": peer_url}, now=0.0)
            router = Router(membership=membership, weights={}, vnodes=16, key_by="host")
            supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
            outboxes = Outboxes(frontier=frontier, router=router, membership=membership, client=PeerClient(secret=None),
                        supervisor=supervisor,
                                capacity=1000, batch=100, linger_s=0.0, failure_pause_s=0.1,
                                on_taken=lambda result: None, on_down=lambda peer, why: None,
                                on_alive=lambda peer: None, space=Wakeup(), clock=lambda: 0.0)
            async with outboxes.client:
                await outboxes.start()
                for _ in range(200):  # bounded: 10 s
                    if len(received) >= len(entries):
                        break
                    await asyncio.sleep(0.05)
                await supervisor.stop()
        finally:
            await frontier.close()
    return received
