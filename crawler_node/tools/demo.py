"""`crawler-node demo`: testweb plus crawler nodes on loopback, live progress, a summary."""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess, free_port
from crawler_node.tools.report import progress_line

# A little of everything the crawler must handle politely, so the demo shows it working.
DEMO_PROFILE = {
    "site-1.test": {"robots": "User-agent: *\nDisallow: /p/3\nCrawl-delay: 0.05\n"},
    "site-2.test": {"max_concurrency": 2, "latency_ms": 30},
    "site-3.test": {"error_rate": 0.2},
    "site-4.test": {"redirects": 0.2},
}


def run_demo(*, hosts: int = 20, pages: int = 50, seed: int = 1, data_dir: Path | None = None,
             timeout_s: float = 300.0, nodes: int = 3) -> int:
    if not 1 <= nodes <= 8:
        print("crawler-node demo: error: --nodes must be between 1 and 8", file=sys.stderr)
        return 2
    workdir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="crawler-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    keep = data_dir is not None
    print(f"demo: synthetic web of {hosts} hosts x {pages} pages (seed {seed}), {nodes} node(s); data in {workdir}")
    started = time.monotonic()
    try:
        with TestwebProcess(hosts=hosts, pages=pages, seed=seed, profile=DEMO_PROFILE, tmp_dir=workdir) as web:
            expected = web.expected()
            cluster = _start_cluster(nodes, web.url, [f"http://site-{i}.test/" for i in range(hosts)], workdir)
            try:
                for node in cluster:
                    print(f"demo: {node.node_id} at {node.url} (dashboard: {node.url}/)")
                print(f"demo: testweb at {web.url}")
                final = _watch(cluster, len(expected), started, timeout_s)
                stats = web.stats()
            finally:
                codes = [node.stop() for node in cluster]
        _summary(final, expected, stats, time.monotonic() - started, codes)
        return 0 if final is not None else 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _start_cluster(count: int, proxy: str, seeds: list[str], workdir: Path) -> list[NodeProcess]:
    """Nodes on 127.0.0.2, .3, ...: distinct loopback addresses, as on distinct machines."""
    addresses = {}
    for index in range(count):
        host = f"127.0.0.{index + 2}" if count > 1 else "127.0.0.1"
        addresses[f"node-{index + 1}"] = (host, free_port(host))
    peers = {node_id: f"http://{host}:{port}" for node_id, (host, port) in addresses.items()} if count > 1 else {}
    secret = secrets.token_hex(16)
    cluster = []
    for index, (node_id, (host, port)) in enumerate(addresses.items()):
        cluster.append(NodeProcess(
            node_id=node_id, data_dir=workdir / node_id, host=host, port=port, proxy=proxy, peers=peers,
            seeds=seeds if index == 0 else (),  # one node takes the seeds; the ring spreads them
            extra_args=["--retry-base-s", "0.2", "--secret", secret, "--allow-host", "*.test"],
        ).start(wait=False))
    for node in cluster:
        node.wait_healthy(30)
    return cluster


def _watch(nodes: list[NodeProcess], expected: int, started: float, timeout_s: float) -> list[dict[str, Any]] | None:
    interactive = sys.stdout.isatty()
    last_print = 0.0
    idle_streak = 0
    while time.monotonic() - started < timeout_s:
        statuses = [node.status() for node in nodes]
        cluster_idle = statuses[0]["idle"]
        now = time.monotonic()
        line = progress_line(statuses, expected, now - started)
        if interactive:
            print("\r" + line, end="", flush=True)
        elif now - last_print >= 2.0:
            print(line, flush=True)
            last_print = now
        idle_streak = idle_streak + 1 if cluster_idle and all(s.get("node_idle", s["idle"]) for s in statuses) else 0
        if idle_streak >= 2:
            if interactive:
                print()
            return statuses
        time.sleep(0.5)
    print(f"\ndemo: gave up after {timeout_s:.0f}s", file=sys.stderr)
    return None


def _summary(statuses: list[dict[str, Any]] | None, expected: list[str], stats: dict[str, Any], elapsed: float,
             exit_codes: list[int | None]) -> None:
    counts = stats.get("urls", {})
    fetched_once = sum(1 for url in expected if counts.get(url, 0) >= 1)
    duplicates = sum(1 for url in expected if counts.get(url, 0) > 1)
    print("\n=== summary ===")
    print(f"coverage: {fetched_once}/{len(expected)} expected URLs fetched "
          f"({fetched_once / len(expected):.1%}); requested more than once "
          f"(retries of 429/5xx answers included): {duplicates}")
    for status in statuses or []:
        c = status["counters"]
        forwarded = status.get("cluster", {}).get("counters", {}).get("forwarded", 0)
        share = next((m["arc_share"] for m in status.get("members", []) if m.get("self")), 1.0)
        print(f"{status['node_id']}: arc {share:.0%}, {c['fetched']} fetch attempts, {c['pages_done']} done, "
              f"{c['failed']} failed, {c['retries']} retries, {c['robots_disallowed']} disallowed by robots.txt, "
              f"{forwarded} URLs forwarded to peers; outcomes {c['outcomes']}")
    peak = max((h["peak_concurrency"] for h in stats.get("hosts", {}).values()), default=0)
    throttled = sum(h["throttled"] for h in stats.get("hosts", {}).values())
    print(f"politeness: peak concurrency on any host {peak}; 429s answered by sites {throttled}")
    print(f"time: {elapsed:.1f}s; node exit codes {exit_codes}")
