"""Start-up: how soon a fresh 3-node cluster fetches its first page after its last member starts.

Each round starts testweb's crawl again (same testweb process, `reset` between runs) with a
fresh 3-node cluster on 127.0.0.2-4, as `crawler-node demo` does: the three processes are
launched together, node-1 with the seeds. It records, from the bench's side, when the last
member was launched and when the last one answered /healthz (it listens only once its node
has started), and, from the nodes' crawl.log, when the first page (not a robots.txt) came in
(`fetched_at` + `elapsed_ms`) and when the 100th did. Reported: time from the last member's
start (its /healthz) and from its launch to the first page, and to the 100th page, per tree.

    python bench/startup.py [--rounds 5]
    python bench/startup.py --other-tree /tmp/startup-base    # paired with another checkout

--other-tree runs another checkout's nodes in every round, in alternating order, against the same
testweb (as bench/throughput.py does): make it with `git worktree add /tmp/startup-base <rev>`.
Nodes run with the checkout's root on PYTHONPATH from a neutral working directory.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools import client
from crawler_node.tools.node_process import NodeProcess, free_port

RESULTS = Path(__file__).resolve().parent / "results"
TREE = Path(__file__).resolve().parents[1]  # this checkout
NODES = 3
PAGES_WANTED = 100
POLL_S = 0.005


def page_times(data_dir: Path) -> list[float]:
    """When each page of a node's crawl.log came in (epoch seconds), robots.txt left out."""
    path = data_dir / "crawl.log"
    times = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a line being written
            continue
        if entry.get("kind", "page") != "page" or entry.get("status") is None:
            continue
        fetched = datetime.fromisoformat(entry["fetched_at"].replace("Z", "+00:00")).timestamp()
        times.append(fetched + entry.get("elapsed_ms", 0.0) / 1000.0)
    return times


def healthy(node: NodeProcess) -> bool:
    try:
        client.request_json(f"{node.url}/healthz", timeout=0.5)
        return True
    except client.NodeError:
        return False


def cluster_run(web: TestwebProcess, tree: Path, workdir: Path, seeds: list[str], timeout_s: float = 60.0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # whose crawler_node runs (see --other-tree)
    hosts = [f"127.0.0.{index + 2}" for index in range(NODES)]
    peers = {f"node-{index + 1}": f"http://{host}:{free_port(host)}" for index, host in enumerate(hosts)}
    secret = secrets.token_hex(16)
    nodes = []
    for index, (node_id, url) in enumerate(peers.items()):
        host, port = url.removeprefix("http://").split(":")
        nodes.append(NodeProcess(node_id=node_id, data_dir=workdir / node_id, host=host, port=int(port),
                                 proxy=web.url, peers=peers, seeds=seeds if index == 0 else (), env=env,
                                 extra_args=["--secret", secret, "--allow-host", "*.test"]))
    try:
        for node in nodes:
            node.start(wait=False)
        last_launch = time.time()
        ready: dict[str, float] = {}
        deadline = time.monotonic() + timeout_s
        while len(ready) < NODES and time.monotonic() < deadline:
            for node in nodes:
                if node.node_id not in ready and healthy(node):
                    ready[node.node_id] = time.time()
            time.sleep(POLL_S)
        if len(ready) < NODES:
            raise TimeoutError(f"not all nodes healthy after {timeout_s}s: {sorted(ready)}")
        last_ready = max(ready.values())
        times: list[float] = []
        while len(times) < PAGES_WANTED and time.monotonic() < deadline:
            time.sleep(0.05)
            times = sorted(t for node in nodes for t in page_times(node.data_dir))
        if len(times) < PAGES_WANTED:
            raise TimeoutError(f"{len(times)} pages after {timeout_s}s")
        holds = {}
        for node in nodes:
            fetch = node.status()["queues"]["fetch"]
            hold = fetch.get("hold")  # a checkout from before the readiness rule has no "hold"
            holds[node.node_id] = (f"{hold['held_s']:.2f}s: {hold['reason']}" if hold and hold.get("reason")
                                   else "fixed grace")
    finally:
        for node in nodes:
            node.stop()
    return {"last_launch_to_ready_s": last_ready - last_launch,
            "first_page_s": times[0] - last_ready, "first_page_from_launch_s": times[0] - last_launch,
            "hundredth_page_s": times[PAGES_WANTED - 1] - last_ready, "holds": holds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--other-tree", type=Path,
                        help="another checkout whose cluster also runs in every round (a side-by-side baseline)")
    args = parser.parse_args()
    trees = {"crawler-node": TREE}
    if args.other_tree is not None:
        trees[f"other ({args.other_tree})"] = args.other_tree.resolve()
    rounds: list[dict] = []
    seeds = [f"http://site-{i}.test/" for i in range(args.hosts)]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp, \
            TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1, tmp_dir=Path(tmp)) as web:
        os.chdir(tmp)  # a neutral working directory for the nodes (see --other-tree)
        for index in range(args.rounds):
            result = {}
            order = list(trees.items())
            if index % 2:
                order.reverse()
            for name, tree in order:
                web.reset()
                result[name] = cluster_run(web, tree, Path(tmp) / f"round-{index}-{len(result)}", seeds)
            line = f"round {index + 1}:"
            for name in trees:
                run = result[name]
                line += (f"  {name}: first page {run['first_page_s']:.3f}s after the last member's start "
                         f"({run['first_page_from_launch_s']:.2f}s after its launch), "
                         f"{PAGES_WANTED}th {run['hundredth_page_s']:.2f}s; holds {run['holds']}")
            print(line, flush=True)
            rounds.append(result)
    summary = {}
    for name in trees:
        first = [r[name]["first_page_s"] for r in rounds]
        launch = [r[name]["first_page_from_launch_s"] for r in rounds]
        hundredth = [r[name]["hundredth_page_s"] for r in rounds]
        summary[name] = {"first_page_s": statistics.median(first),
                         "first_page_from_launch_s": statistics.median(launch),
                         "hundredth_page_s": statistics.median(hundredth)}
        print(f"{name}: median first page {statistics.median(first):.3f}s after the last member's start "
              f"(range {min(first):.3f}-{max(first):.3f}; target <= 0.5), {statistics.median(launch):.2f}s after its "
              f"launch; {PAGES_WANTED}th page {statistics.median(hundredth):.2f}s")
    for name in list(trees)[1:]:
        saved = sorted(r[name]["first_page_s"] - r["crawler-node"]["first_page_s"] for r in rounds)
        print(f"crawler-node vs {name}, round by round: first page sooner by {statistics.median(saved):.2f}s "
              f"(range {saved[0]:.2f}-{saved[-1]:.2f})")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "startup.json").write_text(json.dumps({"hosts": args.hosts, "pages": args.pages, "summary": summary,
                                                      "rounds": rounds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
