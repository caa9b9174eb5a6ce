"""Self-fencing (cluster.fencing) on the membership's evidence: pure, on a clock the test moves."""

from __future__ import annotations

import asyncio

import pytest

from crawler_node.cluster.fencing import FENCED_RECHECK_S, FencedFetcher, Fencing, NotSent
from crawler_node.cluster.membership import Membership
from crawler_node.settings import Settings, SettingsError

T0 = 1000.0
SUSPECT, DOWN = 1.0, 2.0
HANDBACK = 1.5
PEERS = {"a": "http://127.0.0.2:1", "b": "http://127.0.0.3:1", "c": "http://127.0.0.4:1"}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def cluster(self_id: str = "a", peers: dict[str, str] = PEERS) -> tuple[Membership, Fencing, Clock]:
    clock = Clock()
    membership = Membership(self_id, peers[self_id], peers, now=T0, suspect_after_s=SUSPECT, down_after_s=DOWN)
    return membership, Fencing(membership=membership, handback_delay_s=HANDBACK, clock=clock), clock


def heartbeat_round(membership: Membership, clock: Clock, answering: tuple[str, ...], *, step: float = 0.5) -> None:
    """One round of heartbeats ``step`` seconds after the last: the ``answering`` peers answer."""
    clock.now += step
    for peer in membership.peers():
        if peer.node_id in answering:
            membership.observe_ok(peer.node_id, clock.now)
        else:
            membership.observe_failure(peer.node_id, clock.now)
    membership.tick(clock.now)


def test_a_member_alone_is_never_fenced():
    membership, fencing, clock = cluster("a", {"a": PEERS["a"]})
    assert fencing.blocked_until(clock.now) is None
    clock.now += 3600
    assert fencing.blocked_until(clock.now) is None


def test_a_starting_member_leases_once_it_hears_a_majority_with_no_handback_hold():
    membership, fencing, clock = cluster()
    # the start is not evidence: nothing heard yet, so nothing leased
    assert fencing.blocked_until(clock.now) == clock.now + FENCED_RECHECK_S
    heartbeat_round(membership, clock, answering=("b",))
    assert fencing.blocked_until(clock.now) is None  # a and b: two of three
    assert membership.quorum_regained_at is None


def test_a_member_cut_off_fences_itself_after_the_suspect_time_then_holds_the_handback():
    membership, fencing, clock = cluster()
    heartbeat_round(membership, clock, answering=("b", "c"))
    last_heard = clock.now
    heartbeat_round(membership, clock, answering=("c",))
    while clock.now < last_heard + SUSPECT + 1.0:
        heartbeat_round(membership, clock, answering=())
        silent = clock.now - last_heard - 0.5  # c answered half a second after b
        assert (fencing.blocked_until(clock.now) is None) == (silent < SUSPECT)
    # the successors took over (down_after_s) well after this member stopped (suspect_after_s)
    assert DOWN - SUSPECT >= 0.5
    heartbeat_round(membership, clock, answering=("b",))
    back = clock.now
    assert membership.quorum_regained_at == back
    while clock.now < back + HANDBACK:
        assert fencing.blocked_until(clock.now) == back + HANDBACK
        heartbeat_round(membership, clock, answering=("b",))
    assert fencing.blocked_until(clock.now) is None
    assert fencing.snapshot()["fenced"] == 1 and fencing.snapshot()["handback_holds"] == 1


def test_one_silent_peer_of_three_fences_nobody():
    membership, fencing, clock = cluster()
    for _ in range(10):
        heartbeat_round(membership, clock, answering=("c",))
        assert fencing.blocked_until(clock.now) is None


@pytest.mark.parametrize(("self_id", "goes_on"), [("a", True), ("b", False)])
def test_of_two_members_that_lost_each_other_the_smaller_id_goes_on(self_id, goes_on):
    two = {"a": PEERS["a"], "b": PEERS["b"]}
    membership, fencing, clock = cluster(self_id, two)
    heartbeat_round(membership, clock, answering=("a", "b"))
    assert fencing.blocked_until(clock.now) is None
    for _ in range(6):
        heartbeat_round(membership, clock, answering=())
    assert (fencing.blocked_until(clock.now) is None) is goes_on


def test_a_member_that_left_is_not_counted():
    membership, fencing, clock = cluster()
    heartbeat_round(membership, clock, answering=("b", "c"))
    membership.observe_leave("c", clock.now, drained=True)
    for _ in range(6):  # b silent: a alone is half of {a, b}, with the smaller id
        heartbeat_round(membership, clock, answering=())
    assert fencing.blocked_until(clock.now) is None
    b_view = Membership("b", PEERS["b"], PEERS, now=T0, suspect_after_s=SUSPECT, down_after_s=DOWN)
    b_view.observe_leave("c", T0, drained=True)
    assert not b_view.quorum(T0 + 5)


def test_after_a_pause_answers_read_at_once_are_stale_and_the_member_is_fenced():
    membership, fencing, clock = cluster()
    for _ in range(4):
        heartbeat_round(membership, clock, answering=("b", "c"))
    assert fencing.blocked_until(clock.now) is None
    clock.now += 5.0  # SIGSTOP ... SIGCONT: nothing ran here meanwhile
    woke = clock.now
    # the answers to the requests sent before the pause are read first: written long ago
    membership.observe_ok("b", clock.now)
    membership.observe_ok("c", clock.now)
    assert membership.pauses == 1
    assert fencing.blocked_until(clock.now) is not None
    # they still keep the peers alive for routing (they did answer)
    assert membership.get("b").last_ok == woke
    # fresh answers count once the answers of before the pause are over
    clock.now = woke + SUSPECT
    membership.observe_ok("b", clock.now)
    assert fencing.blocked_until(clock.now) == clock.now + HANDBACK
    for _ in range(3):  # HANDBACK
        heartbeat_round(membership, clock, answering=("b", "c"))
    assert fencing.blocked_until(clock.now) is None


def test_the_first_check_after_a_pause_is_fenced_even_before_any_answer():
    membership, fencing, clock = cluster()
    for _ in range(4):
        heartbeat_round(membership, clock, answering=("b", "c"))
    clock.now += 3.0
    assert fencing.blocked_until(clock.now) is not None


def test_a_slow_round_that_is_no_pause_changes_nothing():
    membership, fencing, clock = cluster()
    for _ in range(4):
        heartbeat_round(membership, clock, answering=("b", "c"), step=0.9)
        assert fencing.blocked_until(clock.now) is None
    assert membership.pauses == 0


class RecordingFetcher:
    def __init__(self) -> None:
        self.urls: list[str] = []

    async def fetch(self, url: str, *, max_body_bytes=None, headers=None):
        self.urls.append(url)
        return "answer"


async def test_the_fenced_fetcher_sends_nothing_while_fenced_and_looks_cancelled():
    membership, fencing, clock = cluster()
    inner = RecordingFetcher()
    fetcher = FencedFetcher(inner, fencing=fencing)
    with pytest.raises(NotSent):
        await fetcher.fetch("http://site-1.test/")
    assert issubclass(NotSent, asyncio.CancelledError)  # the fetch stage gives the lease back unattempted
    heartbeat_round(membership, clock, answering=("b",))
    assert await fetcher.fetch("http://site-1.test/") == "answer"
    assert inner.urls == ["http://site-1.test/"]


def test_settings_need_a_heartbeat_round_between_the_fence_and_the_takeover():
    Settings(suspect_after_s=1.0, down_after_s=2.0, heartbeat_interval_s=0.5).validate()
    with pytest.raises(SettingsError, match="down_after_s must be at least"):
        Settings(suspect_after_s=1.0, down_after_s=1.2, heartbeat_interval_s=0.5).validate()
    with pytest.raises(SettingsError, match="handback_delay_s"):
        Settings(handback_delay_s=-1).validate()


def _quorum_from_scratch(membership: Membership, now: float) -> bool:
    """The quorum rule as documented, from the members' evidence alone (no memo)."""
    counted = [m for m in membership.members() if m.is_self or not m.left]
    fresh = {m.node_id for m in counted
             if m.is_self or (m.heard_at is not None and now - m.heard_at < membership.suspect_after_s)}
    if 2 * len(fresh) == len(counted):
        return min(m.node_id for m in counted) in fresh
    return 2 * len(fresh) > len(counted)


@pytest.mark.parametrize("seed", range(20))
def test_the_remembered_quorum_answers_as_the_rule_does_through_answers_leaves_joins_and_time(seed):
    # Asked before every request, the quorum is remembered until evidence or time could change
    # it; any miss would let a cut-off member fetch (or stop a healthy one). Random histories
    # of heartbeats, failures, leaves, returns, joins and clock steps (some exactly onto a
    # member's turning stale, some backwards), checked after every step.
    import random
    rng = random.Random(seed)
    peers = {f"n{i}": f"http://127.0.0.{i + 2}:1" for i in range(rng.choice((1, 2, 3, 4, 5)))}
    self_id = rng.choice(sorted(peers))
    membership = Membership(self_id, peers[self_id], peers, now=T0, suspect_after_s=SUSPECT, down_after_s=DOWN)
    now, joined = T0, len(peers)
    for _ in range(400):
        others = [m.node_id for m in membership.peers()]
        step = rng.random()
        if step < 0.35 and others:
            membership.observe_ok(rng.choice(others), now, returning=rng.random() < 0.5)
        elif step < 0.45 and others:
            membership.observe_failure(rng.choice(others), now)
        elif step < 0.52 and others:
            membership.observe_leave(rng.choice(others), now, drained=rng.random() < 0.5)
        elif step < 0.55:
            membership.add(f"n{joined}", f"http://127.0.1.{joined}:1", now)
            joined += 1
        elif step < 0.65:
            heard = [m.heard_at for m in membership.peers() if m.heard_at is not None]
            if heard:  # exactly when one turns stale, or just before
                now = rng.choice(heard) + SUSPECT - rng.choice((0.0, 1e-9))
        elif step < 0.68:
            now -= rng.random()  # a test clock may go back; the memo must not answer for it
        else:
            now += rng.choice((0.01, 0.1, 0.3, 0.7, 1.5))
        assert membership.quorum(now) is _quorum_from_scratch(membership, now), (seed, now)
