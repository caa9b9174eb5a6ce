"""`crawler-node demo`: testweb plus crawler nodes on loopback, live progress, a summary."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from crawler_node.node_process import NodeProcess
from crawler_node.report import progress_line
from crawler_node.testweb.process import TestwebProcess

# A little of everything the crawler must handle politely, so the demo shows it working.
DEMO_PROFILE = {
    "site-1.test": {"robots": "User-agent: *\nDisallow: /p/3\nCrawl-delay: 0.05\n"},
    "site-2.test": {"max_concurrency": 2, "latency_ms": 30},
    "site-3.test": {"error_rate": 0.2},
    "site-4.test": {"redirects": 0.2},
}


def run_demo(*, hosts: int = 20, pages: int = 50, seed: int = 1, data_dir: Path | None = None,
             timeout_s: float = 300.0, nodes: int = 1) -> int:
    if nodes != 1:
        print("crawler-node demo: error: only --nodes 1 is available in this version", file=sys.stderr)
        return 2
    workdir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="crawler-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    keep = data_dir is not None
    print(f"demo: synthetic web of {hosts} hosts x {pages} pages (seed {seed}); data in {workdir}")
    started = time.monotonic()
    try:
        with TestwebProcess(hosts=hosts, pages=pages, seed=seed, profile=DEMO_PROFILE, tmp_dir=workdir) as web:
            expected = web.expected()
            roots = [f"http://site-{i}.test/" for i in range(hosts)]
            node = NodeProcess(node_id="node-1", data_dir=workdir / "node-1", proxy=web.url, seeds=roots,
                               extra_args=["--retry-base-s", "0.2"])
            with node:
                print(f"demo: node-1 at {node.url} (dashboard: {node.url}/), testweb at {web.url}")
                final = _watch([node], len(expected), started, timeout_s)
                stats = web.stats()
            code = node.proc.returncode
        _summary(final, expected, stats, time.monotonic() - started, workdir, code)
        return 0 if final is not None else 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _watch(nodes: list[NodeProcess], expected: int, started: float, timeout_s: float) -> list[dict] | None:
    interactive = sys.stdout.isatty()
    last_print = 0.0
    idle_streak = 0
    while time.monotonic() - started < timeout_s:
        statuses = [node.status() for node in nodes]
        now = time.monotonic()
        line = progress_line(statuses, expected, now - started)
        if interactive:
            print("\r" + line, end="", flush=True)
        elif now - last_print >= 2.0:
            print(line, flush=True)
            last_print = now
        idle_streak = idle_streak + 1 if all(s["idle"] for s in statuses) else 0
        if idle_streak >= 2:
            if interactive:
                print()
            return statuses
        time.sleep(0.5)
    print(f"\ndemo: gave up after {timeout_s:.0f}s", file=sys.stderr)
    return None


def _summary(statuses: list[dict] | None, expected: list[str], stats: dict, elapsed: float,
             workdir: Path, exit_code: int | None) -> None:
    counts = stats.get("urls", {})
    fetched_once = sum(1 for url in expected if counts.get(url, 0) >= 1)
    duplicates = sum(1 for url in expected if counts.get(url, 0) > 1)
    print("\n=== summary ===")
    print(f"coverage: {fetched_once}/{len(expected)} expected URLs fetched "
          f"({fetched_once / len(expected):.1%}); fetched more than once: {duplicates}")
    for status in statuses or []:
        c = status["counters"]
        print(f"{status['node_id']}: {c['fetched']} fetch attempts, {c['pages_done']} done, {c['failed']} failed, "
              f"{c['retries']} retries, {c['robots_disallowed']} disallowed by robots.txt; outcomes {c['outcomes']}")
    peak = max((h["peak_concurrency"] for h in stats.get("hosts", {}).values()), default=0)
    throttled = sum(h["throttled"] for h in stats.get("hosts", {}).values())
    print(f"politeness: peak concurrency on any host {peak}; 429s answered by sites {throttled}")
    print(f"time: {elapsed:.1f}s; node exit code {exit_code}")
