"""A starting member leases once it has heard from the peers it needs (cluster.readiness), the
grace only an upper bound: the rule alone, then real 3-node clusters on loopback whose grace is
60 s, so that a hold that still lasted the whole grace would fail these tests."""

from __future__ import annotations

import pytest
from cluster_helpers import cluster_idle, get_json, kill_and_reap, missing, peers_of, plan, wait_until
from conftest import read_crawl_log, roots

from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.readiness import StartupHold

LONG_GRACE = ["--startup-grace-s", "60", "--heartbeat-interval-s", "0.3", "--secret", "startup-token"]
HOSTS = 6


# ----------------------------------------------------------------- the rule, alone
def hold_for(*, restarted: bool = False, joining: bool = False, peers: tuple[str, ...] = ("b", "c"),
             alone_is_enough: bool = True) -> tuple[StartupHold, Membership, list[str]]:
    released: list[str] = []
    membership = Membership("a", "http://127.0.0.1:1", {p: f"http://127.0.0.1:{i + 2}" for i, p in enumerate(peers)},
                            now=0.0, suspect_after_s=1.0, down_after_s=2.0)
    hold = StartupHold(restarted=restarted, joining=joining, deadline=60.0, release=released.append,
                       alone_is_enough=alone_is_enough)
    return hold, membership, released


def test_a_fresh_member_leases_once_every_peer_answered() -> None:
    hold, membership, released = hold_for()
    hold.check(membership.peers(), 0.1)
    assert hold.holding and hold.wants_answers() and hold.awaits("b") and hold.awaits("c")
    hold.heard("b", "alive")
    hold.check(membership.peers(), 0.2)
    assert hold.holding and "c" in hold.waiting_for()
    hold.heard("c", "alive")
    hold.check(membership.peers(), 0.3)
    assert released == ["heard from all peers"] and not hold.holding
    hold.check(membership.peers(), 0.4)
    assert released == ["heard from all peers"]  # released once


def test_a_peer_found_down_is_not_waited_for() -> None:
    hold, membership, released = hold_for()
    hold.heard("b", "alive")
    hold.check(membership.peers(), 1.0)
    assert hold.holding
    membership.tick(2.5)  # c silent past down_after_s: the failure detector's verdict
    assert membership.get("c").state is PeerState.DOWN
    hold.check(membership.peers(), 2.5)
    assert released == ["heard from all peers (c found down)"]


def test_a_peer_learnt_during_the_hold_is_waited_for_too() -> None:
    hold, membership, released = hold_for(peers=("b",))
    membership.merge([("d", "http://127.0.0.1:9")], 0.1)
    hold.heard("b", "alive")
    hold.check(membership.peers(), 0.1)
    assert hold.holding and hold.awaits("d")
    hold.heard("d", "alive")
    hold.check(membership.peers(), 0.2)
    assert released == ["heard from all peers"]


@pytest.mark.parametrize("restarted, joining, reported", [(True, False, "alive"), (False, True, "alive"),
                                                         (False, False, "down")])
def test_a_member_that_may_be_owed_a_handback_holds_until_no_peer_owes_it_one(restarted: bool, joining: bool,
                                                                            reported: str) -> None:
    """Restarted (its frontier had rows), joining (its new arc was crawled by others), or
    reported down by a peer (which crawled its arc): every peer that answered must say it owes
    it nothing."""
    hold, membership, released = hold_for(restarted=restarted, joining=joining)
    hold.heard("b", reported, True)
    hold.heard("c", "alive", False)
    hold.check(membership.peers(), 1.0)
    assert hold.holding and hold.owed() and not hold.wants_answers()
    assert hold.waiting_for() == "the handback b still owes this member"
    hold.heard("b", "alive", False)
    hold.check(membership.peers(), 1.1)
    assert released == ["heard from all peers, and none owes this member a handback"]


def test_a_peer_that_keeps_owing_or_does_not_say_holds_a_restarted_member_until_the_grace() -> None:
    hold, membership, released = hold_for(restarted=True)
    hold.heard("b", "alive", True)
    hold.heard("c", "alive")  # a member from before "handback_owed": it may owe one
    hold.check(membership.peers(), 59.9)
    assert hold.holding and hold.waiting_for() == "the handback b, c still owes this member"
    hold.heard("b", "alive", False)
    hold.check(membership.peers(), 59.95)
    assert hold.holding
    hold.check(membership.peers(), 60.0)
    assert released == ["the startup grace ran out while waiting for the handback c still owes this member"]


def test_a_peer_found_down_is_not_waited_for_a_handback() -> None:
    """What a down peer holds for this member comes when it is back (the normal handback)."""
    hold, membership, released = hold_for(restarted=True)
    hold.heard("b", "alive", True)
    hold.heard("c", "alive", False)
    membership.observe_failure("b", 5.0)
    membership.tick(5.0)
    hold.check(membership.peers(), 5.0)
    assert released == ["heard from all peers, and none owes this member a handback"]


def test_a_fresh_member_is_owed_nothing() -> None:
    hold, membership, released = hold_for()
    hold.heard("b", "alive", True)
    hold.heard("c", "alive", True)
    hold.check(membership.peers(), 0.5)
    assert released == ["heard from all peers"]


def test_peer_dns_with_no_peer_found_holds_until_one_answers() -> None:
    hold, membership, released = hold_for(peers=(), alone_is_enough=False)
    hold.check(membership.peers(), 1.0)
    assert hold.holding
    membership.merge([("b", "http://127.0.0.1:2")], 1.0)
    hold.heard("b", "alive")
    hold.check(membership.peers(), 1.1)
    assert released == ["heard from all peers"]


# ----------------------------------------------------------------- real clusters
def start_members(start_node, web, ids, addresses, *, seeds_to="a", extra=(), data_dirs=None, hosts=HOSTS):
    peers = peers_of(addresses)
    nodes = {}
    for node_id in ids:
        host, port = addresses[node_id]
        kwargs = {"data_dir": data_dirs[node_id]} if data_dirs else {}
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=roots(hosts) if node_id == seeds_to else (),
                                    extra_args=[*LONG_GRACE, *extra], **kwargs)
    for node in nodes.values():
        node.wait_healthy(30)
    return nodes


def hold_of(node) -> dict:
    return get_json(f"{node.url}/v1/status?scope=local")["queues"]["fetch"]["hold"]


def released(node) -> dict | None:
    hold = hold_of(node)
    return hold if hold["released_at"] is not None else None


def test_a_fresh_cluster_leases_as_soon_as_every_peer_answered(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=10, seed=31)
    addresses = plan(["a", "b", "c"])
    # A slow start on a busy machine must not pass for a peer found down here.
    nodes = start_members(start_node, web, ["a", "b", "c"], addresses,
                          extra=["--suspect-after-s", "10", "--down-after-s", "20"])
    for node in nodes.values():
        hold = wait_until(lambda node=node: released(node), 20, f"{node.node_id}'s hold released")
        assert hold["reason"] == "heard from all peers", hold
        assert hold["held_s"] < 20
    # ... and the cluster crawls, well before a 60 s grace would have let it
    wait_until(lambda: any(read_crawl_log(n.data_dir) for n in nodes.values()), 20, "a first page")


def test_a_fresh_member_does_not_wait_for_a_peer_found_down(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=10, seed=32)
    addresses = plan(["a", "b", "c"])  # c is configured but never starts
    nodes = start_members(start_node, web, ["a", "b"], addresses)
    for node in nodes.values():
        hold = wait_until(lambda node=node: released(node), 20, f"{node.node_id}'s hold released")
        # (b too, were it slower to start than down_after_s)
        assert hold["reason"].startswith("heard from all peers (") and "c found down" in hold["reason"], hold
    wait_until(lambda: any(read_crawl_log(n.data_dir) for n in nodes.values()), 20, "a first page")


def b_killed_while_crawling(start_testweb, start_node, tmp_path, *, hosts: int, pages: int, seed: int,
                            latency_ms: int, extra: list[str]):
    """a, b and c crawl ``hosts`` sites; once b has crawled something it is SIGKILLed. Returns
    (testweb, nodes, addresses, data_dirs, b's hosts)."""
    web = start_testweb(hosts=hosts, pages=pages, seed=seed,
                        profile={"site-*.test": {"latency_ms": latency_ms}})
    ids = ["a", "b", "c"]
    addresses = plan(ids)
    data_dirs = {node_id: tmp_path / f"{node_id}-data" for node_id in ids}
    nodes = start_members(start_node, web, ids, addresses, data_dirs=data_dirs, hosts=hosts, extra=extra)
    b_hosts = {f"site-{i}.test" for i in range(hosts)
               if get_json(f"{nodes['a'].url}/v1/ring?host=site-{i}.test")["owner"] == "b"}
    assert b_hosts
    wait_until(lambda: read_crawl_log(data_dirs["b"]), 30, "b crawled something")
    kill_and_reap(nodes["b"])
    return web, nodes, addresses, data_dirs, b_hosts


def b_back(start_node, web, addresses, data_dirs, extra: list[str]):
    """b restarted on its data directory; returns it and its hold once released, which must
    have ended because no peer owed it a handback."""
    host, port = addresses["b"]
    back = start_node("b", host=host, port=port, proxy=web.url, peers=peers_of(addresses), data_dir=data_dirs["b"],
                      extra_args=[*LONG_GRACE, *extra])
    hold = wait_until(lambda: released(back), 40, "b's hold released")
    assert hold["reason"] == "heard from all peers, and none owes this member a handback", hold
    return back, hold


def test_a_restarted_member_leases_once_its_peers_handed_back_what_they_fetched_for_it(start_testweb, start_node,
                                                                                     tmp_path):
    """b is killed, a and c crawl its hosts, b comes back. Their handback (what they fetched
    of its hosts, as seen) is late on purpose: their outboxes linger 2 s before a batch. b
    holds until both say they owe it nothing, not for the 60 s grace, and fetches none of
    what they fetched for it. (When the grace alone was the handback's time, a handback later
    than the grace was fetched again: a compose cluster restarted on two cores, in CI.)"""
    linger = ["--forward-linger-s", "2"]
    web, nodes, addresses, data_dirs, b_hosts = b_killed_while_crawling(
        start_testweb, start_node, tmp_path, hosts=30, pages=40, seed=33, latency_ms=30, extra=linger)
    b_before = {line["url"] for line in read_crawl_log(data_dirs["b"])}

    def covered() -> set[str]:
        return {line["url"] for node_id in ("a", "c") for line in read_crawl_log(data_dirs[node_id])
                if line["host"] in b_hosts}

    wait_until(lambda: len(covered()) >= 20, 60, "a and c fetched URLs of b's hosts")
    back, hold = b_back(start_node, web, addresses, data_dirs, linger)
    assert hold["held_s"] < 60
    expected = set(web.expected())
    alive = [nodes["a"], back, nodes["c"]]
    wait_until(lambda: not missing(alive, expected) and all(cluster_idle(n) for n in alive), 120,
               "the crawl complete and the cluster idle")
    fetched_by_b = [line["url"] for line in read_crawl_log(data_dirs["b"])]
    covered_urls = covered()
    again = sorted(url for url in fetched_by_b if url in covered_urls and url not in b_before)
    assert again == [], f"{len(again)} of {len(covered_urls)} URLs a and c fetched for b were fetched again by b"


def test_a_restarted_member_starts_no_request_to_a_host_while_a_peer_that_covered_for_it_has_one_under_way(
        start_testweb, start_node, tmp_path):
    """One request at a time per host (``--host-limit-ceiling 1``), pages that take 0.4 s: b is
    killed, a and c crawl its hosts, b comes back. They saw it and stopped leasing its hosts, but
    a request they had started goes on for up to 0.4 s, and the host's rows that request holds are
    handed over only once it ends: until then they say they still owe b a handback. What testweb
    saw decides: no host ever had two requests at once."""
    one_at_a_time = ["--host-limit-start", "1", "--host-limit-ceiling", "1"]
    web, nodes, addresses, data_dirs, b_hosts = b_killed_while_crawling(
        start_testweb, start_node, tmp_path, hosts=9, pages=30, seed=34, latency_ms=400, extra=one_at_a_time)

    def covered() -> int:
        return sum(1 for node_id in ("a", "c") for line in read_crawl_log(data_dirs[node_id])
                   if line["host"] in b_hosts)

    wait_until(lambda: covered() >= 2 * len(b_hosts), 60, "a and c crawling b's hosts")
    b_back(start_node, web, addresses, data_dirs, one_at_a_time)
    since = len(read_crawl_log(data_dirs["b"]))
    wait_until(lambda: len(read_crawl_log(data_dirs["b"])) >= since + 2 * len(b_hosts), 60, "b crawling again")
    stats = web.stats(hosts=sorted(b_hosts))["hosts"]
    crowded = {h: stats[h]["peak_concurrency"] for h in b_hosts if stats[h]["peak_concurrency"] > 1}
    assert crowded == {}, f"hosts that saw two requests at once: {crowded}"
