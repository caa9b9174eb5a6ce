"""Throughput of one node against the ceiling of Python on this machine.

Runs, side by side in one invocation and against the same testweb process:
  1. a bare aiohttp loop that GETs the full URL list through testweb with the same concurrency
     as the node's global in-flight limit (no frontier, no parsing, no storage): the baseline;
  2. one `crawler-node run` crawling the same web from its roots.
Reports pages/s and CPU-seconds per 1,000 pages for both and the ratio node/bare (target >= 0.6).
The pair runs --rounds times, alternately, after an untimed pass that fills testweb's page
cache, and the median ratio is the result: one machine shared with other work moves both
numbers by ~10% from run to run.

    python bench/throughput.py [--hosts 50 --pages 400 --concurrency 64 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from crawler_node import client
from crawler_node.node_process import NodeProcess
from crawler_node.testweb.process import TestwebProcess

RESULTS = Path(__file__).parent / "results"


async def bare_loop(urls: list[str], proxy: str, concurrency: int) -> dict:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    fetched = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal fetched
        while True:
            try:
                url = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            async with session.get(url, proxy=proxy, allow_redirects=False) as response:
                await response.read()
            fetched += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"pages": fetched, "wall_s": wall, "pages_per_s": fetched / wall, "cpu_s_per_1000": 1000 * cpu / fetched}


def process_tree_cpu(pid: int) -> float:
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def node_run(web: TestwebProcess, hosts: int, concurrency: int, data_dir: Path, extra: list[str]) -> dict:
    node = NodeProcess(node_id="bench", data_dir=data_dir, proxy=web.url,
                       extra_args=["--global-inflight", str(concurrency), "--log-level", "WARNING", *extra])
    with node:
        cpu0, t0 = process_tree_cpu(node.pid), time.perf_counter()
        client.submit(node.url, [f"http://site-{i}.test/" for i in range(hosts)])
        # Polled often (the crawl takes seconds), not too often (a status costs the node ~0.5 ms).
        status = node.wait_idle(timeout_s=1800, settle_polls=1, interval_s=0.05)
        wall = time.perf_counter() - t0
        cpu = process_tree_cpu(node.pid) - cpu0
    pages = status["counters"]["fetched"]
    return {"pages": pages, "wall_s": wall, "pages_per_s": pages / wall, "cpu_s_per_1000": 1000 * cpu / pages}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--node-arg", action="append", default=[], help="extra option for crawler-node run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="bare/node pairs, run alternately; the median pair's ratio is reported")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp, \
            TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1, tmp_dir=Path(tmp)) as web:
        urls = web.expected()
        print(f"{len(urls)} URLs over {args.hosts} hosts; concurrency {args.concurrency}", flush=True)
        # testweb renders a page on first request and serves it from its cache after: a cold
        # first pass would handicap whichever side ran first (it once flattered the node by a
        # third). Warm it, untimed, so both sides meet the same server.
        asyncio.run(bare_loop(urls, web.url, args.concurrency))
        for index in range(args.rounds):
            web.reset()
            bare = asyncio.run(bare_loop(urls, web.url, args.concurrency))
            web.reset()
            node = node_run(web, args.hosts, args.concurrency, Path(tmp) / f"node-{index}", args.node_arg)
            ratio = node["pages_per_s"] / bare["pages_per_s"]
            rounds.append({"bare": bare, "node": node, "ratio": ratio})
            print(f"round {index + 1}: bare aiohttp loop {bare['pages_per_s']:6.0f} pages/s "
                  f"({bare['cpu_s_per_1000']:.2f} CPU-s/1000)  crawler-node {node['pages_per_s']:6.0f} pages/s "
                  f"({node['cpu_s_per_1000']:.2f} CPU-s/1000)  ratio {ratio:.2f}", flush=True)
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]
    print(f"median ratio node/bare: {median['ratio']:.2f} (target >= 0.6); "
          f"range {min(r['ratio'] for r in rounds):.2f}-{max(r['ratio'] for r in rounds):.2f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "throughput.json").write_text(json.dumps(
        {"hosts": args.hosts, "pages": args.pages, "concurrency": args.concurrency,
         "bare": median["bare"], "node": median["node"], "ratio": median["ratio"], "rounds": rounds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
