"""The bad afternoon, part 1: one site throttles (tolerates 3 concurrent requests) among 20
healthy ones. Its limit converges to at most 3 with few 429s, and the healthy hosts crawl as
fast as they do without it (no head-of-line blocking). Both runs happen in this test, side by
side on the same testweb, so the comparison is a ratio on one machine, not a timing constant."""

from __future__ import annotations

from conftest import read_crawl_log
from pressure_helpers import fetched_at

HEALTHY = [f"site-{i}.test" for i in range(1, 21)]
THROTTLER = "site-0.test"
PAGES = 120
TOLERATED = 3
PROFILE = {
    # Latency-bound hosts: the node's CPU is not what limits the healthy hosts' pace.
    "site-*.test": {"latency_ms": 150},
    THROTTLER: {"max_concurrency": TOLERATED, "latency_ms": 150},
}
NODE_ARGS = ["--global-inflight", "128", "--host-limit-ceiling", "6", "--retry-base-s", "0.2"]
WARMUP_S = 3.0



def pages_per_s(lines: list[dict], hosts: list[str]) -> tuple[float, int]:
    mine = [line for line in lines if line["host"] in hosts and line["status"] == 200]
    times = [fetched_at(line) for line in mine]
    return len(mine) / (max(times) - min(times)), len(mine)


def test_a_throttling_site_is_limited_alone_and_slows_nobody_else(start_testweb, start_node, tmp_path):
    web = start_testweb(hosts=21, pages=PAGES, seed=11, profile=PROFILE)
    expected = set(web.expected())

    # Run 1, the baseline: the healthy hosts alone (links to the throttler are out of scope).
    alone = start_node("alone", proxy=web.url, seeds=[f"http://{h}/" for h in HEALTHY],
                       extra_args=[*NODE_ARGS, *(arg for h in HEALTHY for arg in ("--allow-host", h))])
    alone.wait_idle(timeout_s=60)
    baseline_rate, baseline_pages = pages_per_s(read_crawl_log(alone.data_dir), HEALTHY)
    alone.stop()
    web.reset()

    # Run 2: the same web with the throttling host in it.
    node = start_node("mixed", proxy=web.url, seeds=[f"http://site-{i}.test/" for i in range(21)],
                      extra_args=NODE_ARGS)
    status = node.wait_idle(timeout_s=60)
    lines = read_crawl_log(node.data_dir)
    stats = web.stats()

    # the crawl completes
    assert {line["url"] for line in lines if line["status"] == 200} == expected

    # the throttler's limit converged to what it tolerates, and was cut for its own 429s only
    hosts = {h["host"]: h for h in status["hosts"]}
    assert hosts[THROTTLER]["limit"] <= TOLERATED
    assert hosts[THROTTLER]["throttle_point"] in (None, TOLERATED + 1)
    assert stats["hosts"][THROTTLER]["throttled"] > 0
    for name in HEALTHY:
        assert stats["hosts"][name]["throttled"] == 0
        assert hosts.get(name, {"limit_decreases": 0})["limit_decreases"] == 0

    # after the first seconds, under 5% of the throttler's requests get a 429
    mine = sorted((fetched_at(line), line["status"]) for line in lines if line["host"] == THROTTLER)
    start = mine[0][0]
    settled = [code for at, code in mine if at >= start + WARMUP_S]
    assert len(settled) >= 30, "too few requests after the warm-up to judge convergence"
    assert sum(code == 429 for code in settled) / len(settled) < 0.05, settled

    # no head-of-line blocking: the healthy hosts go as fast as without the throttler
    mixed_rate, mixed_pages = pages_per_s(lines, HEALTHY)
    assert mixed_pages == baseline_pages
    assert mixed_rate >= 0.8 * baseline_rate, (mixed_rate, baseline_rate)
