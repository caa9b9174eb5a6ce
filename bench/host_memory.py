"""What hosts with work cost a node in memory: the frontier's record and the host table's state
of each, with every host active (--active-hosts 0) and with the node's bound (10,000).

`bench/scale.py` measures the frontier alone. A node also keeps, in its host table
(node.hosts), a `HostState` with its AIMD limiter for each active host: it loads them at start
(`hosts_with_work`) and adds one per new host its pages link to. This measures both sides, each
size in a fresh process with the node's malloc settings: a frontier given one queued URL on
each of N hosts (node-sized batches of 500), then a host table loaded from it as a node does at
start. Bytes per host are RSS growth over N; the ratio column is RSS against the smallest N.

    python bench/host_memory.py [--hosts 10000 100000 1000000] [--active 0 10000] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from crawler_node.config import PolitenessConfig
from crawler_node.core.backoff import HostBackoffPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.frontier.frontier import Frontier, UrlEntry
from crawler_node.node.hosts import HostTable
from crawler_node.runtime.malloctune import keep_heap_for_reuse
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.settings import Settings

DEFAULT_HOSTS = (10_000, 100_000, 1_000_000)
DEFAULT_ACTIVE = (0, Settings().active_hosts)
ADD_BATCH = 500


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def run_child(hosts: int, active: int, directory: Path) -> dict[str, float]:
    keep_heap_for_reuse()
    frontier = Frontier(directory / "frontier.sqlite3", resident_hosts=active)
    before = rss()
    started = time.perf_counter()
    for first in range(0, hosts, ADD_BATCH):
        frontier.add([UrlEntry(url=f"http://www.site-{n}.example.com/", host=f"www.site-{n}.example.com")
                      for n in range(first, min(first + ADD_BATCH, hosts))])
    fill_s = time.perf_counter() - started
    after_frontier = rss()
    s = Settings()
    table = HostTable(config=PolitenessConfig(host_memory_target=s.host_memory_target, host_turn_s=0.0,
                                              min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=s.host_limit_start, floor=s.host_limit_floor,
                                                      ceiling=s.host_limit_ceiling),
                      backoff_policy=HostBackoffPolicy(), work=Wakeup(), started_at=time.time())
    records = frontier.hosts_with_work()
    table.load(records, time.time())
    del records
    after_table = rss()
    assert len(table) == (min(hosts, active) if active else hosts), (len(table), hosts, active)
    assert frontier.totals()["queued"] == hosts
    frontier.close()
    return {"hosts": hosts, "active": active, "in_memory": len(table), "fill_s": fill_s,
            "frontier_bytes_per_host": (after_frontier - before) / hosts,
            "host_table_bytes_per_host": (after_table - after_frontier) / hosts,
            "rss_mb": after_table / 1e6}


def measure(hosts: int, active: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="host-memory-"))
    try:
        output = subprocess.run([sys.executable, __file__, "--child", str(hosts), str(active), str(directory)],
                                check=True, capture_output=True, text=True).stdout
        return json.loads(output)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=list(DEFAULT_HOSTS))
    parser.add_argument("--active", type=int, nargs="+", default=list(DEFAULT_ACTIVE),
                        help="--active-hosts values to compare (0: every host with work in memory)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", nargs=3, metavar=("HOSTS", "ACTIVE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(int(args.child[0]), int(args.child[1]), Path(args.child[2]))))
        return
    rows = [measure(hosts, active) for active in args.active for hosts in args.hosts]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'active':>8} {'hosts with work':>16} {'in memory':>10} {'frontier B/host':>16}"
          f" {'host table B/host':>18} {'RSS MB':>8} {'RSS ratio':>9} {'fill s':>7}")
    smallest: dict[int, float] = {}
    for row in rows:
        base = smallest.setdefault(row["active"], row["rss_mb"])
        print(f"{row['active'] or 'all':>8} {row['hosts']:>16,} {row['in_memory']:>10,}"
              f" {row['frontier_bytes_per_host']:>16.0f} {row['host_table_bytes_per_host']:>18.0f}"
              f" {row['rss_mb']:>8.1f} {row['rss_mb'] / base:>9.2f} {row['fill_s']:>7.1f}")


if __name__ == "__main__":
    main()
