"""Invariants of the membership state machine and of the cluster's pure routing (no I/O, no sleeping)."""

from __future__ import annotations

import pytest

from crawler_node.cluster.membership import BadView, Membership, PeerState, id_problem, parse_view, url_problem
from crawler_node.cluster.ring import ring_key
from crawler_node.cluster.routing import Router
from crawler_node.settings import Settings, SettingsError

T0 = 1000.0
SUSPECT, DOWN = 1.0, 2.5
PEERS = {"a": "http://127.0.0.2:1", "b": "http://127.0.0.3:1", "c": "http://127.0.0.4:1"}


def make(**kwargs) -> Membership:
    kwargs.setdefault("suspect_after_s", SUSPECT)
    kwargs.setdefault("down_after_s", DOWN)
    return Membership("a", PEERS["a"], PEERS, now=T0, **kwargs)


def state(m: Membership, node_id: str) -> PeerState:
    return m.get(node_id).state


# ---------------------------------------------------------------- the state machine
def test_everyone_starts_alive_and_live():
    m = make()
    assert m.ids() == ["a", "b", "c"]
    assert all(member.state is PeerState.ALIVE for member in m.members())
    assert m.live_ids() == {"a", "b", "c"}
    assert [p.node_id for p in m.peers()] == ["b", "c"]
    assert m.get("a").is_self and m.version == 0


def test_alive_then_suspect_then_down_by_silence():
    m = make()
    assert m.tick(T0 + SUSPECT - 0.01) is False
    assert state(m, "b") is PeerState.ALIVE
    # suspect: state changes but the live set does not, so no version bump, no True
    assert m.tick(T0 + SUSPECT) is False
    assert state(m, "b") is PeerState.SUSPECT and m.version == 0
    assert m.tick(T0 + DOWN - 0.01) is False
    assert state(m, "b") is PeerState.SUSPECT
    assert m.tick(T0 + DOWN) is True
    assert state(m, "b") is PeerState.DOWN and state(m, "c") is PeerState.DOWN
    assert m.version == 2  # one bump per member that left the live set
    assert m.live_ids() == {"a"}


def test_version_counts_live_set_changes_per_member():
    m = make()
    m.observe_ok("c", T0 + 2.0)  # c answered, b stayed silent
    assert m.tick(T0 + DOWN) is True
    assert state(m, "b") is PeerState.DOWN and state(m, "c") is PeerState.ALIVE
    assert m.version == 1
    assert m.tick(T0 + DOWN + 0.1) is False and m.version == 1  # nothing new: no bump


def test_suspect_is_still_routed_to_down_is_not():
    m = make()
    m.observe_ok("c", T0 + 1.5)
    m.tick(T0 + 1.6)
    assert state(m, "b") is PeerState.SUSPECT
    assert "b" in m.live_ids()
    m.tick(T0 + 2.6)
    assert state(m, "b") is PeerState.DOWN
    assert "b" not in m.live_ids() and "c" in m.live_ids()


def test_failures_alone_do_not_shortcut_the_clock():
    m = make()
    for i in range(10):
        assert m.observe_failure("b", T0 + 0.01 * i) is False
    assert state(m, "b") is PeerState.ALIVE and m.get("b").failures == 10
    assert m.observe_failure("b", T0 + SUSPECT) is False
    assert state(m, "b") is PeerState.SUSPECT
    assert m.observe_failure("b", T0 + DOWN) is True
    assert state(m, "b") is PeerState.DOWN and m.version == 1


def test_observe_ok_revives_and_bumps_version_only_on_live_set_change():
    m = make()
    m.tick(T0 + SUSPECT + 0.1)
    assert state(m, "b") is PeerState.SUSPECT
    # suspect -> alive: live set unchanged
    assert m.observe_ok("b", T0 + 1.2) is False
    assert state(m, "b") is PeerState.ALIVE and m.version == 0
    # alive -> alive: nothing
    assert m.observe_ok("b", T0 + 1.3) is False and m.version == 0
    m.tick(T0 + 1.3 + DOWN)
    assert state(m, "b") is PeerState.DOWN
    version = m.version
    # down -> alive: live set changes
    assert m.observe_ok("b", T0 + 10) is True
    assert state(m, "b") is PeerState.ALIVE and m.version == version + 1
    assert m.get("b").failures == 0 and m.get("b").last_ok == T0 + 10
    assert "b" in m.live_ids()


def test_observe_ok_resets_the_silence_clock():
    m = make()
    m.observe_ok("b", T0 + 2.0)
    m.tick(T0 + 2.0 + SUSPECT - 0.01)
    assert state(m, "b") is PeerState.ALIVE
    m.tick(T0 + 2.0 + DOWN)
    assert state(m, "b") is PeerState.DOWN


def test_observe_leave_is_down_at_once_and_stays_down_until_ok():
    m = make()
    assert m.observe_leave("b", T0 + 0.1) is True
    assert state(m, "b") is PeerState.DOWN and m.get("b").left
    assert "b" not in m.live_ids() and m.version == 1
    # a tick right after (not silent at all) must not revive a member that left
    assert m.tick(T0 + 0.2) is False
    assert state(m, "b") is PeerState.DOWN
    assert m.observe_leave("b", T0 + 0.3) is False and m.version == 1  # already down
    # a member that left still answers while it drains: a mere answer does not revive it
    assert m.observe_ok("b", T0 + 0.35) is False
    assert state(m, "b") is PeerState.DOWN and m.get("b").left
    # only a heartbeat saying it is back (no longer leaving) does
    assert m.observe_ok("b", T0 + 0.4, returning=True) is True
    assert state(m, "b") is PeerState.ALIVE and not m.get("b").left and m.version == 2


def test_unknown_ids_are_ignored():
    m = make()
    assert m.observe_ok("zz", T0) is False
    assert m.observe_failure("zz", T0) is False
    assert m.observe_leave("zz", T0) is False
    assert "zz" not in m and m.version == 0


def test_self_is_never_marked_down_by_evidence():
    m = make()
    assert m.observe_failure("a", T0 + 100) is False
    assert m.observe_leave("a", T0 + 100) is False
    assert m.tick(T0 + 1000) is True  # peers went down
    assert state(m, "a") is PeerState.ALIVE and "a" in m.live_ids()
    assert m.observe_ok("a", T0 + 1000) is False


def test_set_self_leaving_takes_self_out_of_the_live_set():
    m = make()
    m.set_self_leaving()
    assert state(m, "a") is PeerState.DOWN and "a" not in m.live_ids() and m.version == 1


def test_merge_learns_new_members_and_ignores_junk():
    m = make()
    view = [
        {"id": "a", "url": "http://elsewhere:9"},  # self: known, ignored
        {"id": "b", "url": "http://moved:9"},  # known: merge does not move it
        {"id": "d", "url": "http://127.0.0.5:1/", "state": "alive"},
        {"id": 7, "url": "http://x"},
        {"id": "e"},
        {"url": "http://y"},
        {"id": "f", "url": None},
        {},
        {"id": "bad\u202eid", "url": "http://z:1"},
        {"id": "h\ud800", "url": "http://z:1"},
        {"id": "i", "url": "http://"},
        {"id": "j", "url": "ftp://z:1"},
    ]
    assert m.merge(parse_view(view), T0 + 1) == ["d"]
    assert m.ids() == ["a", "b", "c", "d"]
    assert m.url_of("d") == "http://127.0.0.5:1"  # trailing slash stripped
    assert state(m, "d") is PeerState.ALIVE and m.get("d").last_ok == T0 + 1
    assert m.url_of("b") == PEERS["b"] and m.url_of("a") == PEERS["a"]
    assert m.version == 1
    assert m.merge(parse_view(view), T0 + 2) == [] and m.version == 1  # idempotent


@pytest.mark.parametrize("node_id, ok", [
    ("a", True), ("node-1", True), ("pod_3.crawler", True), ("x" * 64, True), ("x" * 65, False), ("", False),
    ("\ud800", False), ("a\u202eb", False), ("a b", False), ("a/b", False), ("a=b", False), ("a\n", False),
    ("caf\u00e9", False), ("\uff41", False), (None, False), (7, False), (["a"], False)])
def test_member_ids_are_a_short_plain_alphabet(node_id, ok):
    assert (id_problem(node_id) is None) is ok


@pytest.mark.parametrize("url, ok", [
    ("http://127.0.0.2:8080", True), ("https://node1:8443/", True), ("http://[::1]:8080", True),
    ("http://pod-0.crawler.default.svc:8080", True), ("http://", False), ("http://:80", False),
    ("http://host", False), ("http://host:0", False), ("http://host:65536", False), ("http://u@host:1", False),
    ("http://u:p@host:1", False), ("http://host:1/v1", False), ("http://host:1?x", False), ("http://host:1#f", False),
    ("http://host:1?", False), ("ftp://host:1", False), ("http://h\u00f6st:1", False), ("http://host:1\n", False),
    ("http://ho st:1", False), ("http://host:1" + "/" * 400, False), (None, False), (b"http://host:1", False)])
def test_member_urls_are_http_host_port_and_nothing_else(url, ok):
    assert (url_problem(url) is None) is ok


@pytest.mark.parametrize("settings", [
    {"node_id": "bad\u202eid"}, {"node_id": "\ud800"}, {"node_id": "a", "peers": ["b=http://127.0.0.3:1/path"]},
    {"node_id": "a", "peers": ["b\u202e=http://127.0.0.3:1"]}, {"node_id": "a", "peers": ["b=http://u@127.0.0.3:1"]},
    {"node_id": "a", "ring_weights": ["b\ud800=2"]},
    {"node_id": "a", "peers": ["b=http://127.0.0.3:1"], "advertise": "http://127.0.0.2:1/x"}])
def test_settings_refuse_ids_and_urls_no_member_would_accept(settings):
    with pytest.raises(SettingsError):
        Settings(**settings).validate()


@pytest.mark.parametrize("view", [{"id": "d"}, "x", 5, None, {"members": []}, [1, 2], [{"id": "d"}, "e"]])
def test_a_member_list_of_the_wrong_shape_is_refused(view):
    with pytest.raises(BadView):
        parse_view(view)


def test_add_new_member_bumps_version_and_known_id_with_new_url_updates_it():
    m = make()
    assert m.add("d", "http://127.0.0.5:1", T0) is True and m.version == 1
    assert m.add("d", "http://127.0.0.5:1/", T0) is False  # same url (modulo slash)
    assert m.add("b", "http://127.0.0.9:2/", T0) is True
    assert m.url_of("b") == "http://127.0.0.9:2"
    assert m.version == 1  # a moved url does not change ownership
    assert m.add("a", "http://127.0.0.9:3", T0) is False  # self's url is its own business
    assert m.url_of("a") == PEERS["a"]


def test_reset_clocks_forgives_silence_but_never_moves_a_clock_back():
    m = make()
    m.observe_ok("c", T0 + 50)
    m.reset_clocks(T0 + 10)
    assert m.get("b").last_ok == T0 + 10 and m.get("c").last_ok == T0 + 50
    m.tick(T0 + 10 + SUSPECT - 0.01)
    assert state(m, "b") is PeerState.ALIVE
    m.tick(T0 + 10 + DOWN)
    assert state(m, "b") is PeerState.DOWN and state(m, "c") is PeerState.ALIVE


@pytest.mark.parametrize("suspect, down", [(1.0, 1.0), (2.0, 1.0), (0.0, 1.0), (-1.0, 1.0)])
def test_constructor_needs_0_lt_suspect_lt_down(suspect, down):
    with pytest.raises(ValueError):
        Membership("a", PEERS["a"], PEERS, now=T0, suspect_after_s=suspect, down_after_s=down)


def test_self_listed_in_peers_is_one_member_and_urls_are_normalised():
    m = Membership("a", "http://127.0.0.2:1/", {**PEERS, "b": "http://127.0.0.3:1/"}, now=T0)
    assert m.ids() == ["a", "b", "c"]
    assert m.url_of("a") == "http://127.0.0.2:1" and m.url_of("b") == "http://127.0.0.3:1"
    assert [m["id"] for m in m.view()] == ["a", "b", "c"]


# ---------------------------------------------------------------- cluster routing (pure)
class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


HOSTS = [f"site-{i}.test" for i in range(300)]


def make_cluster(clock: Clock) -> Router:
    settings = Settings(node_id="a", peers=[f"{k}={v}" for k, v in PEERS.items()]).validate()
    membership = Membership("a", settings.advertise_url, settings.peer_map(), now=clock(),
                            suspect_after_s=settings.suspect_after_s, down_after_s=settings.down_after_s)
    return Router(membership=membership, weights=settings.weight_map(), vnodes=settings.ring_vnodes,
                  key_by=settings.ring_key_by)


@pytest.fixture
def cluster() -> tuple[Router, Clock]:
    clock = Clock(T0)
    return make_cluster(clock), clock


def test_route_is_none_for_own_hosts_and_the_owner_otherwise(cluster):
    c, _ = cluster
    by = c.key_by
    owners = {host: c.ring.owner(ring_key(host, by=by)) for host in HOSTS}
    assert set(owners.values()) == {"a", "b", "c"}
    for host, owner in owners.items():
        assert c.route(host) == (None if owner == "a" else owner)
        assert c.serves(host) is (owner == "a")
        assert c.route(host) == c.route(host)  # cached answer is the same


def test_a_down_peer_s_hosts_move_clockwise_and_nothing_else_moves(cluster):
    c, clock = cluster
    by = c.key_by
    before = {host: c.route(host) for host in HOSTS}
    b_hosts = [h for h, r in before.items() if r == "b"]
    assert b_hosts
    clock.now = T0 + c.membership.down_after_s + 0.1
    c.membership.observe_ok("c", clock.now)  # c keeps answering
    c.membership.observe_failure("b", clock.now)
    c.membership.tick(clock.now)
    assert c.membership.get("b").state is PeerState.DOWN
    for host in HOSTS:
        after = c.route(host)
        if before[host] == "b":
            expected = c.ring.owner_among(ring_key(host, by=by), {"a", "c"})
            assert after == (None if expected == "a" else expected)
            assert after != "b"
        else:
            assert after == before[host], host
    # both survivors take a share of b's arc (160 vnodes each)
    assert {c.route(h) for h in b_hosts} == {None, "c"}
    # b answers again: everything is back where it was
    clock.now += 1
    c.membership.observe_ok("b", clock.now)
    assert {host: c.route(host) for host in HOSTS} == before


def test_successor_is_never_self_and_is_the_next_live_member(cluster):
    c, clock = cluster
    by = c.key_by
    for host in HOSTS:
        successor = c.successor_for(host)
        assert successor in {"b", "c"}
        assert successor == c.ring.owner_among(ring_key(host, by=by), {"b", "c"})
    c.membership.observe_leave("c", clock.now)
    assert {c.successor_for(h) for h in HOSTS} == {"b"}
    c.membership.observe_leave("b", clock.now)
    assert {c.successor_for(h) for h in HOSTS} == {None}
    assert all(c.route(h) is None for h in HOSTS)  # alone: this node crawls everything


def test_owner_of_reports_ring_owner_and_live_owner(cluster):
    c, clock = cluster
    host = next(h for h in HOSTS if c.route(h) == "b")
    assert c.owner_of(host)["owner"] == "b" and c.owner_of(host)["live_owner"] == "b"
    c.membership.observe_leave("b", clock.now)
    answer = c.owner_of(host)
    assert answer["owner"] == "b" and answer["live_owner"] in {"a", "c"}
    assert answer["successors"] and "b" not in answer["successors"]


def test_ring_weights_from_settings_shift_arcs():
    peers = ["a=http://127.0.0.2:1", "b=http://127.0.0.3:1", "c=http://127.0.0.4:1"]
    config = Settings(node_id="a", peers=peers, ring_weights=["b=2"]).validate().node_config().cluster
    membership = Membership("a", config.advertise_url, dict(config.peers), now=0.0)
    router = Router(membership=membership, weights=config.weights, vnodes=config.ring_vnodes, key_by=config.ring_key_by)
    shares = router.ring.arc_shares()
    assert shares["b"] > 1.6 * shares["a"] and shares["b"] > 1.6 * shares["c"]


def test_bad_ring_weights_are_refused():
    import pytest

    from crawler_node.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="ID=WEIGHT"):
        Settings(node_id="a", ring_weights=["b=zero"]).validate()
