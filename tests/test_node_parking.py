"""A node that keeps at most --active-hosts hosts with work in memory crawls a web of many more:
the others wait on disk and come in by turns, and the crawl is whole, exactly once, polite."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from conftest import read_crawl_log, roots

from crawler_node.tools import client

HOSTS, PAGES, ACTIVE = 24, 20, 4
CRAWL_DELAY = 0.2
PROFILE = {
    "site-1[0-9].test": {"latency_ms": 15},
    # a host that waits on disk keeps its robots.txt's Crawl-delay when its turn comes
    "site-22.test": {"robots": f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n"},
}


def test_a_node_with_few_active_hosts_crawls_every_host_in_turn(start_testweb, start_node) -> None:
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=11, profile=PROFILE)
    node = start_node(proxy=web.url, seeds=roots(HOSTS),
                      extra_args=["--active-hosts", str(ACTIVE), "--host-limit-start", "2",
                                  "--host-limit-ceiling", "3"])
    active_seen, parked_seen, listed = [], [], None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = node.status()
        active_seen.append(status["frontier"]["hosts_in_memory"])
        parked_seen.append(status["frontier"]["parked_queued"])
        if listed is None and parked_seen[-1] > 0:
            listed = client.hosts(node.url, limit=100)  # what `crawler-node hosts` shows meanwhile
        if status["idle"]:
            break
        time.sleep(0.1)
    status = node.wait_idle(timeout_s=30)

    assert max(active_seen) <= ACTIVE, active_seen  # never more hosts with work in memory
    assert max(parked_seen) > 0  # and the others did wait on disk
    assert listed is not None and listed["total"] <= ACTIVE and listed["parked_urls"] > 0
    assert status["counters"]["hosts_unparked"] >= HOSTS - ACTIVE
    assert status["frontier"]["parked_queued"] == 0
    logged = [line["url"] for line in read_crawl_log(node.data_dir)]
    assert set(logged) == set(web.expected())
    assert len(logged) == len(set(logged))  # none fetched twice
    stats = web.stats()
    repeated = {url: n for url, n in stats["urls"].items() if n != 1 and not url.endswith("/robots.txt")}
    assert repeated == {}
    assert stats["hosts"]["site-22.test"]["min_gap_s"] >= CRAWL_DELAY
    assert max(host["peak_concurrency"] for host in stats["hosts"].values()) <= 3


SLOW_HOSTS, SLOW_PAGES, SLOW_LATENCY_MS = ("site-0.test", "site-1.test"), 40, 150
TURN_PROFILE = {"site-[01].test": {"latency_ms": SLOW_LATENCY_MS}}


def first_and_last_fetch(lines: list[dict]) -> dict[str, tuple[float, float]]:
    times: dict[str, list[float]] = {}
    for line in lines:
        times.setdefault(line["host"], []).append(datetime.fromisoformat(line["fetched_at"]).timestamp())
    return {host: (min(ts), max(ts)) for host, ts in times.items()}


@pytest.mark.parametrize("turn_s", [0.5, 0])
def test_hosts_with_long_queues_take_turns_with_the_hosts_waiting_on_disk(start_testweb, start_node, turn_s) -> None:
    # Two slow hosts (one request at a time, 150 ms each: 6 s of work each) hold both places
    # first. With turns, the six quick hosts get theirs while the slow ones are still at work;
    # without (0, the control), they wait for a slow host to finish.
    web = start_testweb(hosts=8, pages=SLOW_PAGES, seed=5, profile=TURN_PROFILE)
    node = start_node(proxy=web.url, seeds=roots(8),
                      extra_args=["--active-hosts", "2", "--host-turn-s", str(turn_s),
                                  "--host-limit-start", "1", "--host-limit-ceiling", "1"])
    status = node.wait_idle(timeout_s=120)

    spans = first_and_last_fetch(read_crawl_log(node.data_dir))
    assert set(spans) == {f"site-{n}.test" for n in range(8)}
    slow_done = min(spans[host][1] for host in SLOW_HOSTS)
    quick_started = max(span[0] for host, span in spans.items() if host not in SLOW_HOSTS)
    if turn_s:
        assert quick_started < slow_done, spans  # every quick host began before either slow one ended
        assert status["counters"]["turns_ended"] >= 2
        assert web.stats()["hosts"]["site-0.test"]["peak_concurrency"] == 1  # polite across its turns
    else:
        assert quick_started > slow_done, spans
        assert status["counters"]["turns_ended"] == 0
    assert {line["url"] for line in read_crawl_log(node.data_dir)} == set(web.expected())
