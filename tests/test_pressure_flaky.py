"""The bad afternoon, part 3: a flaky site (30% 503) and a site that keeps answering 429
without Retry-After (40% of its requests, whatever the concurrency). Retries are load: they are
bounded by the per-URL budget, spaced by backoff with jitter, counted per host and overall, and
never spill onto healthy hosts."""

from __future__ import annotations

import statistics
from collections import defaultdict

from conftest import read_crawl_log, roots
from pressure_helpers import fetched_at, get_text

HOSTS, PAGES = 6, 40
BUDGET = 3
RETRY_BASE_S = 0.2
BACKOFF_S = 0.3
FLAKY, STUBBORN = "site-0.test", "site-1.test"
PROFILE = {
    "site-*.test": {"latency_ms": 20},
    FLAKY: {"error_rate": 0.3, "error_status": 503},
    STUBBORN: {"error_rate": 0.4, "error_status": 429, "latency_ms": 50},  # testweb sends no Retry-After here
}
NODE_ARGS = ["--retry-budget", str(BUDGET), "--retry-base-s", str(RETRY_BASE_S), "--retry-cap-s", "2",
             "--host-limit-start", "4",
             "--host-backoff-after", "2", "--host-backoff-initial-s", str(BACKOFF_S), "--host-backoff-cap-s", "1",
             "--host-backoff-forgive-s", "3"]



def test_retries_are_bounded_spaced_counted_and_stay_on_their_host(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=9, profile=PROFILE)
    expected = web.expected()
    node = start_node(proxy=web.url, seeds=roots(HOSTS), extra_args=NODE_ARGS)
    status = node.wait_idle(timeout_s=60)
    lines = read_crawl_log(node.data_dir)
    stats = web.stats()
    hosts = {h["host"]: h for h in status["hosts"]}
    per_host_urls = defaultdict(set)
    for url in expected:
        per_host_urls[url.split("/")[2]].add(url)

    # Budget: never more than (1 + budget) requests per page of the flaky host (+ robots.txt).
    flaky_urls = {line["url"] for line in lines if line["host"] == FLAKY}
    assert stats["hosts"][FLAKY]["errors"] > 0
    assert stats["hosts"][FLAKY]["requests"] <= (1 + BUDGET) * len(flaky_urls) + 1
    attempts = defaultdict(list)
    for line in lines:
        attempts[line["url"]].append(line)
    assert max(len(tries) for tries in attempts.values()) <= 1 + BUDGET

    # Spacing: the gap between a failed attempt and the next follows full-jitter backoff,
    # uniform in [0, base * 2^(k-1)]: its median is not a burst.
    gaps = []
    for tries in attempts.values():
        times = sorted(fetched_at(line) for line in tries)
        gaps += [later - earlier for earlier, later in zip(times, times[1:])]
    assert len(gaps) >= 5
    assert statistics.median(gaps) >= RETRY_BASE_S / 4, gaps

    # Retry ratio reported per host and overall, and in /metrics.
    flaky = hosts[FLAKY]
    assert flaky["retries"] > 0 and flaky["retry_ratio"] == round(flaky["retries"] / flaky["fetched"], 4)
    assert status["retries"]["ratio"] > 0 and status["counters"]["retry_ratio"] > 0
    metrics = get_text(f"{node.url}/metrics")
    assert f'crawler_host_retry_ratio{{host="{FLAKY}"}}' in metrics

    # Failures that used up their budget are the flaky host's 503s, nobody else's.
    given_up = [url for url, tries in attempts.items() if all(line["status"] in (429, 503) for line in tries)]
    assert all(url.split("/")[2] in (FLAKY, STUBBORN) and len(attempts[url]) == 1 + BUDGET for url in given_up)
    assert len({url for url, tries in attempts.items() if tries[-1]["status"] == 200}) >= 0.95 * len(expected)

    # The stubborn host (429, no Retry-After): AIMD cut its limit, and as the 429s kept coming
    # the host was paused as a whole, each pause a visible gap between its requests.
    stubborn = hosts[STUBBORN]
    assert stubborn["backoffs"] >= 1 and status["retries"]["host_backoffs"] == stubborn["backoffs"]
    assert stubborn["limit"] <= 2 and stubborn["limit_decreases"] >= 2
    starts = sorted(fetched_at(line) for line in lines if line["host"] == STUBBORN)
    pauses = sum(later - earlier >= 0.8 * BACKOFF_S for earlier, later in zip(starts, starts[1:]))
    assert pauses >= stubborn["backoffs"]
    assert stats["hosts"][STUBBORN]["requests"] <= (1 + BUDGET) * len(per_host_urls[STUBBORN]) + 1

    # No retry storm elsewhere: every other host saw each of its URLs once, plus robots.txt.
    for name in (f"site-{i}.test" for i in range(2, HOSTS)):
        assert stats["hosts"][name]["requests"] == len(per_host_urls[name]) + 1, name
        assert hosts.get(name, {"retries": 0})["retries"] == 0
