"""Heartbeats built alone against real peers on loopback: an answer that is not a member list
counts as a failure and is logged, and the heartbeats go on, so a dead peer is still found."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from crawler_node.cluster.heartbeats import Heartbeats, parse_members_answer
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import BadPeerAnswer, PeerClient
from crawler_node.runtime.supervisor import Supervisor

MALFORMED: list[Callable[[], web.Response]] = [
    lambda: web.json_response([{"id": "x", "url": "http://127.0.0.9:1"}]),  # a list where an object belongs
    lambda: web.json_response({"members": "x"}),
    lambda: web.json_response({"members": [1, 2]}),
    lambda: web.json_response({"members": {}}),
    lambda: web.json_response({"leaving": "yes", "members": []}),
    lambda: web.Response(text="<html>not json</html>", content_type="text/html"),
    lambda: web.Response(body=b"[" * 100_000, content_type="application/json"),  # nested past recursion
]


@pytest.mark.parametrize("answer", [[], "x", {"members": 5}, {"members": [], "leaving": 1}])
def test_answers_of_the_wrong_shape_are_named(answer: object) -> None:
    with pytest.raises(BadPeerAnswer):
        parse_members_answer(answer)


def test_junk_members_in_a_well_formed_answer_are_skipped() -> None:
    members, leaving = parse_members_answer(
        {"members": [{"id": "b", "url": "http://127.0.0.3:1"}, {"id": "\u202eevil", "url": "http://x:1"}, {}]})
    assert members == [("b", "http://127.0.0.3:1")] and leaving is False


async def serve(handler: Callable[[web.Request], object]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/v1/members", handler)  # type: ignore[arg-type]
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def peers() -> AsyncIterator[tuple[str, str, web.AppRunner]]:
    answers = itertools.cycle(MALFORMED)

    async def garbage(request: web.Request) -> web.Response:
        return next(answers)()

    async def healthy(request: web.Request) -> web.Response:
        return web.json_response({"node_id": "c", "members": [], "leaving": False})

    bad_runner, bad = await serve(garbage)
    good_runner, good = await serve(healthy)
    try:
        yield bad, good, good_runner
    finally:
        await bad_runner.cleanup()
        await good_runner.cleanup()


def member_a(peers: dict[str, str]) -> tuple[Membership, Heartbeats, Supervisor, list[str]]:
    """Member a's membership with ``peers`` and its heartbeats (fast: every 0.05 s, down after
    0.6 s of silence), not started; the last item collects the changes it reports."""
    loop = asyncio.get_running_loop()
    membership = Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", **peers},
                            now=loop.time(), suspect_after_s=0.3, down_after_s=0.6)
    changes: list[str] = []
    supervisor = Supervisor(on_fatal=pytest.fail)
    heartbeats = Heartbeats(membership=membership, advertise_url="http://127.0.0.1:1", interval_s=0.05,
                            client=PeerClient(secret=None), supervisor=supervisor, on_changed=changes.append,
                            on_member=lambda peer: None, clock=loop.time)
    return membership, heartbeats, supervisor, changes


async def test_malformed_answers_never_stop_the_heartbeats(peers, caplog: pytest.LogCaptureFixture) -> None:
    bad, good, good_runner = peers
    membership, heartbeats, supervisor, changes = member_a({"f": bad, "c": good})
    loop = asyncio.get_running_loop()
    async with heartbeats.client:
        heartbeats.start()
        try:
            for _ in range(100):  # bounded: 5 s
                if heartbeats.bad_answers["f"] >= 2 * len(MALFORMED) and membership.get("f").state is PeerState.DOWN:
                    break
                await asyncio.sleep(0.05)
            assert heartbeats.bad_answers["f"] >= 2 * len(MALFORMED), heartbeats.snapshot()
            assert membership.get("f").state is PeerState.DOWN  # answers that say nothing are silence
            assert membership.get("c").state is PeerState.ALIVE
            await good_runner.cleanup()  # c dies
            died = loop.time()
            while membership.get("c").state is not PeerState.DOWN and loop.time() - died < 5:
                await asyncio.sleep(0.02)
            assert membership.get("c").state is PeerState.DOWN and loop.time() - died < 1.5
        finally:
            await supervisor.stop()
    assert supervisor.failures == {}  # no round failed: every bad answer was handled
    assert "answered a heartbeat with something else than a member list" in caplog.text
    assert "c is down" in changes


async def test_an_address_that_answers_as_another_member_is_not_that_member_alive(
        caplog: pytest.LogCaptureFixture) -> None:
    # b's address now answers as c (a container or pod restarted onto the address b had): b must
    # go down as a silent member does, and nothing c's answer lists may be learnt as b's word.
    async def c_at_bs_address(request: web.Request) -> web.Response:
        return web.json_response({"node_id": "c", "leaving": False,
                                  "members": [{"id": "z", "url": "http://127.0.0.9:1"}]})

    runner, url = await serve(c_at_bs_address)
    membership, heartbeats, supervisor, changes = member_a({"b": url})
    try:
        async with heartbeats.client:
            heartbeats.start()
            try:
                for _ in range(100):  # bounded: 5 s
                    if membership.get("b").state is PeerState.DOWN:
                        break
                    await asyncio.sleep(0.05)
            finally:
                await supervisor.stop()
    finally:
        await runner.cleanup()
    assert membership.get("b").state is PeerState.DOWN, heartbeats.snapshot()
    assert heartbeats.bad_answers["b"] >= 3
    assert membership.get("z") is None  # the impostor's member list was not merged
    assert "answered as 'c'" in caplog.text and "b is down" in changes
