"""Peer DNS while a member holds its first lease: a member that enters DNS during the hold is
joined within it, not at the next lookup interval (after `docker compose start` the replicas
enter DNS one by one, and a member that leased without one crawled that one's hosts again);
and an address that is this node's own is asked once."""

from __future__ import annotations

import socket
import time

from aiohttp import web
from peer_helpers import until

from crawler_node.cluster import peerdns
from crawler_node.cluster.membership import Membership
from crawler_node.cluster.peer_client import PeerClient
from crawler_node.cluster.peerdns import PeerDns
from crawler_node.runtime.supervisor import Supervisor

LOOKUP_INTERVAL_S = 30.0  # far longer than any wait below: a round at this pace never comes


class ScriptedDns(PeerDns):
    """Answers NAME with the addresses the test sets, counting the lookups."""

    answer: set[str] = set()
    lookups = 0

    async def resolve(self) -> set[str] | None:
        self.lookups += 1
        return set(self.answer)


def free_port_on(*hosts: str) -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        try:
            for host in hosts:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {hosts}")


async def stand_in(host: str, port: int, node_id: str) -> web.AppRunner:
    """A member's `POST /v1/join` on host:port, answering with itself as the member list."""
    async def join(request: web.Request) -> web.Response:
        return web.json_response({"node_id": node_id, "members": [{"id": node_id, "url": f"http://{host}:{port}"}]})

    app = web.Application()
    app.router.add_post("/v1/join", join)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def test_a_member_that_enters_dns_during_the_hold_is_joined_within_it() -> None:
    port = free_port_on("127.0.0.2", "127.0.0.3")
    runners = [await stand_in("127.0.0.2", port, "b"), await stand_in("127.0.0.3", port, "c")]
    supervisor = Supervisor(on_fatal=lambda exc: None)
    membership = Membership("a", "http://127.0.0.1:1", {}, now=time.time())
    learnt: list[str] = []

    def learn(members: list[tuple[str, str]], via: str) -> None:
        membership.merge(members, time.time())
        learnt.append(via)

    peer_dns = ScriptedDns(name="crawler", port=port, interval_s=LOOKUP_INTERVAL_S, node_id="a",
                           advertise_url="http://127.0.0.1:1", membership=membership, learn=learn,
                           client=PeerClient(secret=None), supervisor=supervisor)
    peer_dns.watch_startup(lambda: True)  # the member holds its first lease throughout
    peer_dns.answer = {"127.0.0.2"}  # c is not in DNS yet
    try:
        async with peer_dns.client:
            await peer_dns.start()
            assert learnt == ["b"]
            peer_dns.answer = {"127.0.0.2", "127.0.0.3"}  # c enters DNS during the hold

            # at the interval's pace this would take 30 s; while the member holds, a fraction of one
            await until(lambda: "c" in learnt, "c joined while the member holds", deadline_s=5.0)

            assert {member.node_id for member in membership.peers()} == {"b", "c"}
            assert peer_dns.counters["joins"] == 2 and peer_dns.counters["join_failures"] == 0
    finally:
        await supervisor.stop()
        for runner in runners:
            await runner.cleanup()



async def test_an_address_that_answers_with_this_nodes_own_id_is_not_asked_again(monkeypatch) -> None:
    """`localhost`, or a name that lists this node too: the join through this node's own address
    is refused as ``same_id`` (409, api.members.post_join). That address is this node's, not a
    failure to ask again every round (before: 122 joins to itself in a minute on loopback)."""
    monkeypatch.setattr(peerdns, "FIRST_ROUND_DEADLINE_S", 1.0)  # rounds every 0.1 s for 1 s
    port = free_port_on("127.0.0.2")
    asked: list[str] = []

    async def join(request: web.Request) -> web.Response:
        asked.append((await request.json())["id"])
        return web.json_response({"error": "same_id", "message": "a is this node's own id"}, status=409)

    app = web.Application()
    app.router.add_post("/v1/join", join)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.2", port).start()
    supervisor = Supervisor(on_fatal=lambda exc: None)
    membership = Membership("a", "http://127.0.0.2:1", {}, now=time.time())
    peer_dns = ScriptedDns(name="crawler", port=port, interval_s=0.1, node_id="a",
                           advertise_url=f"http://127.0.0.2:{port}", membership=membership,
                           learn=lambda members, via: None,
                           client=PeerClient(secret=None), supervisor=supervisor)
    peer_dns.answer = {"127.0.0.2"}
    try:
        async with peer_dns.client:
            await peer_dns.start()  # alone in DNS: rounds until the first round's deadline
            assert peer_dns.lookups >= 5
            assert asked == ["a"], f"asked its own address {len(asked)} times"
            assert peer_dns.counters["join_failures"] == 0
    finally:
        await supervisor.stop()
        await runner.cleanup()
