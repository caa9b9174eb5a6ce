"""Throughput of one node against the ceiling of Python on this machine.

Runs, side by side in one invocation and against the same testweb process:
  1. a bare aiohttp loop that GETs the full URL list through testweb with the same concurrency
     as the node's global in-flight limit (no frontier, no parsing, no storage): the baseline;
  2. one `crawler-node run` crawling the same web from its roots.
Reports pages/s and CPU-seconds per 1,000 pages for both and the ratio node/bare (target >= 0.6),
and testweb's own CPU per 1,000 pages in each run: it shares the machine's cores with both.
The pair runs --rounds times, in alternating order, after an untimed pass that fills testweb's page
cache, and the median ratio is the result: one machine shared with other work moves both
numbers by ~10% from run to run.

    python bench/throughput.py [--hosts 50 --pages 400 --concurrency 64 --rounds 3]
    python bench/throughput.py --other-tree /tmp/old   # also another checkout's node, same rounds
    python bench/throughput.py --gzip                  # testweb's HTML gzip-encoded

--other-tree runs a second checkout's node (e.g. `git worktree add /tmp/old <rev>`) in every
round, in alternating order, against the same testweb: a change measured this way is compared
with its own baseline at the same moment, not with a figure from another day (this shared
machine's speed drifts by 10% or more between hours), and the round-by-round ratio of the two
nodes is reported too: on this machine one round's pages/s scatter by about +-4%, so a change
of 1-2% needs 16 or more rounds to show. Nodes are started with the checkout's
root on PYTHONPATH from a neutral working directory: `python -m` puts the working directory
first on sys.path, so starting them from inside a checkout would run that checkout's code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools import client
from crawler_node.tools.node_process import NodeProcess

RESULTS = Path(__file__).resolve().parent / "results"
TREE = Path(__file__).resolve().parents[1]  # this checkout


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
    return sum(process_cpu_by_role(pid).values())


def process_cpu_by_role(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of a node's processes: its own as "loop thread" (the event
    loop's) and "other threads" (the frontier's, mostly; with ended threads' time), which the
    README's older figures give together as "event loop", and each worker by its role
    ("parse", "store")."""
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    loop = next((thread.user_time + thread.system_time for thread in proc.threads() if thread.id == pid), total)
    seconds = {"loop thread": loop, "other threads": total - loop}
    for child in proc.children(recursive=True):
        try:
            command = child.cmdline()
            role = command[-2] if len(command) >= 2 else str(child.pid)  # worker_main's NAME NICE
            seconds[role] = seconds.get(role, 0.0) + sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return seconds


def node_run(web: TestwebProcess, hosts: int, concurrency: int, data_dir: Path, extra: list[str],
             tree: Path = TREE) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # whose crawler_node runs (see --other-tree)
    # A checkout from before --pace (0a7337c) went at the adaptive pace by default, and refuses the option.
    has_pace = "pace:" in (tree / "crawler_node" / "settings.py").read_text()
    node = NodeProcess(node_id="bench", data_dir=data_dir, proxy=web.url, env=env,
                       pace="adaptive" if has_pace else None,
                       extra_args=["--global-inflight", str(concurrency), "--log-level", "WARNING", *extra])
    with node:
        cpu0, t0 = process_tree_cpu(node.pid), time.time()
        client.submit(node.url, [f"http://site-{i}.test/" for i in range(hosts)])
        # The crawl ends at the node's last commit (`last_stored_at`), as the bare loop's ends
        # at its last response: timed by the poll that sees it idle, it would also count half a
        # poll interval. Polls are few, so they cost the node little (~0.4 ms each).
        status = node.wait_idle(timeout_s=1800, settle_polls=1, interval_s=0.2)
        # (A checkout from before `last_stored_at` is timed to the poll, up to 0.2 s late.)
        wall = (status.get("last_stored_at") or time.time()) - t0
        cpu = process_tree_cpu(node.pid) - cpu0  # to the poll: a few idle milliseconds more
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
    parser.add_argument("--gzip", action="store_true",
                        help="testweb sends its HTML gzip-encoded (what a real server does): the cost of storing "
                             "bodies as received and inflating them in the parser shows")
    parser.add_argument("--other-tree", type=Path,
                        help="another checkout whose node also runs in every round (a side-by-side baseline)")
    args = parser.parse_args()
    trees = {"crawler-node": TREE}
    if args.other_tree is not None:
        trees[f"other ({args.other_tree})"] = args.other_tree.resolve()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp, \
            TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1, tmp_dir=Path(tmp),
                           profile={"*": {"gzip": True}} if args.gzip else None) as web:
        os.chdir(tmp)  # a neutral working directory for the nodes (see --other-tree)
        urls = web.expected()
        print(f"{len(urls)} URLs over {args.hosts} hosts; concurrency {args.concurrency}", flush=True)
        # testweb renders a page on first request and serves it from its cache after: a cold
        # first pass would handicap whichever side ran first (it once flattered the node by a
        # third). Warm it, untimed, so both sides meet the same server.
        asyncio.run(bare_loop(urls, web.url, args.concurrency))
        for index in range(args.rounds):
            # Who goes first alternates too: a run leaves work behind it (testweb's closed
            # connections, the node's dirty pages being written back) that the next one meets.
            result: dict = {}
            sides = [("bare", None), *trees.items()]
            if index % 2:
                sides.reverse()
            for name, tree in sides:
                web.reset()
                web_cpu = process_tree_cpu(web.pid)
                if tree is None:
                    run = asyncio.run(bare_loop(urls, web.url, args.concurrency))
                else:
                    run = node_run(web, args.hosts, args.concurrency, Path(tmp) / f"node-{index}-{len(result)}",
                                   args.node_arg, tree)
                # testweb runs on the same cores: what it takes per page is CPU the node and the
                # bare loop compete for, and the node, which needs more CPU, feels it more.
                run["testweb_cpu_s_per_1000"] = 1000 * (process_tree_cpu(web.pid) - web_cpu) / run["pages"]
                result[name] = run
            bare = result["bare"]
            line = (f"round {index + 1} (bare {'last' if index % 2 else 'first'}): "
                    f"bare aiohttp loop {bare['pages_per_s']:6.0f} pages/s "
                    f"({bare['cpu_s_per_1000']:.2f} CPU-s/1000, testweb {bare['testweb_cpu_s_per_1000']:.2f})")
            for name in trees:
                node = result[name]
                node["ratio"] = node["pages_per_s"] / bare["pages_per_s"]
                line += (f"  {name} {node['pages_per_s']:6.0f} pages/s ({node['cpu_s_per_1000']:.2f} CPU-s/1000, "
                         f"testweb {node['testweb_cpu_s_per_1000']:.2f}) ratio {node['ratio']:.2f}")
            rounds.append(result)
            print(line, flush=True)
    for name in trees:
        ratios = sorted(r[name]["ratio"] for r in rounds)
        print(f"{name}: median ratio node/bare {ratios[len(ratios) // 2]:.2f} (target >= 0.6); "
              f"range {ratios[0]:.2f}-{ratios[-1]:.2f}")
    for name in list(trees)[1:]:
        # Each round's two nodes met the same machine moments apart: their ratio cancels the
        # drift that moves both, which is what decides a small difference.
        paired = sorted(r["crawler-node"]["pages_per_s"] / r[name]["pages_per_s"] for r in rounds)
        quarter = len(paired) // 4
        print(f"crawler-node vs {name}, round by round: pages/s x{paired[len(paired) // 2]:.3f} "
              f"(middle half {paired[quarter]:.3f}-{paired[-quarter - 1]:.3f}), "
              f"ahead in {sum(ratio > 1 for ratio in paired)} of {len(paired)} rounds")
    median = sorted(rounds, key=lambda r: r["crawler-node"]["ratio"])[len(rounds) // 2]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "throughput.json").write_text(json.dumps(
        {"hosts": args.hosts, "pages": args.pages, "concurrency": args.concurrency,
         "bare": median["bare"], "node": median["crawler-node"], "ratio": median["crawler-node"]["ratio"],
         "rounds": rounds}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
