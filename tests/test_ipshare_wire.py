"""The per-IP shares over real heartbeats: two members' heartbeats and IP gates, each serving
``GET /v1/members`` on loopback as a node does, agree on one address's limit; a peer whose
announcement is malformed is counted and logged, and the heartbeats go on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from peer_helpers import answering, serve, until

from crawler_node.cluster.heartbeats import Heartbeats
from crawler_node.cluster.ipshare import IpShares
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import PeerClient
from crawler_node.node.ip_gates import IpGate, IpGates
from crawler_node.runtime.supervisor import Supervisor

LIMIT = 4
ADDRESS = "192.0.2.10"
INTERVAL_S = 0.05
DEADLINE_S = 5.0


@dataclass
class Member:
    """What of a node takes part: its membership, IP gates and heartbeats, and its answer."""

    node_id: str
    url: str
    membership: Membership
    gates: IpGates
    heartbeats: Heartbeats
    supervisor: Supervisor
    woken: list[set] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def answer(self) -> dict:
        return {"node_id": self.node_id, "members": self.membership.view(), "leaving": False,
                "ips": self.gates.announcement()}


def build(node_id: str, url: str, peers: dict[str, str], loop: asyncio.AbstractEventLoop) -> Member:
    membership = Membership(node_id, url, peers, now=loop.time(), suspect_after_s=0.5, down_after_s=1.0)
    member: Member

    def wake(states: set) -> None:
        member.woken.append(states)
        member.changed.set()

    gates = IpGates(limit=LIMIT, cache_s=60.0, clock=loop.time,
                    shares=IpShares(self_id=node_id, limit=LIMIT, epoch=f"{node_id}-1", linger_s=60.0), wake=wake)
    supervisor = Supervisor(on_fatal=pytest.fail)
    heartbeats = Heartbeats(membership=membership, advertise_url=url, interval_s=INTERVAL_S,
                            client=PeerClient(secret=None),
                            supervisor=supervisor, on_changed=lambda why: gates.peers_live(
                                membership.live_ids() - {node_id}),
                            on_member=lambda peer: None, clock=loop.time, ip_link=gates)
    member = Member(node_id, url, membership, gates, heartbeats, supervisor)
    gates.peers_live(membership.live_ids() - {node_id})
    return member


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Member, Member, dict[str, web.AppRunner]]]:
    loop = asyncio.get_running_loop()
    holder: dict[str, Member] = {}
    runners, urls = {}, {}
    for node_id in ("a", "b"):
        runners[node_id], urls[node_id] = await serve(
            {"/v1/members": answering(lambda node_id=node_id: holder[node_id].answer())})
    for node_id in ("a", "b"):
        holder[node_id] = build(node_id, urls[node_id], urls, loop)
    for member in holder.values():
        await member.heartbeats.client.start()
        member.heartbeats.start()
    try:
        yield holder["a"], holder["b"], runners
    finally:
        for member in holder.values():
            await member.supervisor.stop()
            await member.heartbeats.client.close()
        for runner in runners.values():
            await runner.cleanup()


async def test_two_members_agree_on_one_address_through_their_heartbeats(pair) -> None:
    a, b, _ = pair
    gate_a: IpGate = await a.gates.gate_for(f"{ADDRESS}:8001")
    assert not gate_a.admits("host-1")  # announced now, but b has not acknowledged it
    await asyncio.wait_for(a.changed.wait(), DEADLINE_S)
    assert a.woken == [{"host-1"}] and gate_a.limit == LIMIT  # b has nothing there: a takes it all
    for _ in range(LIMIT):
        assert gate_a.admits("host-1")
        gate_a.acquire()

    gate_b: IpGate = await b.gates.gate_for(f"{ADDRESS}:8002")  # another host, the same address
    assert not gate_b.admits("host-2")
    await until(lambda: gate_a.limit == 2, "a to lower its share on hearing b")
    assert not gate_a.admits("host-1")  # 4 in flight, above its new share: no new request
    # a says it is draining: b still waits, however many heartbeats go by
    await asyncio.sleep(10 * INTERVAL_S)
    assert gate_b.limit == 0 and b.woken == []
    gate_a.release(), gate_a.release()  # a's requests end: it is at its share
    await asyncio.wait_for(b.changed.wait(), DEADLINE_S)
    assert b.woken == [{"host-2"}] and gate_b.limit == 2
    assert gate_a.in_flight + gate_b.limit <= LIMIT
    status = a.gates.snapshot()["cluster"]
    assert status["addresses"][0] == {
        "ip": ADDRESS, "in_flight": 2, "cap": 2, "share": 2, "sharers": ["a", "b"], "waiting_for": []}


async def test_a_peer_down_gives_its_share_back(pair) -> None:
    a, b, runners = pair
    gate_a: IpGate = await a.gates.gate_for(f"{ADDRESS}:8001")
    gate_b: IpGate = await b.gates.gate_for(f"{ADDRESS}:8002")
    gate_a.admits("host-1"), gate_b.admits("host-2")
    await until(lambda: gate_a.limit == 2 and gate_b.limit == 2, "both to take their share")
    await b.supervisor.stop()
    await runners["b"].cleanup()  # b is gone
    await until(lambda: a.membership.get("b").state is PeerState.DOWN, "b to be down")
    assert gate_a.limit == LIMIT


async def test_a_malformed_announcement_is_a_bad_answer_and_the_heartbeats_go_on(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    bad_runner, bad = await serve(
        {"/v1/members": answering(lambda: {"members": [], "ips": {"epoch": "x", "version": "1", "addresses": []}})})
    holder: dict[str, Member] = {}
    runner, url = await serve({"/v1/members": answering(lambda: holder["a"].answer())})
    a = holder["a"] = build("a", url, {"a": url, "f": bad}, loop)
    gate = await a.gates.gate_for(f"{ADDRESS}:80")
    try:
        async with a.heartbeats.client:
            a.heartbeats.start()
            assert not gate.admits("host-1")  # f is waited for while it counts as live
            await until(lambda: a.membership.get("f").state is PeerState.DOWN, "f to count as down")
            await asyncio.wait_for(a.changed.wait(), DEADLINE_S)
            assert gate.limit == LIMIT  # f is down: nobody else to share with
            assert a.heartbeats.bad_answers["f"] >= 2
            await a.supervisor.stop()
    finally:
        await runner.cleanup()
        await bad_runner.cleanup()
    assert a.supervisor.failures == {}
    assert "ips.version must be an integer" in caplog.text
