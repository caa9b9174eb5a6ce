"""The per-IP share protocol (cluster.ipshare), pure: its split, its messages, and its invariant
under every interleaving a random schedule finds: requests in flight to one address, summed
over the live members, never exceed the limit."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict, deque

import pytest

from crawler_node.cluster.ipshare import (
    AddressActivity,
    BadAnnouncement,
    IpShares,
    parse_announcement,
    split_limit,
)

X = "192.0.2.10"
Y = "192.0.2.20"


def shares(node_id: str, limit: int = 4, epoch: str = "e1", **kwargs) -> IpShares:
    return IpShares(self_id=node_id, limit=limit, epoch=epoch, **kwargs)


def claim(node: IpShares, address: str, now: float = 0.0, in_flight: dict[str, int] | None = None) -> bool:
    return node.claim(address, now, in_use=lambda other: bool((in_flight or {}).get(other)))[0]


def pull(asker: IpShares, peer: IpShares, in_flight: dict[str, int] | None = None) -> None:
    """One heartbeat: ``asker`` reads ``peer``'s answer (through the parser, as on the wire)."""
    asker.heard(peer.self_id, parse_announcement(peer.payload(in_flight or {})))


# ---------------------------------------------------------------- the split
@pytest.mark.parametrize(("limit", "n"), [(8, 1), (8, 3), (4, 3), (2, 3), (1, 5), (7, 7), (5, 2)])
def test_the_split_sums_to_the_limit_and_gives_nobody_more_than_one_above_another(limit: int, n: int) -> None:
    members = [f"node-{i}" for i in range(n)]
    for address in (X, Y, "2001:db8::1"):
        split = split_limit(limit, members, address)
        assert sum(split.values()) == limit
        assert max(split.values()) - min(split.values()) <= 1
        if n > limit:
            assert sorted(split.values()) == [0] * (n - limit) + [1] * limit


def test_a_share_never_grows_when_sharers_are_added() -> None:
    # The invariant rests on this: a member that knows more sharers takes no more.
    members = [f"n{i}" for i in range(6)]
    for limit, address in itertools.product(range(1, 10), (X, Y)):
        for size in range(1, len(members) + 1):
            for subset in itertools.combinations(members, size):
                small = split_limit(limit, subset, address)
                for extra in members:
                    if extra not in subset:
                        large = split_limit(limit, (*subset, extra), address)
                        assert all(large[m] <= small[m] for m in subset), (limit, subset, extra)


def test_the_remainder_does_not_always_go_to_the_same_member() -> None:
    winners = {member for i in range(30)
               for member, part in split_limit(4, ["a", "b", "c"], f"10.0.0.{i}").items() if part == 2}
    assert len(winners) == 3


# ---------------------------------------------------------------- the protocol, step by step
def test_alone_a_node_takes_the_whole_limit_at_once() -> None:
    a = shares("a")
    assert a.cap(X) == 0  # not announced
    assert claim(a, X) and a.cap(X) == 4


def test_a_new_sharer_waits_for_the_others_to_lower_and_drain() -> None:
    a, b = shares("a"), shares("b")
    a.peers_live([]), b.peers_live([])
    claim(a, X, 0.0)
    a_in_flight = {X: 4}  # a alone had the whole limit, and uses it
    a.peers_live(["b"]), b.peers_live(["a"])  # b joins
    assert a.cap(X) == 0  # a now waits for b's acknowledgement too (b could be busy there)
    pull(a, b)
    assert a.cap(X) == 0  # b answered, but holds nothing of a's yet
    pull(b, a, a_in_flight), pull(a, b)
    assert a.cap(X) == 4  # b announces nothing on X
    claim(b, X, 0.0)
    assert b.cap(X) == 0  # nobody has acknowledged b yet
    pull(b, a, a_in_flight)
    assert b.cap(X) == 0  # a has not even heard of b on X
    pull(a, b)  # a hears b: a lowers at once
    assert a.cap(X) == a.share(X) == split_limit(4, ["a", "b"], X)["a"] == 2
    pull(b, a, a_in_flight)
    assert b.cap(X) == 0  # a acknowledged, but says it is still draining (4 in flight > 2)
    assert b.waiting_for(X) == ["a"]
    a_in_flight = {X: 2}
    pull(b, a, a_in_flight)
    assert b.cap(X) == 2 and b.waiting_for(X) == []


def test_an_acknowledgement_holds_while_the_peer_drains_for_someone_else() -> None:
    a, b, c = shares("a"), shares("b"), shares("c")
    for node, others in ((a, "bc"), (b, "ac"), (c, "ab")):
        node.peers_live(others)
    claim(a, X, 0.0), claim(b, X, 0.0)
    for _ in range(2):
        for asker, peer in itertools.permutations((a, b, c), 2):
            pull(asker, peer)
    assert a.cap(X) + b.cap(X) == 4 and a.cap(X) > 0 and b.cap(X) > 0
    claim(c, X, 0.0)
    pull(a, c), pull(b, c)  # a and b hear c and lower
    caps = {node.self_id: node.cap(X) for node in (a, b)}
    pull(a, b, {X: 3})  # b drains for c: a keeps what b acknowledged before
    assert a.cap(X) == caps["a"] > 0


def test_a_peer_down_releases_its_share_and_one_back_is_waited_for() -> None:
    a, b = shares("a"), shares("b")
    a.peers_live(["b"]), b.peers_live(["a"])
    claim(a, X, 0.0), claim(b, X, 0.0)
    for _ in range(2):
        pull(a, b), pull(b, a)
    assert a.cap(X) == 2 and b.cap(X) == 2
    a.peers_live([])  # b is down
    assert a.cap(X) == 4
    a.peers_live(["b"])  # b is back: it may have requests open, so a waits for its answer
    assert a.cap(X) == 0
    pull(a, b)
    assert a.cap(X) == 2


def test_acknowledgements_from_before_a_restart_do_not_count() -> None:
    a, b = shares("a", epoch="first"), shares("b")
    a.peers_live(["b"]), b.peers_live(["a"])
    claim(a, X, 0.0)
    pull(b, a), pull(a, b)
    assert a.cap(X) == 4
    a2 = shares("a", epoch="second")  # a restarted: its versions start again
    a2.peers_live(["b"])
    claim(a2, X, 0.0)
    pull(a2, b)  # b still holds the first a's announcement
    assert a2.cap(X) == 0
    pull(b, a2), pull(a2, b)
    assert a2.cap(X) == 4


def test_a_late_answer_does_not_take_back_what_a_newer_one_said() -> None:
    a, b = shares("a"), shares("b")
    a.peers_live(["b"]), b.peers_live(["a"])
    old = parse_announcement(b.payload({}))
    claim(b, X, 0.0)
    pull(a, b)
    a.heard("b", old)
    assert a.sharers(X) == ["a", "b"]


def test_peers_that_do_not_share_are_not_waited_for() -> None:
    a = shares("a")
    a.peers_live(["old"])
    claim(a, X, 0.0)
    assert a.cap(X) == 0
    a.heard("old", None)  # an answer without "ips": an older version, or a node behind a proxy
    assert a.cap(X) == 4


def test_addresses_in_use_stay_announced_and_idle_ones_leave_after_the_linger() -> None:
    a = shares("a", max_addresses=1, linger_s=5.0)
    assert claim(a, X, 0.0) and not claim(a, Y, 0.0, {X: 1})  # full, and X in use: Y waits for room
    assert a.update([AddressActivity(X, 1, True), AddressActivity(Y, 1, True)], now=1.0) == []
    assert sorted(a.addresses()) == [X, Y]  # in flight: announced over the cap, the others must count it
    assert a.update([AddressActivity(X, 0, False), AddressActivity(Y, 0, False)], now=5.5) == []
    assert sorted(a.update([AddressActivity(X, 0, False), AddressActivity(Y, 0, False)], now=6.5)) == [X, Y]
    assert a.update([], now=7.0) == [] and a.addresses() == []


def test_a_full_announcement_makes_room_with_the_address_idle_longest() -> None:
    a = shares("a", max_addresses=2)
    assert claim(a, X, 0.0) and claim(a, Y, 1.0)
    assert a.claim("192.0.2.30", 2.0, in_use=lambda address: address == X) == (True, Y)
    assert a.claim("192.0.2.40", 3.0, in_use=lambda address: False) == (True, X)  # idle since 0.0
    assert sorted(a.addresses()) == ["192.0.2.30", "192.0.2.40"] and a.cap(Y) == 0


def test_a_dropped_address_needs_a_new_acknowledgement() -> None:
    a, b = shares("a"), shares("b")
    a.peers_live(["b"]), b.peers_live(["a"])
    claim(a, X, 0.0)
    pull(b, a), pull(a, b)
    assert a.cap(X) == 4
    a.update([], now=1.0)  # X leaves the announcement
    claim(a, X, 2.0)
    assert a.cap(X) == 0  # b's acknowledgement was of the earlier announcement
    pull(b, a), pull(a, b)
    assert a.cap(X) == 4


# ---------------------------------------------------------------- malformed announcements
@pytest.mark.parametrize("raw", [
    [], "x", {"version": 1, "addresses": []}, {"epoch": "", "version": 1, "addresses": []},
    {"epoch": "e", "version": -1, "addresses": []}, {"epoch": "e", "version": True, "addresses": []},
    {"epoch": "e", "version": 1, "addresses": "192.0.2.1"}, {"epoch": "e", "version": 1},
    {"epoch": "e", "version": 1, "addresses": [], "seen": {"a": [1, 2]}},
    {"epoch": "e", "version": 1, "addresses": [], "seen": []},
    {"epoch": "e", "version": 1, "addresses": ["1.2.3.4"] * 10_000},
])
def test_announcements_of_the_wrong_shape_are_named(raw: object) -> None:
    with pytest.raises(BadAnnouncement):
        parse_announcement(raw)


def test_junk_addresses_are_skipped_and_no_announcement_is_none() -> None:
    heard = parse_announcement({"epoch": "e", "version": 3, "addresses": ["192.0.2.1", 5, "", "x" * 200]})
    assert heard is not None and heard.addresses == frozenset({"192.0.2.1"}) and heard.seen == {}
    assert parse_announcement(None) is None


# ---------------------------------------------------------------- the invariant, under random schedules
class Simulation:
    """Members exchanging announcements with delays (in order per pair, as one heartbeat at a
    time per peer does), starting and ending requests, going down and coming back."""

    def __init__(self, rng: random.Random, *, members: int, limit: int, addresses: list[str], room: int) -> None:
        self.rng, self.limit, self.addresses, self.room = rng, limit, addresses, room
        self.ids = [f"n{i}" for i in range(members)]
        self.epochs = itertools.count()
        self.nodes = {node_id: self._fresh(node_id) for node_id in self.ids}
        self.up = set(self.ids)
        self.in_flight: dict[str, dict[str, int]] = {node_id: defaultdict(int) for node_id in self.ids}
        self.wants: dict[str, set[str]] = {node_id: set() for node_id in self.ids}
        self.wire: dict[tuple[str, str], deque] = defaultdict(deque)  # (asker, peer) -> answers on the way
        self.now = 0.0
        self.peak = 0
        self.served = 0
        for node_id in self.ids:
            self.nodes[node_id].peers_live(set(self.ids) - {node_id})

    def _fresh(self, node_id: str) -> IpShares:
        return IpShares(self_id=node_id, limit=self.limit, epoch=f"ep{next(self.epochs)}",
                        max_addresses=self.room, linger_s=3.0)

    def step(self) -> None:
        rng, self.now = self.rng, self.now + 0.1
        node_id = rng.choice(sorted(self.up))
        node, in_flight = self.nodes[node_id], self.in_flight[node_id]
        action = rng.random()
        if action < 0.25:  # a peer answers its heartbeat: the answer is computed now, read later
            peer = rng.choice([p for p in sorted(self.up) if p != node_id] or [node_id])
            if peer != node_id:
                self._refresh(peer)
                self.wire[(node_id, peer)].append(self.nodes[peer].payload(dict(self.in_flight[peer])))
        elif action < 0.45:  # an answer arrives
            pairs = [pair for pair, queue in self.wire.items() if queue and pair[0] == node_id]
            if pairs:
                asker, peer = rng.choice(sorted(pairs))
                answer = self.wire[(asker, peer)].popleft()
                if peer in self.up:
                    node.heard(peer, parse_announcement(answer))
        elif action < 0.7:  # a request starts where the gate admits it
            address = rng.choice(self.addresses)
            self.wants[node_id].add(address)
            if in_flight[address] < node.cap(address) or (
                    node.claim(address, self.now,
                               in_use=lambda other: in_flight[other] > 0 or other in self.wants[node_id])[0]
                    and in_flight[address] < node.cap(address)):
                in_flight[address] += 1
                self.served += 1
        elif action < 0.9:  # a request ends
            busy = [address for address, n in in_flight.items() if n]
            if busy:
                in_flight[rng.choice(sorted(busy))] -= 1
        elif action < 0.95:
            self._refresh(node_id)
            if rng.random() < 0.3:
                self.wants[node_id].clear()  # its hosts there are done
        elif action < 0.975 and len(self.up) > 1:  # down: its requests have ended (the assumption)
            self.up.discard(node_id)
            self.in_flight[node_id] = defaultdict(int)
            for other in self.up:
                self.nodes[other].peers_live(self.up - {other})
            for pair in [pair for pair in self.wire if node_id in pair]:
                self.wire[pair].clear()
        else:  # one that is down comes back, restarted
            down = sorted(set(self.ids) - self.up)
            if down:
                back = rng.choice(down)
                self.up.add(back)
                self.nodes[back] = self._fresh(back)
                for other in self.up:
                    self.nodes[other].peers_live(self.up - {other})
        self._check()

    def _refresh(self, node_id: str) -> None:
        in_flight = self.in_flight[node_id]
        self.nodes[node_id].update([AddressActivity(address, in_flight[address],
                                             bool(in_flight[address]) or address in self.wants[node_id])
                                    for address in self.addresses], self.now)

    def _check(self) -> None:
        for address in self.addresses:
            total = sum(self.in_flight[node_id][address] for node_id in self.up)
            self.peak = max(self.peak, total)
            assert total <= self.limit, (address, {n: self.in_flight[n][address] for n in self.up})


@pytest.mark.parametrize(("members", "limit"), [(2, 4), (3, 4), (3, 8), (3, 2), (5, 3), (4, 1)])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("room", [2, 1])  # 1: addresses make room for each other in the announcement
def test_no_schedule_puts_more_than_the_limit_in_flight(members: int, limit: int, seed: int, room: int) -> None:
    simulation = Simulation(random.Random(seed * 100 + members * 10 + limit + room), members=members, limit=limit,
                            addresses=[X, Y], room=room)
    for _ in range(10_000):
        simulation.step()
    # Not vacuous: the members did fetch, and together reached the limit at some moment (with
    # room for one address, they keep making room for each other: requests overlapped at least).
    assert simulation.served > 100 and simulation.peak >= (limit if room == 2 else min(limit, 2)), \
        (simulation.served, simulation.peak)


# ---------------------------------------------------------------- many addresses, a small announcement
async def test_a_broad_crawl_gets_round_every_address_through_a_small_announcement() -> None:
    """Far more addresses than the announcement holds, each host coming round in turn: every
    host is admitted in the end (addresses do not push each other out before a peer
    acknowledged them), and the announcement never outgrows its bound."""
    from crawler_node.node.ip_gates import IpGates

    now = [0.0]
    peer = shares("b")
    peer.peers_live(["a"])
    woken: set = set()
    gates = IpGates(limit=4, cache_s=60.0, clock=lambda: now[0],
                    shares=shares("a", max_addresses=8, linger_s=1.0), wake=woken.update)
    gates.peers_live(["b"])
    hosts = [f"h{i}" for i in range(200)]
    gate_of = {host: await gates.gate_for(f"198.51.100.{i}:80") for i, host in enumerate(hosts)}
    fetched: set[str] = set()
    for _ in range(400):  # rounds of the rotation, each followed by one heartbeat each way
        now[0] += 0.25
        for host in hosts:
            gate = gate_of[host]
            if host not in fetched and gate.admits(host):
                gate.acquire()
                fetched.add(host)
                gate.release()  # short requests: done within the round
        announcement = gates.announcement()
        assert announcement is not None and len(announcement["addresses"]) <= 8
        peer.heard("a", parse_announcement(announcement))
        gates.heard("b", parse_announcement(peer.payload({})))
        if len(fetched) == len(hosts):
            break
    assert fetched == set(hosts)
    assert woken  # parked hosts were handed back when their address was acknowledged
