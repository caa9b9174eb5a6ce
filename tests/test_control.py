"""Crawl control through any node: pause and resume the whole cluster, stop every member, list
hosts, look at and drop one host's queue; status --watch, the progress log, and the idle state
said in words. Against real nodes and testweb, asserting on what testweb saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, missing, peers_of, plan, wait_until
from conftest import roots
from frontier_helpers import entry

from crawler_node.frontier import FrontierBatch
from crawler_node.frontier.operator_queries import FrontierControl

TOKEN = SECURED[1]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cli(*args: str, secret: str | None = TOKEN, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "CRAWLER_SECRET"}
    if secret is not None:
        env["CRAWLER_SECRET"] = secret  # the token as an operator's shell would hold it
    return subprocess.run([sys.executable, "-m", "crawler_node", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def call(method: str, url: str, *, token: str | None = TOKEN, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def start_cluster(start_node, web, ids=("a", "b", "c"), seeds=(), extra=()):
    addresses = plan(list(ids))
    peers = peers_of(addresses)
    nodes = {}
    for node_id in ids:
        host, port = addresses[node_id]
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers,
                                    seeds=seeds if node_id == ids[0] else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED, *extra])
    return nodes


def settled(web, nodes) -> bool:
    """No request in flight at testweb, none in any node's fetch stage, nothing half-stored."""
    if web.stats(summary=True)["totals"]["in_flight"]:
        return False
    statuses = [node.status() for node in nodes]
    return all(s["queues"]["fetch"]["depth"] == 0 and s["queues"]["parse"]["depth"] == 0
               and s["queues"]["store"]["depth"] == 0 and s["frontier"]["leased"] == 0 for s in statuses)


def test_pause_then_resume_a_cluster_through_one_node(start_testweb, start_node):
    hosts = 12
    # One request at a time per host, 100 ms each: the crawl lasts ~8 s, so the pause finds work
    # queued (a fresh cluster fetches within a fraction of a second of its start).
    web = start_testweb(hosts=hosts, pages=80, seed=51, profile={"site-*.test": {"latency_ms": 100}})
    expected = set(web.expected())
    nodes = start_cluster(start_node, web, seeds=roots(hosts), extra=("--host-limit-start", "1",
                                                                     "--host-limit-ceiling", "1"))
    members = list(nodes.values())
    wait_until(lambda: web.stats(summary=True)["totals"]["requests"] >= 40, 60, "the crawl under way")

    paused = cli("pause", "--node", nodes["b"].url, "--reason", "maintenance window")
    assert paused.returncode == 0, paused.stderr
    assert "pause: every member" in paused.stdout
    for node in members:
        status = node.status()
        assert status["paused"] is True and status["pause"]["reason"] == "maintenance window"
        assert status["admission"]["blocked_by"] == "paused"
    assert nodes["a"].status()["crawl_state"] == "paused (maintenance window)"
    shown = cli("status", "--node", nodes["c"].url)
    assert "PAUSED by b (POST /v1/control/pause) (maintenance window)" in shown.stdout, shown.stdout
    wait_until(lambda: settled(web, members), 30, "in-flight requests ended")
    before = web.stats(summary=True)["totals"]["requests"]
    assert sum(node.status()["frontier"]["queued"] for node in members) > 0  # work is waiting
    deadline = time.monotonic() + 3.0  # a bounded window in which nothing may be sent
    while time.monotonic() < deadline:
        assert web.stats(summary=True)["totals"]["requests"] == before
        time.sleep(0.2)
    # The hosts of every member, merged through one node; one host's queue from its owner.
    listed = json.loads(cli("hosts", "--node", nodes["a"].url, "--json", "--limit", "1000").stdout)
    assert listed["complete"] is True and listed["total"] == len(listed["hosts"])
    for node in members:
        own = [row for row in listed["hosts"] if row["member"] == node.node_id]
        assert sum(row["queued"] for row in own) == node.status()["frontier"]["queued"]
    busiest = listed["hosts"][0]
    owner = nodes[busiest["member"]]
    elsewhere = next(node for node in members if node is not owner)
    shown = json.loads(cli("queue", "--node", elsewhere.url, "--host", busiest["host"], "--json").stdout)
    assert shown["member"] == owner.node_id and shown["queued"] == busiest["queued"]
    # Intake and heartbeats go on while paused: a submitted URL is taken, members stay alive.
    assert cli("submit", "--node", nodes["c"].url, "--secret", TOKEN, "http://site-0.test/extra").returncode == 0
    assert {m["state"] for m in nodes["a"].status()["members"]} == {"alive"}
    assert web.stats(summary=True)["totals"]["requests"] == before

    resumed = cli("resume", "--node", nodes["c"].url)
    assert resumed.returncode == 0, resumed.stderr
    assert all(node.status()["paused"] is False for node in members)
    wait_until(lambda: cluster_idle(nodes["a"]), 120, "the cluster idle after resume")
    assert not (lost := missing(members, expected)), lost
    assert web.stats(summary=True)["totals"]["requests"] > before


def test_stop_through_one_node_stops_every_member(start_testweb, start_node):
    web = start_testweb(hosts=8, pages=30, seed=52, profile={"site-*.test": {"latency_ms": 50}})
    nodes = start_cluster(start_node, web, seeds=roots(8))
    wait_until(lambda: web.stats(summary=True)["totals"]["requests"] >= 20, 60, "the crawl under way")
    # a starts crawling before c is up; on a loaded machine a can call c down (its startup grace
    # over) until c's first heartbeat lands, and a stop then rightly skips c. Stop a whole cluster.
    wait_until(lambda: {m["state"] for m in nodes["a"].status()["members"]} == {"alive"}, 30,
               "a hearing every member")
    stopped = cli("stop", "--node", nodes["a"].url)
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout
    for node in nodes.values():
        assert node.proc is not None
        assert node.proc.wait(timeout=60) == 0, node.log_tail()
        assert "stopped cleanly" in node.log_tail(80)


def test_idle_with_a_member_down_is_said_so(start_testweb, start_node):
    web = start_testweb(hosts=6, pages=10, seed=53)
    nodes = start_cluster(start_node, web, seeds=roots(6), extra=["--progress-interval-s", "1"])
    wait_until(lambda: cluster_idle(nodes["a"]), 120, "the cluster idle")
    for node in (nodes["a"], nodes["b"]):
        wait_until(lambda node=node: "crawl finished" in node.log_tail(200), 15, f"{node.node_id}'s finished line")
    assert "progress: fetched" in nodes["a"].log_tail(400)
    said = nodes["b"].log_tail(200).count("crawl finished")
    nodes["c"].kill()
    words = "idle, but c is down and its queue waits"
    wait_until(lambda: nodes["a"].status()["crawl_state"] == words, 20, "a says c's queue waits")
    assert nodes["a"].status()["idle"] is False
    wait_until(lambda: words in nodes["b"].log_tail(200), 15, "b logs it")
    assert nodes["b"].log_tail(200).count("crawl finished") == said  # not said again with c down


def test_hosts_queue_and_drop_host_through_the_cli(start_testweb, start_node, tmp_path):
    # No cross-host links: a host's URLs come only from its own pages, so once its queue is
    # dropped (with the node paused and settled) nothing can bring them back.
    web = start_testweb(hosts=4, pages=60, seed=54, extra_args=["--cross-link-prob", "0"],
                        profile={"site-1.test": {"latency_ms": 150}})
    node = start_node("solo", proxy=web.url, seeds=roots(4),
                      extra_args=["--secret", TOKEN, "--host-limit-ceiling", "1", "--host-limit-start", "1",
                                  "--progress-interval-s", "1"])
    wait_until(lambda: (web.stats(hosts=["site-1.test"])["hosts"].get("site-1.test") or {}).get("requests", 0) >= 3,
               60, "site-1 being crawled")
    assert cli("pause", "--node", node.url).returncode == 0
    wait_until(lambda: settled(web, [node]), 30, "in-flight requests ended")

    listed = cli("hosts", "--node", node.url, "--json")
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    frontier = node.status()["frontier"]
    assert answer["total"] == len(answer["hosts"]) and {row["host"] for row in answer["hosts"]} <= {
        f"site-{i}.test" for i in range(4)}
    assert sum(row["queued"] for row in answer["hosts"]) == frontier["queued"]
    rows = {row["host"]: row for row in answer["hosts"]}
    assert rows["site-1.test"]["queued"] > 0 and rows["site-1.test"]["member"] == "solo"
    assert all(row["in_flight"] == 0 and row["leased"] == 0 for row in answer["hosts"])
    ordered = [row["queued"] for row in answer["hosts"]]
    assert ordered == sorted(ordered, reverse=True)
    by_host = json.loads(cli("hosts", "--node", node.url, "--json", "--sort", "host", "--limit", "1").stdout)
    assert [row["host"] for row in by_host["hosts"]] == sorted(rows)[:1]
    assert "site-1.test" in cli("hosts", "--node", node.url).stdout  # the table

    queued = rows["site-1.test"]["queued"]
    shown = json.loads(cli("queue", "--node", node.url, "--host", "site-1.test", "--json").stdout)
    assert shown["queued"] == queued and len(shown["urls"]) == min(queued, 100)
    assert all(url["url"].startswith("http://site-1.test/") and url["state"] == "queued" for url in shown["urls"])
    priorities = [url["priority"] for url in shown["urls"]]
    assert priorities == sorted(priorities, reverse=True)

    dropped = cli("drop-host", "--node", node.url, "site-1.test", "--json")
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads(dropped.stdout)["dropped"]["queued"] == queued
    assert "dropped host site-1.test" in node.log_tail(100)
    assert json.loads(cli("queue", "--node", node.url, "--host", "site-1.test", "--json").stdout)["queued"] == 0
    site_1_requests = web.stats(hosts=["site-1.test"])["hosts"]["site-1.test"]["requests"]

    assert cli("resume", "--node", node.url).returncode == 0
    node.wait_idle(120)
    assert web.stats(hosts=["site-1.test"])["hosts"]["site-1.test"]["requests"] == site_1_requests
    assert node.status()["frontier"]["queued"] == 0
    watched = cli("status", "--node", node.url, "--watch", "--interval", "0.3", "--count", "2")
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.count("progress:") == 2 and "solo" in watched.stdout
    wait_until(lambda: "crawl finished" in node.log_tail(200), 15, "the crawl finished line")


def test_pause_survives_a_restart(start_testweb, start_node, tmp_path):
    web = start_testweb(hosts=2, pages=10, seed=55)
    node = start_node("solo", proxy=web.url, extra_args=["--secret", TOKEN])
    assert cli("pause", "--node", node.url).returncode == 0
    node.stop()
    node.seeds = roots(2)
    node.start()
    assert node.status()["paused"] is True
    time.sleep(1.0)  # seeds are taken; nothing may be fetched
    assert node.status()["frontier"]["queued"] == 2
    assert web.stats(summary=True)["totals"]["requests"] == 0
    assert cli("resume", "--node", node.url).returncode == 0
    node.wait_idle(60)
    assert web.stats(summary=True)["totals"]["requests"] > 0


def test_control_needs_the_token_and_well_formed_queries(start_testweb, start_node):
    web = start_testweb(hosts=2, pages=5, seed=56)
    node = start_node("solo", proxy=web.url, extra_args=["--secret", TOKEN])
    for method, path in [("POST", "/v1/control/pause"), ("POST", "/v1/control/resume"),
                         ("POST", "/v1/control/stop"), ("GET", "/v1/hosts"),
                         ("GET", "/v1/hosts/site-0.test/queue"), ("DELETE", "/v1/hosts/site-0.test/queue")]:
        assert call(method, f"{node.url}{path}", token=None)[0] == 401, path
        assert call(method, f"{node.url}{path}", token="wrong")[0] == 401, path
    refused = cli("pause", "--node", node.url, secret=None)
    assert refused.returncode == 1 and "401" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert node.status()["paused"] is False
    for query in ("limit=-1", "limit=0", "limit=x", "sort=bogus", "order=up", "offset=-5"):
        status, answer = call("GET", f"{node.url}/v1/hosts?{query}")
        assert status == 400 and answer["error"] == "bad_query", query
    assert call("GET", f"{node.url}/v1/hosts/site-0.test/queue?limit=-1")[0] == 400
    assert call("GET", f"{node.url}/v1/hosts/bad%20host/queue")[0] == 400
    assert call("POST", f"{node.url}/v1/control/pause", body=b"[1, 2]")[0] == 400
    status, answer = call("GET", f"{node.url}/v1/hosts?limit=5")
    assert status == 200 and answer["complete"] is True
    watch = subprocess.Popen([sys.executable, "-m", "crawler_node", "status", "--node", node.url, "--watch"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None and "solo" in watch.stdout.readline()  # the first frame
        watch.send_signal(signal.SIGINT)  # Ctrl-C ends it, cleanly
        assert watch.wait(timeout=10) == 0
    finally:
        watch.kill()
        watch.wait()
    gone = cli("hosts", "--node", "http://127.0.0.1:9")
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1


def test_stop_through_the_api_of_a_node_alone(start_testweb, start_node):
    web = start_testweb(hosts=2, pages=5, seed=57)
    node = start_node("solo", proxy=web.url, seeds=roots(2), extra_args=["--secret", TOKEN])
    node.wait_idle(60)
    status, answer = call("POST", f"{node.url}/v1/control/stop")
    assert status == 200 and answer["complete"] is True and answer["members"]["solo"]["stopping"] is True
    assert node.proc is not None and node.proc.wait(timeout=30) == 0
    assert "stopped cleanly" in node.log_tail(40)


# ----------------------------------------------------------------- the frontier's part, alone


def test_drop_host_deletes_queued_deferred_and_the_buffer_given_but_not_requests_in_flight(frontier):
    control = FrontierControl.of(frontier)
    frontier.add([entry("a.test", n, priority=n) for n in range(10)] + [entry("b.test", 0, priority=50)])
    frontier.shedding.defer_lowest(2, below_priority=100)  # a.test/page/0 and /1 parked
    leases, _ = frontier.lease("a.test", 3)  # /9, /8, /7: one in flight, two buffered
    in_flight, *buffered = leases
    counts = {c.host: c for c in control.host_counts()}
    assert (counts["a.test"].queued, counts["a.test"].leased, counts["a.test"].deferred) == (5, 3, 2)

    dropped = control.drop_host("a.test", [lease.id for lease in buffered])
    assert dropped == {"queued": 5, "deferred": 2, "leased": 2}
    assert frontier.totals()["queued"] == 1 and frontier.totals()["leased"] == 1
    assert frontier.totals()["deferred"] == 0
    # the request in flight finishes normally; then nothing of a.test is left to lease
    frontier.apply(FrontierBatch(done=[in_flight.id]))
    assert frontier.lease("a.test", 10) == ([], None)
    assert {c.host for c in control.host_counts()} == {"b.test"}
    # the URLs left the seen-set: found again, they are queued again
    assert len(frontier.add([entry("a.test", 2)]).accepted) == 1


def test_host_queue_lists_queued_then_deferred_in_lease_order(frontier):
    control = FrontierControl.of(frontier)
    frontier.add([entry("a.test", n, priority=n % 3) for n in range(6)])
    frontier.shedding.defer_lowest(2, below_priority=1)  # the two of priority 0
    counts, urls = control.host_queue("a.test", 10)
    assert counts is not None and (counts.queued, counts.deferred) == (4, 2)
    assert [u.state for u in urls] == ["queued"] * 4 + ["deferred"] * 2
    assert [u.priority for u in urls[:4]] == [2, 2, 1, 1]
    assert [u.url for u in control.host_queue("a.test", 3)[1]] == [u.url for u in urls[:3]]
    assert control.host_queue("unknown.test", 10) == (None, [])
    assert control.drop_host("unknown.test") == {}
