"""Outboxes built alone, against a real peer (an aiohttp server on loopback) and a real
frontier: a sender whose round raises unexpectedly is restarted and its outbox drains, and a
handback is owed to a peer until what was left for it is acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest
from aiohttp import web
from wire_helpers import peer_at, peer_server

from crawler_node.cluster.forwarding import Outboxes
from crawler_node.cluster.membership import Membership
from crawler_node.cluster.peer_client import PeerClient
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

    async def take(body: dict) -> None:
        received.extend(item["url"] for item in body["urls"])

    async with peer_server(take) as url:
        yield url, received


async def test_a_sender_that_raises_is_restarted_and_its_outbox_drains(tmp_path: Path, peer) -> None:
    url, received = peer
    frontier = FlakyFrontier(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await frontier.open()
    entries = [UrlEntry(f"http://b{i % 7}.test/{i}", f"b{i % 7}.test") for i in range(1200)]
    await frontier.outbox_put([("b", entry) for entry in entries])
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": url}, now=0.0)
    router = Router(membership=membership, weights={}, vnodes=16, key_by="host")
    supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
    outboxes = Outboxes(frontier=frontier, router=router, membership=membership, client=PeerClient(secret=None),
                        supervisor=supervisor,
                        capacity=10_000, batch=500, linger_s=0.0, failure_pause_s=0.1,
                        on_taken=lambda result: None, on_down=lambda peer, why: None, on_alive=lambda peer: None,
                        space=Wakeup(), clock=lambda: 0.0)
    async with outboxes.client:
        await outboxes.start()
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


@pytest.fixture
async def gated_peer() -> AsyncIterator[tuple[str, list[int], asyncio.Queue[None]]]:
    """A peer that answers each batch when the test puts a permit: (its URL, the sizes of the
    batches it answered, the permits)."""
    batches: list[int] = []
    permits: asyncio.Queue[None] = asyncio.Queue()

    async def take(body: dict) -> None:
        await permits.get()
        batches.append(len(body["urls"]))

    async with peer_server(take) as url:
        yield url, batches, permits


def outboxes_of(frontier: FrontierService, membership: Membership, supervisor: Supervisor) -> Outboxes:
    router = Router(membership=membership, weights={}, vnodes=16, key_by="host")
    return Outboxes(frontier=frontier, router=router, membership=membership, client=PeerClient(secret=None),
                        supervisor=supervisor,
                    capacity=10_000, batch=500, linger_s=0.0, failure_pause_s=0.1,
                    on_taken=lambda result: None, on_down=lambda peer, why: None, on_alive=lambda peer: None,
                    space=Wakeup(), clock=lambda: 0.0)


async def test_a_handback_is_owed_until_the_last_row_the_sweep_left_is_acknowledged(tmp_path: Path,
                                                                                     gated_peer) -> None:
    """What a sweep left for a peer (Outboxes.mark_handback, cluster.readiness rule 3): owed
    while any of it is unacknowledged, however many batches it takes; rows put after the mark
    do not extend it."""
    url, batches, permits = gated_peer
    frontier = FrontierService(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await frontier.open()
    await frontier.outbox_put([("b", UrlEntry(f"http://b.test/{i}", "b.test")) for i in range(1200)])
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": url}, now=0.0)
    supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
    outboxes = outboxes_of(frontier, membership, supervisor)

    async def answered(n: int) -> None:
        permits.put_nowait(None)
        for _ in range(200):  # bounded: 10 s
            if len(batches) >= n and outboxes.counts.get("b", 0) <= max(0, 1200 + 600 - 500 * n):
                return
            await asyncio.sleep(0.05)
        pytest.fail(f"batch {n} not acknowledged")

    try:
        async with outboxes.client:
            await outboxes.start()
            outboxes.mark_handback(await frontier.outbox_last_ids())
            assert outboxes.owes_handback("b") and not outboxes.owes_handback("c")
            await frontier.outbox_put([("b", UrlEntry(f"http://b.test/later/{i}", "b.test")) for i in range(600)])
            outboxes.note_outboxed({"b": 600})
            await answered(1)
            assert outboxes.owes_handback("b"), "500 of the 1,200 rows the sweep left are acknowledged"
            await answered(2)
            assert outboxes.owes_handback("b"), "1,000 of them"
            await answered(3)  # the last 200 the sweep left, and 300 put after it
            assert not outboxes.owes_handback("b") and outboxes.counts["b"] == 300
            await answered(4)
            assert batches == [500, 500, 500, 300] and not outboxes.owes_handback("b")
            await supervisor.stop()
    finally:
        await frontier.close()


async def test_rows_rerouted_from_a_down_peer_are_a_handback_owed_to_their_new_owner(tmp_path: Path,
                                                                                     gated_peer) -> None:
    """b is down: what this node owed it goes to the members that own its hosts now, c among
    them, and c, if it is starting, waits for them as for any handback."""
    url, batches, permits = gated_peer
    frontier = FrontierService(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await frontier.open()
    hosts = [f"h{i}.test" for i in range(60)]
    await frontier.outbox_put([("b", UrlEntry(f"http://{host}/", host)) for host in hosts])
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:9",
                                                        "c": url}, now=0.0, suspect_after_s=1.0, down_after_s=2.0)
    membership.observe_ok("c", 5.0)
    membership.observe_failure("b", 5.0)
    membership.tick(5.0)
    assert membership.live_ids() == {"a", "c"}
    supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
    outboxes = outboxes_of(frontier, membership, supervisor)
    try:
        async with outboxes.client:
            await outboxes.start()  # b's sender finds it down and reroutes its rows
            for _ in range(200):  # bounded: 10 s
                if outboxes.counters["rerouted"]:
                    break
                await asyncio.sleep(0.05)
            to_c = outboxes.counts.get("c", 0)
            assert to_c > 0, outboxes.counts
            assert outboxes.owes_handback("c") and not outboxes.owes_handback("b")
            permits.put_nowait(None)
            for _ in range(200):  # bounded: 10 s
                if not outboxes.counts.get("c"):
                    break
                await asyncio.sleep(0.05)
            assert batches == [to_c] and not outboxes.owes_handback("c")
            await supervisor.stop()
    finally:
        await frontier.close()



async def forwarded_to(tmp_path: Path, url: str, batches: list[list[UrlEntry]]) -> Outboxes:
    """Node a's outbox sends each of ``batches`` in turn to peer b at ``url``, each waited for
    until acknowledged (bounded: 10 s a batch); returns the outboxes, for their counters."""
    frontier = FrontierService(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await frontier.open()
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", "b": url}, now=0.0)
    supervisor = Supervisor(on_fatal=pytest.fail, retry_s=0.05)
    outboxes = outboxes_of(frontier, membership, supervisor)
    try:
        async with outboxes.client:
            await outboxes.start()
            for batch in batches:
                await frontier.outbox_put([("b", entry) for entry in batch])
                outboxes.note_outboxed({"b": len(batch)})
                for _ in range(200):
                    if not await frontier.outbox_counts():
                        break
                    await asyncio.sleep(0.05)
            await supervisor.stop()
    finally:
        await frontier.close()
    return outboxes


async def test_batches_go_out_gzipd_and_arrive_whole(tmp_path: Path) -> None:
    """A member's batch is sent with Content-Encoding: gzip (its rows repeat hosts, vias and
    keys) and the peer's aiohttp decodes it before the handler; a batch of a row or two, where
    gzip's frame would eat the saving, goes as it is."""
    arrived: list[tuple[str | None, int, list[dict]]] = []  # (coding, bytes on the wire, rows)

    async def handle(request: web.Request) -> web.Response:
        wire = request.content_length or 0
        body = msgpack.unpackb(await request.read())
        arrived.append((request.headers.get("Content-Encoding"), wire, body["urls"]))
        return web.json_response({"accepted": len(body["urls"])}, status=202)

    entries = [UrlEntry(f"http://b{i % 7}.test/section/page-{i}.html", f"b{i % 7}.test", 2, 0, 0, 0,
                        f"http://a.test/index-{i // 50}.html") for i in range(300)]
    async with peer_at(handle) as url:
        outboxes = await forwarded_to(tmp_path, url, [entries, [UrlEntry("http://b.test/alone", "b.test")]])
    big, small = arrived
    assert big[0] == "gzip" and small[0] is None
    assert [(row["url"], row["via"]) for row in big[2]] == [(e.url, e.via) for e in entries]
    assert small[2][0]["url"] == "http://b.test/alone"
    sent, packed = outboxes.counters["sent_bytes"], outboxes.counters["sent_msgpack_bytes"]
    assert sent == big[1] + small[1] and sent < packed / 3, (sent, packed)


async def test_a_peer_that_refuses_gzip_gets_the_same_rows_as_they_are(tmp_path: Path) -> None:
    """Something between members that takes no gzip (a 415): nothing is lost, and the rows go
    again uncompressed, to that peer only."""
    codings: list[str | None] = []
    received: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        coding = request.headers.get("Content-Encoding")
        codings.append(coding)
        if coding is not None:
            return web.json_response({"error": "unsupported_encoding"}, status=415)
        body = msgpack.unpackb(await request.read())
        received.extend(row["url"] for row in body["urls"])
        return web.json_response({"accepted": len(body["urls"])}, status=202)

    entries = [UrlEntry(f"http://b.test/{i}", "b.test") for i in range(1200)]
    async with peer_at(handle) as url:
        outboxes = await forwarded_to(tmp_path, url, [entries])
    assert sorted(received) == sorted(entry.url for entry in entries)
    assert codings == ["gzip", None, None, None]  # batches of 500, 500, 200 after the refusal
    assert outboxes.counters["forward_gzip_refused"] == 1 and outboxes.counters["forwarded"] == 1200
