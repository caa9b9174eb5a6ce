"""Where a node's CPU goes: seconds of the event-loop process, the parser and the store for one
crawl of the same testweb, this checkout side by side with another (alternating runs).

    python bench/cpu_split.py --other-tree /tmp/old [--hosts 30 --pages 300 --rounds 2]

A throughput ratio (bench/throughput.py) says whether the node got slower; this says which of
its processes pays. Measured with psutil at the end of the crawl, before the node stops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TREE))

from crawler_node.testweb.process import TestwebProcess  # noqa: E402
from crawler_node.tools.node_process import free_port  # noqa: E402

sys.path.insert(0, str(TREE / "bench"))
from throughput import process_cpu_by_role  # noqa: E402


def crawl(tree: Path, web: TestwebProcess, hosts: int, expected: int) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="bench-cpu-")
    port = free_port("127.0.0.1")
    seeds = [arg for i in range(hosts) for arg in ("--seed", f"http://site-{i}.test/")]
    command = [sys.executable, "-m", "crawler_node", "run", "--node-id", "n", "--listen", f"127.0.0.1:{port}",
               "--data-dir", data_dir, "--proxy", web.url, *seeds, "--allow-host", "*"]  # any host, in any tree
    if "pace:" in (tree / "crawler_node" / "settings.py").read_text():  # polite by default since 0a7337c
        command += ["--pace", "adaptive"]  # as bench/throughput.py: the node's speed, not the sites' delays
    node = subprocess.Popen(command, cwd=tempfile.gettempdir(), env=dict(os.environ, PYTHONPATH=str(tree)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status?scope=local", timeout=5) as answer:
                    status = json.load(answer)
            except OSError:
                continue
            if status["idle"] and status["counters"]["fetched"] >= expected:
                break
        return process_cpu_by_role(node.pid)
    finally:
        node.terminate()
        node.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other-tree", type=Path, required=True)
    parser.add_argument("--hosts", type=int, default=30)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1) as web:
        expected = len(web.expected())
        for round_ in range(args.rounds):
            for name, tree in (("this", TREE), ("other", args.other_tree.resolve())):
                seconds = crawl(tree, web, args.hosts, expected)
                per_page = ", ".join(f"{role} {1e6 * s / expected:.0f} µs" for role, s in seconds.items())
                print(f"round {round_ + 1} {name:5} ({tree}): per page {per_page}", flush=True)


if __name__ == "__main__":
    main()
