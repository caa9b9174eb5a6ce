from collections import Counter

import pytest
from uhashring import HashRing

from crawler_node.cluster.ring import RING_SIZE, Ring, ring_key

NODES = [f"node-{i}" for i in range(5)]
KEYS = [f"site-{i}.test" for i in range(10_000)]


def owners(ring: Ring) -> dict[str, str]:
    return {key: ring.owner(key) for key in KEYS}


def test_keys_spread_evenly() -> None:
    # Measured with 160 vnodes (640 ketama points per node): the fullest or emptiest of 5
    # nodes is 4-10% off the mean for these names, at most 14% over 150 random name sets.
    counts = Counter(owners(Ring(NODES)).values())
    mean = len(KEYS) / len(NODES)
    assert set(counts) == set(NODES)
    assert all(abs(count - mean) <= 0.20 * mean for count in counts.values()), counts


def test_arc_shares_cover_the_ring_and_match_key_counts() -> None:
    ring = Ring(NODES)
    shares = ring.arc_shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    counts = Counter(owners(ring).values())
    for node in NODES:
        assert counts[node] / len(KEYS) == pytest.approx(shares[node], abs=0.02)


def test_removing_a_node_moves_only_its_keys() -> None:
    ring = Ring(NODES)
    before = owners(ring)
    after = owners(ring.without_node("node-2"))
    for key, owner in before.items():
        if owner != "node-2":
            assert after[key] == owner
        else:
            assert after[key] != "node-2"


def test_adding_a_node_moves_keys_only_to_it_and_about_one_in_n_plus_one() -> None:
    ring = Ring(NODES)
    before = owners(ring)
    after = owners(ring.with_node("node-new"))
    moved = [key for key in KEYS if after[key] != before[key]]
    assert all(after[key] == "node-new" for key in moved)
    assert len(moved) / len(KEYS) == pytest.approx(1 / 6, abs=0.04)


def test_membership_changes_with_weights_move_only_the_changed_node() -> None:
    ring = Ring({"a": 1, "b": 3, "c": 2})
    before = owners(ring)
    after = owners(ring.with_node("d", weight=5))
    assert all(after[key] in (before[key], "d") for key in KEYS)


def test_insertion_order_does_not_matter() -> None:
    forward = Ring(NODES)
    backward = Ring(list(reversed(NODES)))
    grown = Ring(NODES[:2]).with_node(NODES[4]).with_node(NODES[2]).with_node(NODES[3])
    assert forward == backward == grown
    assert owners(forward) == owners(backward) == owners(grown)
    assert forward.points() == backward.points()


def test_owner_matches_uhashring_ketama() -> None:
    # The placement is plain ketama, so any ketama implementation agrees with it.
    ring = Ring(NODES)
    reference = HashRing({n: {"vnodes": 160} for n in NODES}, hash_fn="ketama")
    assert all(ring.owner(key) == reference.get_node(key) for key in KEYS[:2000])


def test_successors_are_distinct_clockwise_and_exclude_the_owner() -> None:
    ring = Ring(NODES)
    points = ring.points()
    for key in KEYS[:300]:
        owner = ring.owner(key)
        successors = ring.successors(key)
        assert len(successors) == len(NODES) - 1
        assert len(set(successors)) == len(successors)
        assert owner not in successors
        # Walk the points clockwise from the key by hand and compare the first-seen order.
        start = next((i for i, (p, _) in enumerate(points) if p > Ring.key_point(key)), 0)
        walk: list[str] = []
        for offset in range(len(points)):
            node = points[(start + offset) % len(points)][1]
            if node not in walk:
                walk.append(node)
        assert walk == [owner, *successors]
        assert ring.successors(key, 2) == successors[:2]
        assert ring.successors(key, 0) == []


def test_owner_among_returns_the_first_live_node_clockwise() -> None:
    ring = Ring(NODES)
    for key in KEYS[:300]:
        order = [ring.owner(key), *ring.successors(key)]
        assert ring.owner_among(key, set(NODES)) == order[0]
        assert ring.owner_among(key, set(order[1:])) == order[1]
        assert ring.owner_among(key, {order[3], order[2]}) == order[2]
        assert ring.owner_among(key, set()) is None


def test_owner_among_agrees_with_a_ring_without_the_dead_nodes() -> None:
    # Routing around a dead peer and removing it from the ring must pick the same node.
    ring = Ring(NODES)
    live = {"node-0", "node-3", "node-4"}
    reduced = Ring(sorted(live))
    assert all(ring.owner_among(key, live) == reduced.owner(key) for key in KEYS)


def test_weights_shift_shares_proportionally() -> None:
    shares = Ring({"a": 1, "b": 2, "c": 1}).arc_shares()
    assert shares["b"] == pytest.approx(0.5, abs=0.05)
    assert shares["a"] == pytest.approx(0.25, abs=0.05)
    assert shares["c"] == pytest.approx(0.25, abs=0.05)


def test_key_points_are_on_the_ring() -> None:
    assert all(0 <= Ring.key_point(key) < RING_SIZE for key in KEYS[:100])


def test_empty_and_single_node_rings() -> None:
    empty = Ring([])
    with pytest.raises(LookupError):
        empty.owner("x")
    assert empty.successors("x") == [] and empty.owner_among("x", {"a"}) is None
    solo = Ring(["only"])
    assert solo.owner("x") == "only"
    assert solo.successors("x") == []
    assert solo.arc_shares() == {"only": pytest.approx(1.0)}


def test_ring_is_immutable_and_validates() -> None:
    ring = Ring(NODES)
    bigger = ring.with_node("x")
    smaller = ring.without_node("node-0")
    assert ring.nodes == NODES
    assert "x" in bigger and "node-0" not in smaller
    with pytest.raises(KeyError):
        ring.without_node("nope")
    with pytest.raises(TypeError):
        Ring("node-0")
    with pytest.raises(ValueError):
        Ring({"a": 0})
    with pytest.raises(ValueError):
        Ring(["a"], vnodes=0)


@pytest.mark.parametrize(
    ("host", "by", "key"),
    [
        ("WWW.Example.COM", "host", "www.example.com"),
        ("example.com:8080", "host", "example.com:8080"),
        ("a.b.example.com", "domain", "example.com"),
        ("www.example.co.uk:8443", "domain", "example.co.uk"),
        ("shop.example.com.au", "domain", "example.com.au"),
        ("example.co.uk", "domain", "example.co.uk"),
        ("co.uk", "domain", "co.uk"),
        ("localhost", "domain", "localhost"),
        ("site-7.test", "domain", "site-7.test"),
        ("10.0.0.1:8080", "domain", "10.0.0.1"),
        ("[::1]:8080", "domain", "[::1]"),
    ],
)
def test_ring_key(host: str, by: str, key: str) -> None:
    assert ring_key(host, by=by) == key


def test_ring_key_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError):
        ring_key("a.test", by="url")
