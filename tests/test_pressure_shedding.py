"""The bad afternoon, part 5: a flood of low-priority URLs, far past the frontier's high-water
mark. The lowest-priority ones are deferred (kept on disk) before they cost a fetch, the seeds
still go first, every deferral is counted exactly, and the deferred URLs are crawled later.

``--max-depth 0`` keeps the crawl to exactly what the test submits, so every count is known."""

from __future__ import annotations

import sqlite3
import time

from conftest import read_crawl_log, wait_until
from pressure_helpers import fetched_at, post

HOSTS, PAGES = 6, 100
HIGH, LOW = 200, 60
NODE_ARGS = ["--max-depth", "0", "--host-limit-start", "1", "--host-limit-ceiling", "1",
             "--shed-high-water", str(HIGH), "--shed-low-water", str(LOW), "--shed-after-s", "0.5"]


def frontier_rows(data_dir, state: int) -> dict[str, int]:
    with sqlite3.connect(f"file:{data_dir / 'frontier.sqlite3'}?mode=ro", uri=True) as db:
        return dict(db.execute("SELECT url, priority FROM urls WHERE state = ?", (state,)))


def test_a_flood_of_low_priority_urls_is_deferred_counted_and_crawled_later(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=3, profile={"site-*.test": {"latency_ms": 100}})
    roots = [f"http://site-{i}.test/" for i in range(HOSTS)]
    flood = sorted(url for url in web.expected() if url not in roots)
    first, second = flood[: len(flood) * 2 // 3], flood[len(flood) * 2 // 3:]
    node = start_node(proxy=web.url, extra_args=NODE_ARGS)

    # The flood: discovered-link priorities -1 .. -5 (as if found 1 to 5 links deep).
    prioritised = [{"url": url, "priority": -(1 + i % 5)} for i, url in enumerate(first)]
    code, body = post(f"{node.url}/v1/urls", {"urls": prioritised})
    assert code == 202 and body["accepted"] == len(first)
    wait_until(lambda: (s := node.status())["shedding"]["active"] and s, 20, "shedding to start")

    # The lowest priorities went first, and the count is exact.
    deferred = frontier_rows(node.data_dir, 4)
    queued = frontier_rows(node.data_dir, 0)
    assert deferred and max(deferred.values()) <= min(queued.values())
    shedding = node.status()["shedding"]
    assert shedding["deferred_now"] == len(deferred)
    assert shedding["deferred_by_reason"] == {"queue_over_high_water": len(deferred)}
    assert node.status()["frontier"]["queued"] <= (HIGH + LOW) // 2

    # Seeds arrive while the node is shedding; more of the flood arrives too and is parked on
    # arrival, since nothing at its priority is being queued right now.
    seeded_at = time.time()
    code, _ = post(f"{node.url}/v1/urls", {"urls": roots})
    assert code == 202
    code, body = post(f"{node.url}/v1/urls", {"urls": [{"url": u, "priority": -5} for u in second]})
    assert code == 202 and body["accepted"] == len(second)
    shedding = node.status()["shedding"]
    assert shedding["active"], "the queue drained before the second flood; slow the hosts down"
    assert shedding["deferred_by_reason"] == {"queue_over_high_water": len(deferred),
                                              "arrived_while_shedding": len(second)}
    assert set(frontier_rows(node.data_dir, 4)) == set(deferred) | set(second)

    final = node.wait_idle(timeout_s=60)
    lines = read_crawl_log(node.data_dir)
    started = {line["url"]: fetched_at(line) for line in lines}

    # Everything was crawled in the end, each URL exactly once, and nothing is deferred now.
    assert set(started) == set(flood) | set(roots)
    assert {url: n for url, n in web.stats()["urls"].items() if n != 1 and not url.endswith("/robots.txt")} == {}
    shedding = final["shedding"]
    assert shedding["deferred_now"] == 0 and final["frontier"]["deferred"] == 0
    # counted exactly: nothing parked on arrival but the second flood, every deferral came back
    # (a later round of deferring, had the queue gone over the mark again, would add to the first)
    by_reason = shedding["deferred_by_reason"]
    assert by_reason["arrived_while_shedding"] == len(second), shedding
    assert by_reason["queue_over_high_water"] >= len(deferred), shedding
    assert shedding["deferred_total"] == sum(by_reason.values()) == shedding["restored_total"], shedding
    assert not shedding["active"] and shedding["activations"] >= 1

    # The seeds went first: each was fetched before any URL that was deferred when it came.
    parked = set(deferred) | set(second)
    assert all(seeded_at - 1 <= started[root] < min(started[url] for url in parked) for root in roots)
