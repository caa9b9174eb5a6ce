"""A member reads its peers' statuses only when their heartbeats say something changed
(cluster.activity): not while a peer says it is busy (its progress lines are made of what the
heartbeats say), and not again while every peer says what it said when a read found the cluster
idle. Before, an idle member read every peer's status every 5 s, and every member read them all
for each progress line (N-1 reads of some kB each, on each of N members). What it says is
unchanged: progress lines, and "crawl finished" once, when the cluster becomes idle."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from cluster_helpers import SECURED, peers_of, plan
from peer_helpers import Peer, serve, until

from crawler_node.api.status import heard_status
from crawler_node.cluster.activity import Activity, Check, PeerActivity, idle_check, parse_activity, view_of
from crawler_node.cluster.heartbeats import Heartbeats
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import PeerClient
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.tools.report import progress_log_line

IDLE = Activity(idle=True, fetched=5, known=7, paused=False)
HERE = Activity(idle=True, fetched=0, known=0, paused=False)


def alive(node_id: str, activity: Activity | None) -> PeerActivity:
    return PeerActivity(node_id, "alive", False, activity)


def test_a_busy_peer_makes_the_cluster_busy_without_a_read() -> None:
    busy = Activity(idle=False, fetched=5, known=9, paused=False)
    assert idle_check(view_of(HERE, [alive("b", IDLE), alive("c", busy)]), None) is Check.BUSY
    # ... unless it left (drained: its work went to the others), or is not answering
    assert idle_check(view_of(HERE, [alive("b", IDLE), PeerActivity("c", "alive", True, busy)]), None) is Check.READ
    assert idle_check(view_of(HERE, [alive("b", IDLE), PeerActivity("c", "down", False, busy)]), None) is Check.READ


def test_the_same_view_as_an_idle_read_needs_no_other_read() -> None:
    read = view_of(HERE, [alive("b", IDLE), alive("c", IDLE)])
    assert idle_check(view_of(HERE, [alive("c", IDLE), alive("b", IDLE)]), read) is Check.UNCHANGED
    again = Activity(idle=True, fetched=6, known=7, paused=False)  # busy for a moment in between
    assert idle_check(view_of(HERE, [alive("b", again), alive("c", IDLE)]), read) is Check.READ
    more = Activity(idle=True, fetched=5, known=8, paused=False)  # a link that ended without a fetch
    assert idle_check(view_of(HERE, [alive("b", more), alive("c", IDLE)]), read) is Check.READ
    assert idle_check(view_of(HERE, [alive("b", None), alive("c", IDLE)]), read) is Check.READ  # an older member
    assert idle_check(view_of(HERE, [PeerActivity("b", "down", False, None), alive("c", IDLE)]), read) is Check.READ
    assert idle_check(read, None) is Check.READ  # no read found it idle yet


def test_a_pause_is_always_read_for_its_reasons() -> None:
    paused = Activity(idle=False, fetched=5, known=9, paused=True)
    read = view_of(HERE, [alive("b", paused)])
    assert idle_check(read, read) is Check.READ


def local_status(idle: bool, *, paused: bool = False) -> dict:
    """This node's own status, as much of it as a progress line and a member summary read."""
    return {"node_id": "a", "idle": idle, "paused": paused, "pause": None, "counters": {"fetched": 4},
            "rates": {"fetched_per_s": 2.0}, "queues": {"frontier": {"depth": 0 if idle else 3}},
            "frontier": {"queued": 0 if idle else 3, "leased": 0, "done": 4, "failed": 0, "deferred": 0},
            "admission": {"open": True, "blocked_by": None},
            "members": [{"id": "a", "state": "alive", "self": True, "left": False},
                        {"id": "b", "state": "alive", "self": False, "left": False},
                        {"id": "c", "state": "alive", "self": False, "left": False}]}


def test_a_progress_line_is_made_of_what_the_heartbeats_say_while_the_cluster_crawls() -> None:
    busy = Activity(idle=False, fetched=5, known=9, paused=False, finished=5)
    status = heard_status(local_status(False), [alive("b", IDLE), alive("c", busy)])
    assert status is not None and status["crawl_state"] == "crawling" and status["idle"] is False
    line = progress_log_line(status, 2.0, 30.0)
    assert "fetched 4 here" in line and "queued 3 here" in line
    assert "9/23" in line and line.endswith("crawling")  # finished / known over a (4/7), b (0/7), c (5/9)
    # ... not when a peer's activity is unknown, or anyone is paused: then the statuses are read
    assert heard_status(local_status(False), [alive("b", None), alive("c", busy)]) is None
    assert heard_status(local_status(False), [PeerActivity("b", "down", False, None), alive("c", busy)]) is None
    paused = Activity(idle=False, fetched=5, known=9, paused=True)
    assert heard_status(local_status(False), [alive("b", IDLE), alive("c", paused)]) is None
    assert heard_status(local_status(False, paused=True), [alive("b", IDLE), alive("c", busy)]) is None


@pytest.mark.parametrize("bad", [[], {"idle": "yes", "fetched": 1, "known": 1, "paused": False},
                                 {"idle": True, "fetched": -1, "known": 1, "paused": False},
                                 {"idle": True, "fetched": True, "known": 1, "paused": False},
                                 {"idle": True, "fetched": 1, "paused": False},
                                 {"idle": True, "fetched": 1, "known": 1, "finished": -1, "paused": False}])
def test_a_malformed_activity_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_activity(bad)


async def test_heartbeats_keep_each_peers_activity_and_count_a_malformed_one_as_a_bad_answer() -> None:
    loop = asyncio.get_running_loop()
    b_membership = Membership("b", "http://127.0.0.2:1", {"a": "http://127.0.0.1:1"}, now=loop.time(),
                              suspect_after_s=0.5, down_after_s=1.0)
    said: dict[str, object] = {"activity": IDLE.as_json()}
    peer = Peer(b_membership, lambda membership, query: {**Peer.rule(membership, query), **said})
    runner, url = await serve({"/v1/members": peer.handle})
    membership = Membership("a", "http://127.0.0.1:1", {"b": url}, now=loop.time(), suspect_after_s=0.5,
                            down_after_s=1.0)
    supervisor = Supervisor(on_fatal=pytest.fail)
    heartbeats = Heartbeats(membership=membership, advertise_url="http://127.0.0.1:1", interval_s=0.05,
                            client=PeerClient(secret=None), supervisor=supervisor, on_changed=lambda why: None,
                            on_member=lambda peer_id: None, clock=loop.time)
    try:
        async with heartbeats.client:
            heartbeats.start()
            await until(lambda: heartbeats.activity.get("b") == IDLE, "b's activity")
            said["activity"] = {"idle": True, "fetched": "many", "known": 1, "paused": False}
            await until(lambda: heartbeats.bad_answers["b"] >= 3, "a malformed activity counted as a bad answer")
            assert "b" not in heartbeats.activity  # a failed heartbeat forgets it
            await until(lambda: membership.get("b").state is PeerState.DOWN, "b down: its answers are not heartbeats")
            said.clear()  # an older member: no activity at all, and a good answer
            await until(lambda: membership.get("b").state is PeerState.ALIVE, "b alive again")
            assert "b" not in heartbeats.activity
    finally:
        await supervisor.stop()
        await runner.cleanup()


class StandIn:
    """Member b of a two-member cluster, on loopback: its heartbeat answers (a real Membership's
    list and digest) carry `activity`, its local status says the same, and it counts both."""

    def __init__(self, membership: Membership) -> None:
        self.activity = Activity(idle=False, fetched=0, known=3, paused=False)
        self.peer = Peer(membership, lambda membership, query: {**Peer.rule(membership, query),
                                                                "activity": self.activity.as_json()})
        self.status_reads = 0

    async def status(self, request: web.Request) -> web.Response:
        assert request.query.get("scope") == "local"
        self.status_reads += 1
        a = self.activity
        return web.json_response({
            "node_id": "b", "idle": a.idle, "paused": False, "pause": None,
            "counters": {"fetched": a.fetched}, "rates": {"fetched_per_s": 0.0},
            "queues": {"frontier": {"depth": 0 if a.idle else 1}},
            "frontier": {"queued": a.known - a.finished, "leased": 0, "done": a.finished, "failed": 0,
                         "deferred": 0},
            "admission": {"open": True, "blocked_by": None}, "members": []})

    def heartbeats(self) -> int:
        return len(self.peer.asked)

    @staticmethod
    async def ask(url: str) -> None:
        """b's side of the heartbeats, as a member's: two asks for a's members, so a knows b
        has heard this start of it (a member is idle only then: cluster.Cluster.heard_by_peers)."""
        headers = {"Authorization": f"Bearer {SECURED[1]}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            for _ in range(2):
                async with session.get(f"{url}/v1/members", params={"from": "b"}) as response:
                    assert response.status == 200, await response.text()


async def test_a_member_reads_statuses_only_when_a_heartbeat_says_something_changed(start_node) -> None:
    loop = asyncio.get_running_loop()
    addresses = plan(["a", "b"], first_ip=46)
    urls = peers_of(addresses)
    b = StandIn(Membership("b", urls["b"], {"a": urls["a"]}, now=loop.time(), suspect_after_s=1.0,
                           down_after_s=2.0))
    runner, _ = await serve({"/v1/members": b.peer.handle, "/v1/status": b.status}, *addresses["b"])
    # a progress line every round (every 2 s): before, each line read every peer's status
    a = start_node("a", host=addresses["a"][0], port=addresses["a"][1], peers=urls, wait=False,
                   extra_args=[*SECURED, "--progress-interval-s", "2"])
    try:
        await asyncio.to_thread(a.wait_healthy, 30)
        await b.ask(urls["a"])

        async def rounds_pass() -> None:
            """More than two rounds of a's progress log (every 2 s), counted in a's heartbeats to b
            (every 0.5 s): a read per round before, whatever the peers said."""
            start = b.heartbeats()
            await until(lambda: b.heartbeats() >= start + 11, "5.5 s of a's heartbeats", deadline_s=30)

        def said(words: str) -> int:
            return a.log_tail(400).count(words)

        await until(lambda: b.heartbeats() >= 3, "a's first heartbeats", deadline_s=30)
        await rounds_pass()
        # b says it is busy: the cluster crawls, and a's lines say so from the heartbeats alone
        # (but in a's first round, perhaps, before a heard b's activity; a read a round before:
        # three or more by now)
        assert b.status_reads <= 1
        assert said("crawl finished") == 0 and said("finished of the URLs known; crawling") >= 2

        b.activity = Activity(idle=True, fetched=5, known=5, paused=False, finished=5)
        await until(lambda: said("crawl finished") == 1, "a's finished line once b says it is idle", deadline_s=15)
        reads = b.status_reads
        assert reads >= 1  # the line is said on what a read found, not on a heartbeat alone
        lines = said("progress: fetched")
        await rounds_pass()
        assert b.status_reads == reads  # idle, as at that read: no read again
        assert said("progress: fetched") >= lines + 2 and "finished of the URLs known; idle" in a.log_tail(5)

        b.activity = Activity(idle=True, fetched=6, known=5, paused=False, finished=5)  # busy a moment, unseen
        await until(lambda: b.status_reads > reads, "a read once b's fetched pages change", deadline_s=15)
        reads = b.status_reads
        await rounds_pass()
        assert b.status_reads == reads and said("crawl finished") == 1  # idle still: said once
    finally:
        a.stop(timeout_s=15)
        await runner.cleanup()
