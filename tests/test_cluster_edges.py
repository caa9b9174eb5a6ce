"""Cluster edge cases: a throttling peer, views that disagree for a moment, a graceful leave."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, get_json, missing, peers_of, plan, wait_until
from conftest import read_crawl_log, roots

HOSTS, PAGES = 24, 30


def test_a_peer_answering_429_slows_only_its_own_outbox(start_testweb, start_node, tmp_path):
    from crawler_node.cluster.ring import Ring

    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=31)
    addresses = plan(["a", "fake"])
    peers = peers_of(addresses)
    fake_host, fake_port = addresses["fake"]
    fake = subprocess.Popen([sys.executable, str(Path(__file__).parent / "fake_peer.py"), fake_host,
                             str(fake_port), "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(f"{peers['fake']}/healthz"), 15, "fake peer up")
        host, port = addresses["a"]
        node = start_node("a", host=host, port=port, proxy=web.url, peers=peers, seeds=roots(HOSTS),
                          extra_args=[*FAST_CLUSTER, *SECURED])
        ring = Ring(["a", "fake"])
        own = {url for url in web.expected() if ring.owner(url.split("/")[2]) == "a"}
        assert own and len(own) < len(web.expected())
        started = time.monotonic()
        wait_until(lambda: own <= {line["url"] for line in read_crawl_log(node.data_dir)}, 120,
                   "a's own hosts crawled while its peer refuses everything")
        elapsed = time.monotonic() - started
        status = get_json(f"{node.url}/v1/status?scope=local")
        members = {m["id"]: m for m in status["members"]}
        assert members["fake"]["state"] == "alive"  # a 429 is an answer: the peer is not down
        assert members["fake"]["outbox"] > 0  # kept on disk, waiting
        assert status["cluster"]["counters"]["forward_throttled"] > 0
        posts = get_json(f"{peers['fake']}/_fake/stats")["posts"]
        gaps = [b - a for a, b in zip(posts, posts[1:])]
        # the sender honours Retry-After: 1 s between attempts, not a retry storm
        assert len(posts) <= elapsed / 1.0 + 3
        assert all(gap >= 0.9 for gap in gaps), gaps
    finally:
        fake.terminate()
        fake.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        get_json(url, timeout=1)
        return True
    except Exception:  # noqa: BLE001
        return False


def test_views_that_disagree_for_a_moment_lose_nothing_and_bounce_boundedly(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=32, profile={"site-*.test": {"latency_ms": 20}})
    expected = set(web.expected())
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    views = {"a": peers, "b": {k: peers[k] for k in ("a", "b")}, "c": peers}  # b does not know c yet
    nodes = {}
    for node_id in ("a", "c", "b"):
        host, port = addresses[node_id]
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=views[node_id],
                                    seeds=roots(HOSTS) if node_id == "b" else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED, "--max-hops", "2"])
    wait_until(lambda: cluster_idle(nodes["a"]), 120, "cluster idle")
    assert not (lost := missing(list(nodes.values()), expected)), lost
    counts = web.stats()["urls"]
    assert {u: n for u, n in counts.items() if n > 1 and not u.endswith("robots.txt")} == {}
    # b learnt c from its peers' views (anti-entropy)
    assert "c" in {m["id"] for m in get_json(f"{nodes['b'].url}/v1/status?scope=local")["members"]}
    for node in nodes.values():
        with sqlite3.connect(node.data_dir / "frontier.sqlite3") as db:
            max_hops = db.execute("SELECT MAX(hops) FROM urls").fetchone()[0] or 0
        assert max_hops <= 2, f"{node.node_id} holds a URL forwarded {max_hops} times"


def test_handoff_on_exit_drains_the_queue_to_the_successors(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=33, profile={"site-*.test": {"latency_ms": 80}})
    expected = set(web.expected())
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id in ("a", "b", "c"):
        host, port = addresses[node_id]
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=roots(HOSTS) if node_id == "a" else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED, "--handoff-on-exit"])
    for node in nodes.values():
        node.wait_healthy(30)
    wait_until(lambda: len(read_crawl_log(nodes["c"].data_dir)) >= 20, 60, "c crawling")
    assert nodes["c"].stop(timeout_s=60) == 0
    with sqlite3.connect(nodes["c"].data_dir / "frontier.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM urls WHERE state = 0").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
    wait_until(lambda: cluster_idle(nodes["a"]), 120, "a and b finish the crawl")
    assert not (lost := missing(list(nodes.values()), expected)), lost
    members = {m["id"]: m for m in get_json(f"{nodes['a'].url}/v1/status?scope=local")["members"]}
    assert members["c"]["state"] == "down" and members["c"]["left"] is True
