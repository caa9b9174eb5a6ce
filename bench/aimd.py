"""AIMD convergence of one real node against one host that tolerates 4 concurrent requests.

testweb serves one host with ``max_concurrency`` 4 (a 5th concurrent request gets a 429 with
``Retry-After: 1``) and a fixed 50 ms latency; one `crawler-node run` crawls it from the root
with the default limiter settings (start 2, ceiling 8), so it has to find the 4 by itself.
/v1/status is sampled at ~10 Hz for the host's limit and in-flight count.

Reported, over the steady state (after the warm-up, until the host's queue runs dry):
  - throughput as a fraction of the ideal 4 / latency (target >= 0.8);
  - the share of requests answered 429 (target < 5%).
Writes bench/results/aimd.json and bench/results/aimd.png (matplotlib: a bench-only dependency).

    /work/venv/bin/python bench/aimd.py [--pages 3000 --tolerance 4 --latency-ms 50 --warmup-s 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools import client
from crawler_node.tools.node_process import NodeProcess

RESULTS = Path(__file__).parent / "results"
HOST = "site-0.test"


def sample_status(node: NodeProcess, stop: threading.Event, samples: list[dict], period_s: float) -> None:
    while not stop.is_set():
        started = time.time()
        try:
            status = node.status(timeout=2.0)
        except client.NodeError:
            status = None
        if status is not None:
            host = next((h for h in status["hosts"] if h["host"] == HOST), None)
            if host is not None:
                samples.append({"t": started, "limit": host["limit"], "in_flight": host["in_flight"],
                                "queued": host["queued"], "fetched": status["counters"]["fetched"]})
        stop.wait(max(0.0, period_s - (time.time() - started)))


def read_log(path: Path) -> list[dict]:
    """crawl.log lines, with fetched_at (ISO 8601) turned into epoch seconds."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [line for line in lines if line.get("kind", "page") == "page"]  # not the robots.txt exchanges
    for line in lines:
        line["fetched_at"] = datetime.fromisoformat(line["fetched_at"].replace("Z", "+00:00")).timestamp()
    return lines


def analyse(lines: list[dict], samples: list[dict], *, tolerance: int, latency_s: float, warmup_s: float) -> dict:
    start = min(line["fetched_at"] for line in lines)
    # Steady state ends when the host's queue runs low: from then on there is not enough work
    # to fill the window, which says nothing about the limiter.
    busy = [s["t"] for s in samples if s["queued"] >= 2 * tolerance]
    end = max(busy) if busy else max(line["fetched_at"] for line in lines)
    window = [line for line in lines if start + warmup_s <= line["fetched_at"] < end]
    seconds = end - (start + warmup_s)
    ok = sum(1 for line in window if line["status"] == 200)
    throttled = sum(1 for line in window if line["status"] == 429)
    ideal = tolerance / latency_s
    steady = [s for s in samples if start + warmup_s <= s["t"] < end]
    return {
        "run_s": round(max(line["fetched_at"] for line in lines) - start, 2),
        "warmup_s": warmup_s,
        "steady_state_s": round(seconds, 2),
        "requests": len(lines),
        "requests_429": sum(1 for line in lines if line["status"] == 429),
        "steady_requests": len(window),
        "steady_ok": ok,
        "steady_429": throttled,
        "pages_per_s": round(ok / seconds, 2) if seconds > 0 else 0.0,
        "ideal_pages_per_s": ideal,
        "throughput_fraction_of_ideal": round(ok / seconds / ideal, 3) if seconds > 0 else 0.0,
        "ratio_429_after_convergence": round(throttled / len(window), 4) if window else 0.0,
        "mean_limit": round(sum(s["limit"] for s in steady) / len(steady), 3) if steady else None,
        "mean_in_flight": round(sum(s["in_flight"] for s in steady) / len(steady), 3) if steady else None,
        "max_limit": max((s["limit"] for s in steady), default=None),
        "start": start,
        "end": end,
    }


def plot(samples: list[dict], lines: list[dict], result: dict, path: Path, tolerance: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = result["start"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, height_ratios=[3, 2])
    t = [s["t"] - start for s in samples]
    top.step(t, [s["limit"] for s in samples], where="post", label="limit (AIMD)", linewidth=1.6)
    top.plot(t, [s["in_flight"] for s in samples], ".", markersize=3, alpha=0.6, label="in flight (sampled)")
    top.axhline(tolerance, color="grey", linestyle="--", linewidth=1, label=f"host tolerates {tolerance}")
    throttles = [line["fetched_at"] - start for line in lines if line["status"] == 429]
    top.plot(throttles, [tolerance + 1.5] * len(throttles), "rv", markersize=6, label="429")
    top.axvspan(0, result["warmup_s"], color="orange", alpha=0.08, label="warm-up")
    top.axvline(result["end"] - start, color="grey", linewidth=0.8)
    top.set_ylabel("concurrent requests")
    top.set_ylim(0, max(s["limit"] for s in samples) + 2.5)
    top.legend(loc="upper right", fontsize=8, ncols=3)
    top.set_title(f"AIMD against a host tolerating {tolerance}: "
                  f"{result['throughput_fraction_of_ideal']:.0%} of ideal, "
                  f"{result['ratio_429_after_convergence']:.2%} 429s after warm-up")
    per_second: dict[int, int] = {}
    for line in lines:
        if line["status"] == 200:
            second = int(line["fetched_at"] - start)
            per_second[second] = per_second.get(second, 0) + 1
    seconds = sorted(per_second)
    bottom.bar(seconds, [per_second[s] for s in seconds], width=0.9, align="edge", label="pages/s")
    bottom.axhline(result["ideal_pages_per_s"], color="grey", linestyle="--", linewidth=1, label="ideal")
    bottom.set_ylabel("pages / s")
    bottom.set_xlabel("seconds since the first request")
    bottom.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--tolerance", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--retry-after-s", type=float, default=1.0, help="Retry-After of the host's 429s")
    parser.add_argument("--node-arg", action="append", default=[], help="extra option for crawler-node run")
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000
    profile = {HOST: {"max_concurrency": args.tolerance, "latency_ms": args.latency_ms, "jitter_ms": 0,
                      "retry_after_s": args.retry_after_s}}
    samples: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-aimd-") as tmp, \
            TestwebProcess(hosts=1, pages=args.pages, seed=1, profile=profile, tmp_dir=Path(tmp)) as web:
        node = NodeProcess(node_id="aimd", data_dir=Path(tmp) / "aimd", proxy=web.url,
                           extra_args=["--log-level", "WARNING", *args.node_arg])
        with node:
            stop = threading.Event()
            sampler = threading.Thread(target=sample_status, args=(node, stop, samples, 0.1), daemon=True)
            sampler.start()
            client.submit(node.url, [f"http://{HOST}/"])
            node.wait_idle(timeout_s=600, settle_polls=2)
            stop.set()
            sampler.join(timeout=5)
            lines = read_log(node.data_dir / "crawl.log")
        stats = web.stats()["hosts"][HOST]
    result = analyse(lines, samples, tolerance=args.tolerance, latency_s=latency_s, warmup_s=args.warmup_s)
    result.update({"pages": args.pages, "tolerance": args.tolerance, "latency_ms": args.latency_ms,
                   "retry_after_s": args.retry_after_s, "testweb_peak_concurrency": stats["peak_concurrency"],
                   "testweb_throttled": stats["throttled"], "samples": len(samples)})
    print(f"{result['requests']} requests in {result['run_s']} s; steady state {result['steady_state_s']} s "
          f"after a {args.warmup_s:g} s warm-up")
    print(f"throughput   : {result['pages_per_s']:.1f} pages/s = {result['throughput_fraction_of_ideal']:.1%} "
          f"of ideal {result['ideal_pages_per_s']:.0f}/s (target >= 80%)")
    print(f"429 ratio    : {result['ratio_429_after_convergence']:.2%} after convergence (target < 5%); "
          f"{result['requests_429']} 429s in the whole run")
    print(f"mean limit   : {result['mean_limit']}, mean in flight {result['mean_in_flight']}, "
          f"testweb peak concurrency {stats['peak_concurrency']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "aimd.json").write_text(json.dumps(
        {**result, "series": [{k: s[k] for k in ("t", "limit", "in_flight", "queued")} for s in samples]},
        indent=1))
    plot(samples, lines, result, RESULTS / "aimd.png", args.tolerance)
    print(f"wrote {RESULTS / 'aimd.json'} and {RESULTS / 'aimd.png'}")
    ok = result["throughput_fraction_of_ideal"] >= 0.8 and result["ratio_429_after_convergence"] < 0.05
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
