"""Three and four real nodes on loopback addresses: partitioning, failover, handback, join."""

from __future__ import annotations

import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from cluster_helpers import (
    FAST_CLUSTER,
    cluster_idle,
    get_json,
    logged_urls,
    missing,
    owner_of,
    peers_of,
    plan,
    wait_until,
)
from conftest import read_crawl_log, roots

from crawler_node.node.parse_stage import BATCHES_PER_PARSER, PARSE_BATCH

HOSTS, PAGES = 30, 40
SECRET = "s3cret-token"
SMALL_PIPELINE = ["--host-limit-ceiling", "4", "--global-inflight", "24", "--parse-queue", "8", "--store-queue", "32"]
# What a node killed with that pipeline may have fetched and not yet stored: its requests in
# flight, its parse queue, the batches its parser holds (node.parse_stage: BATCHES_PER_PARSER of
# PARSE_BATCH pages), its store queue, and the store batch being written (at most the queue).
UNSTORED_BOUND = 24 + 8 + BATCHES_PER_PARSER * PARSE_BATCH + 32 + 32
STORE_BATCH = 32  # the store batch, at most the store queue: in the crawl.log, not yet committed


def unsent_fetched_replicas(node) -> int:
    """The fetched replicas in a node's outbox (not yet acknowledged by the successor), read
    from its database: a node that was just lost could tell its successors no more."""
    with closing(sqlite3.connect(f"file:{Path(node.data_dir) / 'frontier.sqlite3'}?mode=ro", uri=True)) as db:
        return db.execute("SELECT COUNT(*) FROM outbox WHERE replica = 1 AND seen = 1").fetchone()[0]


def start_cluster(start_node, web, ids, *, extra=(), seeds_to=None, secret=SECRET):
    addresses = plan(ids)
    peers = peers_of(addresses)
    nodes = {}
    for node_id in ids:
        host, port = addresses[node_id]
        nodes[node_id] = start_node(
            node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
            seeds=roots(HOSTS) if node_id == seeds_to else (),
            extra_args=[*FAST_CLUSTER, "--secret", secret, *extra],
        )
    for node in nodes.values():
        node.wait_healthy(30)
    return nodes, peers


def test_three_nodes_partition_the_crawl_by_host(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=21, profile={"site-*.test": {"latency_ms": 5}})
    expected = set(web.expected())
    nodes, _ = start_cluster(start_node, web, ["a", "b", "c"], seeds_to="a")
    wait_until(lambda: cluster_idle(nodes["b"]), 180, "cluster idle")
    logs = logged_urls(list(nodes.values()))
    assert {line["url"] for lines in logs.values() for line in lines} == expected
    owners = {}
    for node_id, lines in logs.items():
        for host in {line["host"] for line in lines}:
            owners.setdefault(host, owner_of(nodes["c"], host))
            assert owners[host] == node_id, f"{node_id} fetched {host}, owned by {owners[host]}"
    assert all(lines for lines in logs.values()), "every node crawled its share"
    counts = web.stats()["urls"]
    assert {u: n for u, n in counts.items() if n > 1 and not u.endswith("robots.txt")} == {}
    status = get_json(f"{nodes['a'].url}/v1/status")
    assert status["idle"] is True and {m["id"] for m in status["members"]} == {"a", "b", "c"}
    assert status["cluster"]["counters"]["forwarded"] > 0


def test_peer_endpoints_require_the_cluster_token(start_testweb, start_node):
    import http.client
    import json

    web = start_testweb(hosts=2, pages=5)
    nodes, _ = start_cluster(start_node, web, ["a", "b"])
    node = nodes["a"]
    for method, path, body in (("POST", "/v1/urls", {"urls": ["http://site-0.test/"]}),
                               ("GET", "/v1/members", None), ("POST", "/v1/join", {"id": "x", "url": "http://127.0.0.9:1"})):
        conn = http.client.HTTPConnection(node.host, node.port, timeout=10)
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 401, path
        conn.close()
    assert node.status()["counters"]["submitted"] == 0
    conn = http.client.HTTPConnection(node.host, node.port, timeout=10)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200


# "kill-parked": each member keeps 4 hosts with work in memory, the others parked on disk and
# taking turns of 0.5 s (--active-hosts, --host-turn-s): the takeover, the handback and the
# replicas go through parked hosts too.
PARKED = ("--active-hosts", "4", "--host-turn-s", "0.5")


@pytest.mark.parametrize("how", ["kill", "stop", "kill-parked"])
def test_a_lost_node_is_routed_around_and_takes_its_arc_back(start_testweb, start_node, how):
    # A SIGKILL loses what the victim had fetched but not yet stored: bounded by its in-flight
    # limit and queue bounds (sized here as a latency-conscious operator would), so the crawl
    # is large enough for 2% to mean something.
    web = start_testweb(hosts=HOSTS, pages=100, seed=22, profile={"site-*.test": {"latency_ms": 60}})
    expected = set(web.expected())
    ids = ["a", "b", "c"]
    parked = how.endswith("-parked")
    extra = (*SMALL_PIPELINE, *PARKED) if parked else SMALL_PIPELINE
    how = how.removesuffix("-parked")
    nodes, peers = start_cluster(start_node, web, ids, seeds_to="a", extra=extra)
    victim = nodes["b"]
    wait_until(lambda: sum(len(read_crawl_log(n.data_dir)) for n in nodes.values()) >= len(expected) // 3,
               120, "a third of the crawl")
    lost_at = time.time()
    if how == "kill":
        victim.kill()
    else:
        victim.signal(signal.SIGSTOP)
    unsent = unsent_fetched_replicas(victim)

    def b_down_event():
        # the node's own record of when it saw b go, so polling delays do not count
        events = get_json(f"{nodes['a'].url}/v1/status?scope=local")["cluster"]["events"]
        return next((e for e in events if e["at"] >= lost_at and "b" not in e["live"]), None)

    event = wait_until(b_down_event, 15, "b detected down")
    detected_in = event["at"] - lost_at
    assert detected_in < 3.0, f"detection took {detected_in:.1f}s"
    # its hosts are crawled by the successors meanwhile
    b_hosts = {f"site-{i}.test" for i in range(HOSTS) if owner_of(nodes["a"], f"site-{i}.test") == "b"}
    assert b_hosts
    wait_until(lambda: any(line["host"] in b_hosts and line["fetched_at"] > "" for n in (nodes["a"], nodes["c"])
                           for line in read_crawl_log(n.data_dir)), 30, "takeover fetches")
    if how == "kill":
        back = start_node("b", host=victim.host, port=victim.port, proxy=web.url, peers=peers,
                          data_dir=victim.data_dir,
                          extra_args=[*FAST_CLUSTER, "--secret", SECRET, *extra])
    else:
        victim.signal(signal.SIGCONT)
        back = victim
    wait_until(lambda: cluster_idle(nodes["a"]), 180, "cluster idle after b returned")
    everyone = [nodes["a"], nodes["c"], back]
    assert not (lost := missing(everyone, expected)), lost
    members = {m["id"]: m["state"] for m in get_json(f"{nodes['a'].url}/v1/status?scope=local")["members"]}
    assert members["b"] == "alive"
    statuses = [get_json(f"{n.url}/v1/status?scope=local") for n in everyone]
    handed = sum(status["cluster"]["counters"]["handed_off"] for status in statuses)
    assert handed > 0, "the takeover node handed b's hosts back"
    if parked:  # hosts did wait on disk, and took turns
        assert all(status["counters"]["hosts_unparked"] > 0 for status in statuses)
        assert sum(status["counters"]["turns_ended"] for status in statuses) > 0
    # after the return, b's hosts are b's again
    late = [line for line in read_crawl_log(back.data_dir)]
    assert any(line["host"] in b_hosts for line in late)
    counts = web.stats()["urls"]
    duplicates = sum(n - 1 for u, n in counts.items() if n > 1 and not u.endswith("robots.txt"))
    # Two windows, each with its own bound. The successors crawl b's whole queue from its
    # replica at once, and that includes (1) what b fetched and stored in its last moments,
    # whose fetched replica was still in its outbox: fetched twice and stored twice, and (2)
    # what b fetched and had not stored when it died (its pipeline; none with SIGSTOP, whose
    # pipeline runs on after SIGCONT, but then (1) is larger). Replicating a URL when it is
    # leased would take both back; the chaos test holds its own 2% on its seed. (2) grows as
    # the machine slows (the parser's batches hold more): one bound of 3% on both together
    # held at 62 of 3,090 in CI (2.0%, SIGSTOP), but not on a machine at a third of that speed
    # (95-127 of 3,090 with SIGKILL, 30-35 of them stored twice).
    # (1) is bounded by what b's outbox held of its fetched replicas when it was lost, read from
    # its database then, not by a share of the crawl: how many that is depends on how fast the
    # machine is (a fixed 2% held at 30-35 on a slow machine, and failed at 64 on a slower one),
    # plus the store batch it had written to its crawl.log and not yet committed (SIGKILL), or
    # its whole pipeline, stored after SIGCONT (SIGSTOP).
    stored = [line["url"] for node in everyone for line in read_crawl_log(node.data_dir)]
    stored_twice = len(stored) - len(set(stored))
    print(f"\n{how}: {stored_twice} stored twice, {unsent} fetched replicas unsent at the loss, "
          f"{duplicates - stored_twice} more fetched twice")
    window = STORE_BATCH if how == "kill" else UNSTORED_BOUND
    assert stored_twice <= unsent + window, f"{stored_twice} pages stored twice, {unsent} fetched replicas unsent"
    assert duplicates - stored_twice <= UNSTORED_BOUND, f"{duplicates} duplicate fetches, {stored_twice} stored twice"


def test_a_joining_node_takes_only_its_new_arc(start_testweb, start_node):
    from crawler_node.cluster.ring import Ring

    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=23, profile={"site-*.test": {"latency_ms": 40}})
    expected = set(web.expected())
    addresses = plan(["a", "b", "c", "d"])
    peers = peers_of(addresses)
    three = {k: v for k, v in peers.items() if k != "d"}
    nodes = {}
    for node_id in ("a", "b", "c"):
        host, port = addresses[node_id]
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=three, wait=False,
                                    seeds=roots(HOSTS) if node_id == "a" else (),
                                    extra_args=[*FAST_CLUSTER, "--secret", SECRET])
    for node in nodes.values():
        node.wait_healthy(30)
    wait_until(lambda: sum(len(read_crawl_log(n.data_dir)) for n in nodes.values()) >= len(expected) // 4,
               120, "a quarter of the crawl")
    host, port = addresses["d"]
    nodes["d"] = start_node("d", host=host, port=port, proxy=web.url, peers={"a": peers["a"]},
                            extra_args=[*FAST_CLUSTER, "--secret", SECRET])
    wait_until(lambda: cluster_idle(nodes["a"]), 180, "cluster idle after the join")
    assert not (lost := missing(list(nodes.values()), expected)), lost
    before, after = Ring(["a", "b", "c"]), Ring(["a", "b", "c", "d"])
    hosts = [f"site-{i}.test" for i in range(HOSTS)]
    predicted = {h for h in hosts if before.owner(h) != after.owner(h)}
    assert all(after.owner(h) == "d" for h in predicted), "only moves to the joiner"
    d_hosts = {line["host"] for line in read_crawl_log(nodes["d"].data_dir)}
    assert d_hosts <= predicted, f"d fetched hosts outside its arc: {d_hosts - predicted}"
    for node_id in ("a", "b", "c"):
        for line in read_crawl_log(nodes[node_id].data_dir):
            assert before.owner(line["host"]) == node_id
    counts = web.stats()["urls"]
    assert {u: n for u, n in counts.items() if n > 1 and not u.endswith("robots.txt")} == {}
