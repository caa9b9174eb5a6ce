"""Outboxes built alone, against a real peer (an aiohttp server on loopback) and a real
frontier: a sender whose round raises unexpectedly is restarted and its outbox drains."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgpack
import pytest
from aiohttp import web

from crawler_node.cluster.membership import Membership
from crawler_node.cluster.outbox import Outboxes
from crawler_node.cluster.routing import Router
from crawler_node.frontier import FrontierService, UrlEntry
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup


class FlakyFrontier(FrontierService):
    """A frontier whose outbox reads fail ``failures`` times, as a bug or a full disk would."""

    failures = 2

    async def outbox_peek(self, peer: str, n: int):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the outbox could not be read")
        return await super().outbox_peek(peer, n)


@pytest.fixture
async def peer() -> AsyncIterator[tuple[str, list[str]]]:
    received: list[str] = []

    async def take(request: web.Request) -> web.Response:
        body = msgpack.unpackb(await request.read())
        received.extend(item["url"] for item in body["urls"])
        return web.json_response({"accepted": len(body["urls"])}, status=202)

    app = web.Application()
    app.router.add_post("/v1/urls", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        await runner.cleanup()


async def test_a_sender_that_raises_is_restarted_and_its_outbox_drains(tmp_path: Path, peer) -> None:
    url, received = peer
    frontier = FlakyFrontier(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await frontier.open()
    entries = [UrlEntry(f"http://b{i % 7}.test/{i}", f"b{i % 7}.test") for i in range(1200)]
    await frontier.outbox_put([("b", entry) for entry in entries])
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": url}, now=0.0)
    router = Router(membership=membership, weights={}, vnodes=16, key_by="host")
    supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
    outboxes = Outboxes(frontier=frontier, router=router, membership=membership, supervisor=supervisor,
                        capacity=10_000, batch=500, linger_s=0.0, failure_pause_s=0.1,
                        on_taken=lambda result: None, on_down=lambda peer, why: None, on_alive=lambda peer: None,
                        space=Wakeup(), clock=lambda: 0.0)
    async with aiohttp.ClientSession() as session:
        await outboxes.start(session)
        assert outboxes.counts == {"b": 1200}
        for _ in range(200):  # bounded: 10 s
            if not await frontier.outbox_counts():
                break
            await asyncio.sleep(0.05)
        await supervisor.stop()
    assert await frontier.outbox_counts() == {}
    assert sorted(received) == sorted(entry.url for entry in entries)
    assert supervisor.failures["outbox:b"] == 2 and outboxes.counters["forwarded"] == 1200
    await frontier.close()
