"""--handoff-on-exit cut short: a node killed 50 ms into its drain has said it is leaving but
not that it is drained, so the others count it as down with work (the cluster is not idle);
restarted, it resumes and nothing is lost."""

from __future__ import annotations

import signal
import sqlite3
import time

from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, get_json, missing, peers_of, plan, wait_until
from conftest import read_crawl_log, roots

HOSTS, PAGES = 24, 30


def test_a_drain_cut_short_is_not_taken_for_a_goodbye(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=35, profile={"site-*.test": {"latency_ms": 80}})
    expected = set(web.expected())
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    args = [*FAST_CLUSTER, *SECURED, "--handoff-on-exit"]
    nodes = {}
    for node_id in ("a", "b", "c"):
        host, port = addresses[node_id]
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=roots(HOSTS) if node_id == "a" else (), extra_args=args)
    for node in nodes.values():
        node.wait_healthy(30)
    wait_until(lambda: len(read_crawl_log(nodes["c"].data_dir)) >= 20, 60, "c crawling")
    c = nodes["c"]
    c.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    c.kill()
    with sqlite3.connect(c.data_dir / "frontier.sqlite3") as db:
        left_behind = (db.execute("SELECT COUNT(*) FROM urls WHERE state IN (0, 1)").fetchone()[0]
                       + db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])
    assert left_behind > 0, "c drained within 50 ms: the test saw no drain cut short"

    # a and b run out of their own work; c's waits: the cluster is not idle, and says why.
    def others_idle() -> bool:
        status = get_json(f"{nodes['a'].url}/v1/status")
        return status["node_idle"] and all(m.get("idle") for m in status["members"] if m["id"] == "b")

    wait_until(others_idle, 120, "a and b idle")
    status = get_json(f"{nodes['a'].url}/v1/status")
    members = {m["id"]: m for m in status["members"]}
    assert members["c"]["left"] is False and members["c"]["leaving"] is True
    assert status["idle"] is False

    restarted = start_node("c", host=addresses["c"][0], port=addresses["c"][1], proxy=web.url, peers=peers,
                           data_dir=c.data_dir, extra_args=args)
    nodes["c"] = restarted
    wait_until(lambda: cluster_idle(nodes["a"]), 180, "the cluster finishes the crawl")
    assert not (lost := missing(list(nodes.values()), expected)), lost
