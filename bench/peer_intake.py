"""What a member spends on a peer's batch of replica rows before its frontier sees them: the
msgpack body decoded, every row's fields checked, the rows split by kind, normalised and
scope-checked (cluster.wire, node.intake), in µs per row, this checkout and another side by side,
each in a fresh process, rounds alternating.

A batch is 256 rows as a successor receives them from a crawling owner (cluster.wire's
encode_batch): half replicas of queued URLs (depth, priority, via), half fetched ones (the URL).

    python bench/peer_intake.py [--other-tree /tmp/old] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent

_CHILD = r'''
import time, msgpack
from crawler_node.api import app
from crawler_node.api.http import MSGPACK, decode_body
from crawler_node.core.scope import Scope
from crawler_node.node.intake import Intake

items = []
for i in range(256):
    host = f"host-{i % 30}.test:8080"
    if i % 2:
        items.append({"url": f"http://{host}/p/{i}/{i * 7}.html", "depth": 3, "priority": 0, "replica": True,
                      "via": f"http://{host}/p/{i - 1}.html"})
    else:
        items.append({"url": f"http://{host}/p/{i}/{i * 7}.html", "seen": True})
body = msgpack.packb({"urls": items})
intake = Intake.__new__(Intake)  # prepare() reads only the scope
intake._scope = Scope()

try:  # since the peer wire has one home (cluster.wire): one read, one check
    from crawler_node.cluster.wire import decode_urls
except ImportError:
    decode_urls = None

def handle():
    if decode_urls is not None:
        read = decode_urls(decode_body(body, MSGPACK))
        assert not read.invalid
        return [intake.prepare_body(read)]
    rows, invalid = app.validate_urls(decode_body(body, MSGPACK))
    assert not invalid
    fresh = [(i, r) for i, r in rows if not r.get("seen") and not r.get("replica")]
    seen = [(i, r) for i, r in rows if r.get("seen")]
    replica = [(i, r) for i, r in rows if r.get("replica") and not r.get("seen")]
    if hasattr(app, "_by_kind"):
        fresh, seen, replica = app._by_kind(rows)
    return [app._prepare(intake, part)[0] for part in (fresh, seen, replica)]

assert sum(len(p.entries) + len(getattr(p, "seen", ())) + len(getattr(p, "replica", ())) for p in handle()) == 256
best = float("inf")
for _ in range(15):
    started = time.perf_counter()
    for _ in range(40):
        handle()
    best = min(best, (time.perf_counter() - started) / 40 / 256 * 1e6)
print(best)
'''


def measure(tree: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True, capture_output=True, text=True,
                         cwd="/")
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other-tree", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    trees = {"this": TREE} | ({f"other ({args.other_tree})": args.other_tree} if args.other_tree else {})
    results: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
            results[name].append(measure(trees[name]))
    for name, values in results.items():
        print(f"{name:30s} {statistics.median(values):5.2f} µs per row (best of 15 x 40 batches; rounds "
              + ", ".join(f"{v:.2f}" for v in values) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
