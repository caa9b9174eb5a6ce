"""A member that was down when the cluster was paused or resumed catches up when it is back:
the newest pause or resume among the members wins, on what testweb saw."""

from __future__ import annotations

import time

from cluster_helpers import cluster_idle, missing, wait_until
from conftest import read_crawl_log, roots
from test_control import call, cli, settled, start_cluster


def _down_at(node, member: str) -> bool:
    return any(m["id"] == member and m["state"] == "down" for m in node.status()["members"])


def test_a_member_down_at_pause_and_at_resume_catches_up_on_each(start_testweb, start_node):
    hosts = 9
    web = start_testweb(hosts=hosts, pages=40, seed=57, profile={"site-*.test": {"latency_ms": 60}})
    expected = set(web.expected())
    nodes = start_cluster(start_node, web, seeds=roots(hosts))
    members = list(nodes.values())
    a, c = nodes["a"], nodes["c"]
    wait_until(lambda: web.stats(summary=True)["totals"]["requests"] >= 30, 60, "the crawl under way")

    # Paused while c is down: the command skips it, then c comes back paused.
    c.kill()
    wait_until(lambda: _down_at(a, "c"), 20, "a sees c down")
    paused = cli("pause", "--node", a.url, "--reason", "while c was away")
    assert paused.returncode != 0 and "down" in paused.stdout + paused.stderr  # incomplete: c was not reached
    c.start()
    wait_until(lambda: c.status()["paused"] is True, 20, "c catches up on the pause")
    assert c.status()["pause"]["reason"] == "while c was away"
    assert "catching up from" in c.log_tail(200)
    wait_until(lambda: settled(web, members), 30, "in-flight requests ended")
    before = web.stats(summary=True)["totals"]["requests"]
    deadline = time.monotonic() + 3.0  # a bounded window in which no member may send anything
    while time.monotonic() < deadline:
        assert web.stats(summary=True)["totals"]["requests"] == before
        time.sleep(0.2)

    # Resumed while c is down (its paused.json still says paused): c comes back crawling.
    c.kill()
    wait_until(lambda: _down_at(a, "c"), 20, "a sees c down again")
    assert call("POST", f"{a.url}/v1/control/resume")[0] == 200
    c.start()
    wait_until(lambda: c.status()["paused"] is False, 20, "c catches up on the resume")
    wait_until(lambda: cluster_idle(a), 180, "the cluster idle after resume")
    assert not (lost := missing(members, expected)), lost
    # and a member that missed nothing changes nothing: a's own change is still the resume
    assert a.status()["paused"] is False


def _dropped_on(node) -> list[str]:
    status, answer = call("POST", f"{node.url}/v1/control/sync", body=b'{"change": null}')
    assert status == 200, answer
    return answer["dropped"]


def test_a_dropped_host_stays_dropped_on_every_member_while_the_crawl_goes_on(start_testweb, start_node):
    """Pages in flight when the host is dropped, and other hosts' pages, still link to it: those
    URLs end unfetched (host_dropped) on whichever member they reach; no request follows."""
    hosts = 6
    web = start_testweb(hosts=hosts, pages=60, seed=58, profile={"site-1.test": {"latency_ms": 80}})
    expected = set(web.expected())
    nodes = start_cluster(start_node, web, seeds=roots(hosts))
    members = list(nodes.values())
    target = "site-1.test"
    wait_until(lambda: (web.stats(hosts=[target])["hosts"].get(target) or {}).get("requests", 0) >= 4, 60,
               "site-1 being crawled")
    dropped = cli("drop-host", "--node", nodes["c"].url, target, "--json")
    assert dropped.returncode == 0, dropped.stderr
    wait_until(lambda: all(target in _dropped_on(node) for node in members), 15, "every member has it dropped")
    wait_until(lambda: web.stats(hosts=[target])["hosts"][target]["in_flight"] == 0, 30, "site-1's requests ended")
    requests = web.stats(hosts=[target])["hosts"][target]["requests"]
    wait_until(lambda: cluster_idle(nodes["a"]), 180, "the cluster idle")
    assert web.stats(hosts=[target])["hosts"][target]["requests"] == requests
    others = {url for url in expected if f"//{target}/" not in url}
    assert not (lost := missing(members, others)), lost
    lines = [line for node in members for line in read_crawl_log(node.data_dir, everything=True)]
    assert all(line["host"] == target for line in lines if line["outcome"] == "host_dropped")
    assert sum(node.status()["frontier"]["queued"] for node in members) == 0
