"""Frontier memory benchmark: RSS must grow with hosts, not with URLs.

Fills a Frontier with 10k, 100k and 1M queued URLs (100 URLs per host, so 100 to 10,000 hosts),
each size in a fresh subprocess so one run's heap cannot pollute the next, adds in batches of
500 like the node does, runs lease/apply cycles, then measures RSS. Also times add and
lease+apply per URL on the way. Writes bench/results/memory.json; the target is
RSS(1M) / RSS(100k) <= 1.3.

    /work/venv/bin/python bench/memory.py [--sizes 10000 100000 1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from crawler_node.frontier.frontier import Frontier, FrontierBatch, UrlEntry
from crawler_node.runtime.malloctune import keep_heap_for_reuse

RESULTS_PATH = Path(__file__).parent / "results" / "memory.json"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
URLS_PER_HOST = 100
MIN_HOSTS, MAX_HOSTS = 100, 10_000
ADD_BATCH = 500
LEASE_CYCLES = 400
LEASE_BATCH = 50
DISCOVERED_PER_PAGE = 5
LINKS_PER_PAGE = 10
DUPLICATE_SAMPLE = 20_000
TARGET_RATIO = 1.3


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # KiB on Linux


def host_count(urls: int) -> int:
    return max(MIN_HOSTS, min(MAX_HOSTS, urls // URLS_PER_HOST))


def make_entry(n: int, hosts: int) -> UrlEntry:
    # URLs of realistic length arriving in runs of LINKS_PER_PAGE per host (a page's links
    # mostly point to its own site), the runs' hosts scattered over the whole host set.
    host = f"site-{(n // LINKS_PER_PAGE * 7919) % hosts}.test"
    return UrlEntry(url=f"http://{host}/section/{n % 97}/page-{n}.html?ref={n * 31 % 100_003}",
                    host=host, depth=n % 5, priority=n % 3)


def fill(frontier: Frontier, urls: int, hosts: int) -> float:
    """Add `urls` URLs in node-sized batches; return µs per URL."""
    started = time.perf_counter()
    for start in range(0, urls, ADD_BATCH):
        stop = min(start + ADD_BATCH, urls)
        frontier.add([make_entry(n, hosts) for n in range(start, stop)])
    return (time.perf_counter() - started) / urls * 1e6


def add_duplicates(frontier: Frontier, urls: int, hosts: int) -> float:
    """Re-add URLs already seen (most links a crawl finds); return µs per URL."""
    sample = [make_entry((n * 104_729) % urls, hosts) for n in range(min(urls, DUPLICATE_SAMPLE))]
    started = time.perf_counter()
    for start in range(0, len(sample), ADD_BATCH):
        result = frontier.add(sample[start:start + ADD_BATCH])
        assert not result.accepted, "a seen URL was accepted again"
    return (time.perf_counter() - started) / len(sample) * 1e6


def lease_apply_cycles(frontier: Frontier, hosts: int, next_url: int) -> dict[str, float]:
    """Lease a batch from one host after another and finish it, as the fetch loop would."""
    leased = 0
    lease_s = apply_s = 0.0
    cycles = min(LEASE_CYCLES, next_url // (2 * LEASE_BATCH))  # never drain the frontier
    for cycle in range(cycles):
        host = f"site-{(cycle * 37) % hosts}.test"
        started = time.perf_counter()
        leases, _ = frontier.lease(host, LEASE_BATCH)
        middle = time.perf_counter()
        frontier.apply(FrontierBatch(done=[lease.id for lease in leases]))
        apply_s += time.perf_counter() - middle
        lease_s += middle - started
        leased += len(leases)
    # Then cycles that also add what the pages linked to, the usual shape of a batch.
    for cycle in range(cycles // 4):
        leases, _ = frontier.lease(f"site-{(cycle * 53) % hosts}.test", LEASE_BATCH)
        found = len(leases) * DISCOVERED_PER_PAGE
        discovered = [make_entry(next_url + i, hosts) for i in range(found)]
        next_url += len(discovered)
        frontier.apply(FrontierBatch(done=[lease.id for lease in leases], add=discovered))
    return {
        "leased": leased,
        "lease_us_per_url": lease_s / leased * 1e6,
        "apply_done_us_per_url": apply_s / leased * 1e6,
        "lease_apply_us_per_url": (lease_s + apply_s) / leased * 1e6,
    }


def run_child(urls: int, directory: Path) -> dict[str, float]:
    keep_heap_for_reuse()  # as in a node's process (crawler_node.daemon), which holds the frontier
    hosts = host_count(urls)
    baseline = rss_mb()
    path = directory / "frontier.sqlite3"
    frontier = Frontier(path)
    add_us = fill(frontier, urls, hosts)
    duplicate_us = add_duplicates(frontier, urls, hosts)
    after_add = rss_mb()
    timings = lease_apply_cycles(frontier, hosts, next_url=urls)
    started = time.perf_counter()
    for _ in range(100):
        frontier.totals()
    totals_us = (time.perf_counter() - started) / 100 * 1e6
    totals = frontier.totals()
    started = time.perf_counter()
    for _ in range(10):
        sum(1 for _ in frontier.hosts_with_work())
    hosts_with_work_ms = (time.perf_counter() - started) / 10 * 1e3
    gc.collect()
    after_cycles = rss_mb()
    frontier.close()
    started = time.perf_counter()
    reopened = Frontier(path)  # rebuilds the per-host records from the database
    open_s = time.perf_counter() - started
    reopened.close()
    return {
        "urls": urls,
        "hosts": hosts,
        "queued": totals["queued"],
        "baseline_rss_mb": baseline,
        "rss_after_add_mb": after_add,
        "rss_mb": after_cycles,
        "peak_rss_mb": peak_rss_mb(),
        "db_mb": sum(p.stat().st_size for p in directory.iterdir()) / 1e6,
        "add_us_per_url": add_us,
        "add_duplicate_us_per_url": duplicate_us,
        "hosts_with_work_ms": hosts_with_work_ms,
        "totals_us": totals_us,
        "reopen_s": open_s,
        **timings,
    }


def measure(urls: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="frontier-bench-"))
    try:
        output = subprocess.run(
            [sys.executable, __file__, "--child", str(urls), str(directory)],
            check=True, capture_output=True, text=True,
        ).stdout
        return json.loads(output)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def print_table(rows: list[dict[str, float]]) -> None:
    print(f"{'urls':>9} {'hosts':>6} {'rss MB':>7} {'peak MB':>8} {'db MB':>7} {'add µs':>7}"
          f" {'dup µs':>7} {'lease µs':>9} {'apply µs':>9} {'totals µs':>10} {'reopen s':>9}")
    for row in rows:
        print(f"{row['urls']:>9} {row['hosts']:>6} {row['rss_mb']:>7.1f} {row['peak_rss_mb']:>8.1f}"
              f" {row['db_mb']:>7.1f} {row['add_us_per_url']:>7.1f}"
              f" {row['add_duplicate_us_per_url']:>7.1f} {row['lease_us_per_url']:>9.1f}"
              f" {row['apply_done_us_per_url']:>9.1f} {row['totals_us']:>10.1f}"
              f" {row['reopen_s']:>9.2f}")
    print("µs columns are per URL (totals: per call); lease/apply in batches of"
          f" {LEASE_BATCH} from one host")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--out", type=Path, default=RESULTS_PATH)
    parser.add_argument("--child", nargs=2, metavar=("URLS", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(int(args.child[0]), Path(args.child[1]))))
        return
    rows = [measure(urls) for urls in args.sizes]
    print_table(rows)
    by_size = {row["urls"]: row for row in rows}
    ratio = None
    if 100_000 in by_size and 1_000_000 in by_size:
        ratio = by_size[1_000_000]["rss_mb"] / by_size[100_000]["rss_mb"]
        verdict = "ok" if ratio <= TARGET_RATIO else "ABOVE TARGET"
        print(f"RSS(1M)/RSS(100k) = {ratio:.3f} (target <= {TARGET_RATIO}: {verdict})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(
        {"runs": rows, "rss_ratio_1m_100k": ratio, "target_ratio": TARGET_RATIO}, indent=2
    ) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
