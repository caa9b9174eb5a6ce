"""Freshness of --recrawl adaptive against --recrawl fixed at the same fetch budget.

Side by side in one run: two testwebs of one seed and profile (so each counts only its own
node's fetches), two nodes crawling them, one `--recrawl adaptive`, one `--recrawl fixed`,
both at `--recrawl-after T` (adaptive spends the same budget, T on average). After a warm-up
the window's figures come from testweb: `/_testweb/freshness?since=` (the time-averaged share
of pages whose last fetch is current), the page fetches and body bytes it served.

The change rates: each /p/N page changes as a Poisson process whose rate is log-normal across
pages (testweb's change_spread, sigma 2: a factor of ~55 between the 10th and 90th percentile
pages, a heavy right tail), median MEDIAN changes per T. Why log-normal: measured change
intervals of web pages spread over orders of magnitude with no natural scale (Brewington &
Cybenko 2000; Cho & Garcia-Molina 2000 found pages changing every few minutes and pages not
changing in months), which a log-normal of wide sigma reproduces with two numbers; a Pareto
tail does not cover the slow end. The median sets how tight the budget is: at MEDIAN 10 most
pages change faster than they can be revisited, which is where the choice of whom to revisit
matters (with a loose budget every policy keeps every page fresh). `--never` adds a
population of pages that never change (the / pages always are).

Importance: page /p/N weighs 1/(1+N) (a Zipf popularity), for the weighted figure; the
policy itself maximises plain freshness. The ideal is Cho & Garcia-Molina's optimum with the
true rates (core.refresh_schedule), the ceiling an estimator could reach.

    python bench/freshness.py [--hosts 20] [--pages 8] [--interval 8] [--median 10]
                              [--warmup 120] [--window 120]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from crawler_node.core.refresh_schedule import RateMix, freshness, interval_for
from crawler_node.testweb import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

RESULTS = Path(__file__).resolve().parent / "results" / "freshness.json"
SEED = 61


def _importance(url: str) -> float:
    match = re.search(r"/p/(\d+)$", url)
    return 1.0 / (1 + int(match.group(1))) if match else 1.0


def _ideal(rates: list[float], interval: float, low: float, high: float) -> float:
    mix = RateMix(half_life_s=1e12)
    for rate in rates:
        mix.add(rate, 0.0)
    mu = mix.price(interval, low, high)
    return statistics.mean(freshness(rate, 1 / interval_for(rate, mu, mean_interval_s=interval, min_s=low,
                                                               max_s=high)) for rate in rates)


def _figures(web: TestwebProcess, since: float) -> dict[str, Any]:
    report = web.freshness(since=since, pages=True)
    pages = report.pop("per_page")
    stats = web.stats()["totals"]
    weights = {url: _importance(url) for url in pages}
    tracked = {url: page["tracked_s"] for url, page in pages.items() if page["tracked_s"] > 0}
    weighted = (sum(weights[url] * pages[url]["fresh_s"] / tracked[url] for url in tracked)
                / sum(weights[url] for url in tracked))
    mean_fresh_pages = report["freshness"] * len(tracked)
    return {"freshness": report["freshness"], "weighted_freshness": weighted, "pages": len(tracked),
            "fetches": report["fetches"], "requests": stats["requests"], "not_modified": stats["not_modified"],
            "body_bytes": stats["body_bytes"],
            "body_bytes_per_fresh_page": stats["body_bytes"] / mean_fresh_pages if mean_fresh_pages else None,
            "rates": [page["rate"] for page in pages.values()]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rate = args.median / args.interval
    profile: dict[str, Any] = {"site-*.test": {"change_rate": rate, "change_spread": args.spread}}
    if args.never:
        profile[f"site-[0-{args.never - 1}].test"] = {"change_rate": 1e-12}
    low, high = args.interval / 8, args.interval * 8
    recrawl = ["--recrawl-after", f"{args.interval:g}s", "--recrawl-min", f"{low:g}s", "--recrawl-max", f"{high:g}s"]
    seeds = [f"http://site-{i}.test/" for i in range(args.hosts)]
    modes = ("adaptive", "fixed")
    with tempfile.TemporaryDirectory() as tmp:
        webs = {mode: TestwebProcess(hosts=args.hosts, pages=args.pages, seed=SEED, profile=profile, tmp_dir=tmp)
                for mode in modes}
        for web in webs.values():
            web.__enter__()
        nodes = {}
        try:
            for mode in modes:
                nodes[mode] = NodeProcess(node_id=mode, data_dir=Path(tmp) / mode, proxy=webs[mode].url, seeds=seeds,
                                          extra_args=["--allow-host", "*", "--recrawl", mode, *recrawl])
                nodes[mode].start(wait=True)
            time.sleep(args.warmup)
            since = {mode: web.freshness()["now_s"] for mode, web in webs.items()}
            for web in webs.values():
                web.reset()
            time.sleep(args.window)
            result = {mode: _figures(webs[mode], since[mode]) for mode in modes}
        finally:
            for node in nodes.values():
                node.stop(timeout_s=15)
            for web in webs.values():
                web.__exit__(None, None, None)
    rates = result["adaptive"].pop("rates")
    result["fixed"].pop("rates")
    adaptive, fixed = result["adaptive"], result["fixed"]
    uniform = statistics.mean(freshness(r, 1 / args.interval) for r in rates)
    ideal = _ideal(rates, args.interval, low, high)
    return {
        "config": vars(args), "adaptive": adaptive, "fixed": fixed,
        "ratio": adaptive["freshness"] / fixed["freshness"],
        "weighted_ratio": adaptive["weighted_freshness"] / fixed["weighted_freshness"],
        "fetch_ratio": adaptive["requests"] / fixed["requests"],  # in the window: the budget spent
        "model": {"fixed": uniform, "optimal": ideal, "optimal_ratio": ideal / uniform},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--interval", type=float, default=8.0, help="--recrawl-after of both, seconds")
    parser.add_argument("--median", type=float, default=10.0, help="median changes per interval")
    parser.add_argument("--spread", type=float, default=2.0, help="sigma of the log-normal rates")
    parser.add_argument("--never", type=int, default=0, help="hosts whose pages never change")
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--window", type=float, default=120.0)
    args = parser.parse_args()
    result = run(args)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    adaptive, fixed = result["adaptive"], result["fixed"]
    print(f"{'':10} {'freshness':>9} {'weighted':>9} {'requests':>8} {'304s':>6} {'bytes/fresh page':>17}")
    for mode, row in (("adaptive", adaptive), ("fixed", fixed)):
        print(f"{mode:10} {row['freshness']:9.3f} {row['weighted_freshness']:9.3f} {row['requests']:8d} "
              f"{row['not_modified']:6d} {row['body_bytes_per_fresh_page'] or 0:17.0f}")
    print(f"adaptive/fixed: freshness {result['ratio']:.2f}x, weighted {result['weighted_ratio']:.2f}x, "
          f"requests {result['fetch_ratio']:.2f}x; model with the true rates: fixed {result['model']['fixed']:.3f},"
          f" optimal {result['model']['optimal']:.3f} ({result['model']['optimal_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
