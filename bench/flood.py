"""Push-back under a flood: intake and `/v1/status` while 32 clients flood `POST /v1/urls`.

One node crawls testweb from its roots while 32 clients POST batches of new URLs (unique, on
testweb's hosts, JSON) as fast as the node answers, and a 33rd client times `GET /v1/status`
every --status-interval-s. Reported per run: intake (URLs accepted per second), the share of
POSTs answered 429 (all with Retry-After, or it is counted), any other answer, and the status
latency p50 / p99 / max, first with the node quiet (before the flood) and then under it.

    python bench/flood.py [--clients 32 --batch 1000 --seconds 20 --rounds 2]
    python bench/flood.py --other-tree /tmp/flood-base   # paired with another checkout, same rounds

The flooders run in a child process of their own and the status client alone in this one: on
one event loop with 32 busy clients, the status client would time its own loop's lag as well as
the node's. The flooders do not wait out Retry-After (a hostile or broken client does not):
what a 429 costs the node is what is measured. --other-tree runs a second checkout's node in
every round, in alternating order, against the same testweb (see bench/throughput.py: this
machine's speed drifts between hours, so a change is compared with its baseline at the same
moment); nodes start from a neutral working directory with the checkout on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

RESULTS = Path(__file__).resolve().parent / "results"
TREE = Path(__file__).resolve().parents[1]  # this checkout
STATUS_TIMEOUT_S = 30.0  # a status answer slower than this is counted as a timeout


def batch_body(client: int, sequence: int, size: int, hosts: int) -> bytes:
    urls = [f"http://site-{(sequence * size + i) % hosts}.test/flood/{client}/{sequence}/{i}" for i in range(size)]
    return json.dumps({"urls": urls}).encode()


async def flood(url: str, clients: int, batch: int, hosts: int, seconds: float) -> dict:
    """`clients` loops POSTing batches until the time is up; what the node answered, counted."""
    answers: dict[str, int] = {}
    accepted = 0
    no_retry_after = 0
    deadline = time.monotonic() + seconds

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal accepted, no_retry_after
        sequence = 0
        body = batch_body(index, sequence, batch, hosts)
        while time.monotonic() < deadline:
            try:
                async with session.post(f"{url}/v1/urls", data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    answer = await response.read()
                    key = str(response.status)
                    if response.status == 202:
                        accepted += json.loads(answer)["accepted"]
                    elif response.status == 429 and "Retry-After" not in response.headers:
                        no_retry_after += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                key = type(exc).__name__
            answers[key] = answers.get(key, 0) + 1
            if key == "202":  # a refused batch is sent again, as a client that retries would
                sequence += 1
                body = batch_body(index, sequence, batch, hosts)

    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients), timeout=timeout,
                                     trust_env=False) as session:
        await asyncio.gather(*(client(index, session) for index in range(clients)))
    wall = time.monotonic() - started
    posts = sum(answers.values())
    return {"wall_s": wall, "posts": posts, "answers": answers, "accepted_urls": accepted,
            "urls_per_s": accepted / wall, "share_429": answers.get("429", 0) / posts if posts else 0.0,
            "429_without_retry_after": no_retry_after}


def flood_process(url: str, clients: int, batch: int, hosts: int, seconds: float, out: multiprocessing.Queue) -> None:
    out.put(asyncio.run(flood(url, clients, batch, hosts, seconds)))


async def time_status(url: str, seconds: float, interval_s: float) -> dict:
    """GET /v1/status every ``interval_s`` for ``seconds``: latencies, non-200s, snapshot ages."""
    latencies: list[float] = []
    failures: dict[str, int] = {}
    ages: list[float] = []
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                async with session.get(f"{url}/v1/status") as response:
                    body = await response.read()
                    latencies.append(time.perf_counter() - started)
                    if response.status != 200:
                        failures[str(response.status)] = failures.get(str(response.status), 0) + 1
                    elif (age := json.loads(body).get("snapshot_age_s")) is not None:
                        ages.append(age)
            except (aiohttp.ClientError, TimeoutError) as exc:
                latencies.append(time.perf_counter() - started)
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - started)))
    ordered = sorted(latencies)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")

    return {"requests": len(ordered), "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
            "max_ms": ordered[-1] * 1000 if ordered else float("nan"), "failures": failures,
            "max_snapshot_age_s": max(ages) if ages else None}


@functools.cache
def run_options(tree: Path) -> frozenset[str]:
    """The options `crawler-node run` of that checkout knows."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    shown = subprocess.run([sys.executable, "-m", "crawler_node", "run", "--help"], env=env, capture_output=True,
                           text=True, check=True).stdout
    return frozenset(word.rstrip(",") for word in shown.split() if word.startswith("--"))


def run_once(web: TestwebProcess, tree: Path, data_dir: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # whose crawler_node runs (see --other-tree)
    node = NodeProcess(node_id="flood", data_dir=data_dir, proxy=web.url, env=env,
                       seeds=[f"http://site-{i}.test/" for i in range(args.hosts)],
                       extra_args=["--log-level", "WARNING", *args.node_arg])
    if "--pace" not in run_options(tree):  # a checkout from before --pace crawls at the adaptive pace
        node.pace = None  # type: ignore[attr-defined]  # (and NodeProcess would pass it one)
    with node:
        quiet = asyncio.run(time_status(node.url, args.quiet_seconds, args.status_interval_s))
        out: multiprocessing.Queue = multiprocessing.Queue()
        flooders = multiprocessing.Process(target=flood_process, name="flooders", args=(
            node.url, args.clients, args.batch, args.hosts, args.seconds, out))
        flooders.start()
        try:
            loaded = asyncio.run(time_status(node.url, args.seconds, args.status_interval_s))
            flooded = out.get(timeout=args.seconds + 120)
        finally:
            flooders.join(timeout=10)
            if flooders.is_alive():
                flooders.kill()
        fetched = node.status(timeout=STATUS_TIMEOUT_S)["counters"]["fetched"]
    return {"quiet_status": quiet, "status": loaded, "flood": flooded, "fetched": fetched}


def line(name: str, run: dict) -> str:
    flood_, status, quiet = run["flood"], run["status"], run["quiet_status"]
    others = {k: v for k, v in flood_["answers"].items() if k not in ("202", "429")}
    text = (f"  {name}: intake {flood_['urls_per_s']:7.0f} URLs/s, {flood_['posts']} POSTs, "
            f"429 {flood_['share_429']:.0%}")
    if others:
        text += f", other answers {others}"
    if flood_["429_without_retry_after"]:
        text += f", {flood_['429_without_retry_after']} 429s without Retry-After"
    text += (f"; status under flood p50 {status['p50_ms']:.1f} / p99 {status['p99_ms']:.1f} / "
             f"max {status['max_ms']:.1f} ms ({status['requests']} requests")
    if status["failures"]:
        text += f", failed {status['failures']}"
    if status["max_snapshot_age_s"] is not None:
        text += f", snapshot age up to {status['max_snapshot_age_s']:.2f} s"
    return text + (f"); quiet p50 {quiet['p50_ms']:.1f} / max {quiet['max_ms']:.1f} ms; "
                   f"{run['fetched']} pages fetched")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1000, help="URLs per POST")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the flood")
    parser.add_argument("--quiet-seconds", type=float, default=3.0, help="status timed before the flood")
    parser.add_argument("--status-interval-s", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--node-arg", action="append", default=[], help="extra option for crawler-node run")
    parser.add_argument("--other-tree", type=Path,
                        help="another checkout whose node also runs in every round (a side-by-side baseline)")
    args = parser.parse_args()
    trees = {"crawler-node": TREE}
    if args.other_tree is not None:
        trees[f"other ({args.other_tree})"] = args.other_tree.resolve()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp, \
            TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1, tmp_dir=Path(tmp)) as web:
        os.chdir(tmp)  # a neutral working directory for the nodes (see --other-tree)
        print(f"{args.clients} clients x {args.batch} URLs per POST for {args.seconds:.0f} s; "
              f"status every {args.status_interval_s * 1000:.0f} ms; testweb {args.hosts} hosts x {args.pages} pages",
              flush=True)
        for index in range(args.rounds):
            sides = list(trees.items())
            if index % 2:
                sides.reverse()
            result = {}
            for name, tree in sides:
                web.reset()
                result[name] = run_once(web, tree, Path(tmp) / f"node-{index}-{len(result)}", args)
            rounds.append(result)
            print(f"round {index + 1}:", flush=True)
            for name in trees:
                print(line(name, result[name]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "flood.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                    "rounds": rounds}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
