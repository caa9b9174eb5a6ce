"""A whole node on a big frontier: `crawler-node run` crawling testweb while its frontier also
holds 10M queued URLs over a million other hosts, against the same node on a frontier of 100k.

bench/scale.py measures the frontier alone (its thread's pages/s at 10M: x0.46-0.55 of a fresh
100k's). What a user sees is the node's pages/s, of which the frontier's thread is one part:
this runs the node itself. Each side's data directory gets a frontier made beforehand, in this
process, with the node's Frontier: the roots of --testweb-hosts testweb hosts (`site-N.test`),
then --queued URLs from bench/scale.py's generator (`www.site-N.example`, Zipf over a million
names; --reference for the small side). A node brings its active hosts in by host name
(frontier/host_records.py), so with more testweb hosts than --active-hosts the crawl stays on testweb
for the whole window and the generator's hosts only weigh on the frontier's tables, as the rest
of a big crawl does: each of their rows is in the indexes every new link and every lease meets.

Timed: from the --warmup'th page fetched to --crawl pages later (the node's `fetched` counter,
polled), with the node's CPU over the same window; then the p99 of its lease rounds from
/metrics (`crawler_frontier_call_duration_seconds{call="lease_many"}`, what the alert
CrawlerFrontierSlow watches, threshold 0.5 s), the frontier calls of any kind that took longer
than that, and the slowest answer to a status poll. Sides alternate over --rounds, each on a fresh
copy of its prefilled frontier.

    python bench/node_scale.py                        # 10M against 100k, one round each
    python bench/node_scale.py --queued 1000000 --rounds 2
    python bench/node_scale.py --keep /tmp/prefilled --node-arg=--active-hosts=1000 --testweb-hosts 1200 --pages 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the generator)
from throughput import process_tree_cpu  # noqa: E402

from crawler_node.frontier.frontier import Frontier, FrontierBatch, UrlEntry  # noqa: E402
from crawler_node.node.stage_items import SEED_PRIORITY  # noqa: E402
from crawler_node.runtime.malloctune import keep_heap_for_reuse  # noqa: E402
from crawler_node.testweb.process import TestwebProcess  # noqa: E402
from crawler_node.tools.node_process import NodeProcess  # noqa: E402

# scale.py imports the frontier's records in its child only (whose tree is on PYTHONPATH):
# its generator makes them with this tree's
scale.UrlEntry = UrlEntry  # type: ignore[attr-defined]

RESULTS = Path(__file__).resolve().parent / "results"
ACTIVE_HOSTS = 10_000  # the node's default --active-hosts
LEASE_P99_ALERT_S = 0.5  # deploy/prometheus/alerts.yml: CrawlerFrontierSlow


def prefill(path: Path, roots: int, queued: int) -> dict:
    """A frontier at `path`: the roots of `roots` testweb hosts, then the generator's URLs until
    `queued` more are queued."""
    started = time.perf_counter()
    frontier = Frontier(path, resident_hosts=ACTIVE_HOSTS)
    try:
        for first in range(0, roots, scale.STORE_BATCH):
            frontier.apply(FrontierBatch(add=[
                UrlEntry(f"http://site-{i}.test/", f"site-{i}.test", 0, SEED_PRIORITY)
                for i in range(first, min(roots, first + scale.STORE_BATCH))]))
        web = scale.Web()
        target = frontier.totals()["queued"] + queued
        while frontier.totals()["queued"] < target:
            batch: list[UrlEntry] = []
            for _ in range(scale.STORE_BATCH):
                host = web.host()
                batch += web.fill_page(host, f"http://{host}/section-{web.next_url % 97}/index.html")
            frontier.apply(FrontierBatch(add=batch))
        totals = frontier.totals()
    finally:
        frontier.close()
    return {"queued": totals["queued"], "fill_s": time.perf_counter() - started}


def call_latencies(metrics: str) -> dict[str, dict[str, float]]:
    """Per frontier call (`crawler_frontier_call_duration_seconds`, its wait for the frontier's
    thread included): how many, the p99 (the bound of the bucket it falls in) and how many
    took longer than the alert's 0.5 s."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    prefix = 'crawler_frontier_call_duration_seconds_bucket{call="'
    for line in metrics.splitlines():
        if line.startswith(prefix):
            call, _, rest = line[len(prefix):].partition('",le="')
            bound, _, count = rest.partition('"} ')
            buckets.setdefault(call, []).append((float(bound), float(count)))
    found = {}
    for call, counts in buckets.items():
        total = counts[-1][1]
        within = max((count for bound, count in counts if bound <= LEASE_P99_ALERT_S), default=0.0)
        found[call] = {"calls": total, "p99_s": next(bound for bound, count in counts if count >= 0.99 * total),
                       "over_alert": total - within}
    return found


def crawl(web: TestwebProcess, data_dir: Path, warmup: int, pages: int, concurrency: int, extra: list[str]) -> dict:
    node = NodeProcess(node_id="bench", data_dir=data_dir, proxy=web.url,
                       extra_args=["--global-inflight", str(concurrency), "--log-level", "WARNING", *extra])
    with node:
        marks: dict[int, tuple[float, float]] = {}
        deadline = time.monotonic() + 1800
        slowest = 0.0  # the longest status answer: a node whose loop or frontier stalls answers late
        while len(marks) < 2 and time.monotonic() < deadline:
            asked = time.perf_counter()
            fetched = node.status(timeout=120)["counters"]["fetched"]
            slowest = max(slowest, time.perf_counter() - asked)
            for mark in (warmup, warmup + pages):
                if fetched >= mark and mark not in marks:
                    marks[mark] = (time.perf_counter(), process_tree_cpu(node.pid))
            time.sleep(0.2)
        if len(marks) < 2:
            raise RuntimeError(f"the node fetched {fetched} pages in 30 min")
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=30) as response:
            calls = call_latencies(response.read().decode())
    (t0, cpu0), (t1, cpu1) = marks[warmup], marks[warmup + pages]
    return {"pages_per_s": pages / (t1 - t0), "cpu_us_per_page": (cpu1 - cpu0) / pages * 1e6,
            "calls": calls, "slowest_status_s": slowest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=10_000_000, help="the generator's URLs on the big side")
    parser.add_argument("--reference", type=int, default=100_000, help="the generator's URLs on the small side")
    parser.add_argument("--testweb-hosts", type=int, default=12_000)
    parser.add_argument("--pages", type=int, default=10, help="pages per testweb host")
    parser.add_argument("--warmup", type=int, default=5_000, help="pages fetched before the window")
    parser.add_argument("--crawl", type=int, default=30_000, help="pages in the timed window")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--node-arg", action="append", default=[], help="extra option for crawler-node run")
    parser.add_argument("--tmp", type=Path, default=Path("/tmp"))
    parser.add_argument("--keep", type=Path,
                        help="a directory where the prefilled frontiers are kept, and reused when there (a 10M one"
                             " takes ~10 min to make)")
    args = parser.parse_args()
    active = int(next((arg.partition("=")[2] for arg in args.node_arg if arg.startswith("--active-hosts=")),
                      ACTIVE_HOSTS))
    if args.testweb_hosts <= active or args.testweb_hosts * args.pages < args.warmup + args.crawl:
        parser.error("testweb needs more hosts than --active-hosts and more pages than the window")
    keep_heap_for_reuse()
    sides = {"reference": args.reference, "big": args.queued}
    results: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="bench-node-scale-", dir=args.tmp) as tmp:
        made = {}
        for name, queued in sides.items():
            made[name] = (args.keep or Path(tmp)) / f"frontier-{args.testweb_hosts}-{queued}.sqlite3"
            if made[name].exists():
                print(f"{name}: {made[name]} as made before", flush=True)
                continue
            made[name].parent.mkdir(parents=True, exist_ok=True)
            filled = prefill(made[name], args.testweb_hosts, queued)
            print(f"{name}: {filled['queued']:,} queued, made in {filled['fill_s']:.0f} s", flush=True)
        with TestwebProcess(hosts=args.testweb_hosts, pages=args.pages, seed=1, tmp_dir=Path(tmp)) as web:
            os.chdir(tmp)  # a neutral working directory for the node
            for index in range(args.rounds):
                order = list(sides) if index % 2 == 0 else list(reversed(sides))
                for name in order:
                    web.reset()
                    data_dir = Path(tmp) / f"node-{name}-{index}"
                    data_dir.mkdir()
                    for suffix in ("", "-wal"):
                        source = made[name].with_name(made[name].name + suffix)
                        if source.exists():
                            shutil.copyfile(source, data_dir / f"frontier.sqlite3{suffix}")
                    run = crawl(web, data_dir, args.warmup, args.crawl, args.concurrency, args.node_arg)
                    results[name].append(run)
                    lease = run["calls"].get("lease_many", {"p99_s": 0.0, "calls": 0})
                    slow = ", ".join(f"{call} {figures['over_alert']:.0f}" for call, figures in run["calls"].items()
                                     if figures["over_alert"])
                    print(f"round {index + 1} {name:>9}: {run['pages_per_s']:7,.0f} pages/s,"
                          f" {run['cpu_us_per_page']:5.0f} CPU-µs/page, lease round p99 <= {lease['p99_s']:.3f} s"
                          f" ({lease['calls']:,.0f} rounds; alert at {LEASE_P99_ALERT_S} s), calls over"
                          f" {LEASE_P99_ALERT_S} s: {slow or 'none'}; slowest status {run['slowest_status_s']:.2f} s",
                          flush=True)
                    shutil.rmtree(data_dir)
    ratios = sorted(big["pages_per_s"] / ref["pages_per_s"]
                    for big, ref in zip(results["big"], results["reference"], strict=True))
    print(f"{args.queued:,} against {args.reference:,} queued besides the crawl: node pages/s"
          f" x{ratios[len(ratios) // 2]:.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.8)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "node_scale.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                         "results": results, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
