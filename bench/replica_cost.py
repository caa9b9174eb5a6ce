"""CPU of the frontier's share of a successor's replica, per URL, this checkout and another side
by side, each measurement in a fresh process, the trees alternating round by round:

  owner:     a page's batch as the store stage applies it with a successor named (its links
             queued and owed to the successor as queued replicas, the page owed as fetched),
             then the outbox sender's peek and acknowledgement: µs per page;
  successor: the neighbour's queued replicas taken in, and each of them fetched later
             (a fetched replica turns the queued row into a fetched one): µs per URL;
  own add:   this node's own new URLs once it holds a replica (each is looked up in it, since
             a neighbour may have fetched it): µs per URL.

    python bench/replica_cost.py [--other-tree /tmp/old] [--rounds 3] [--urls 30000]

Only the frontier (SQLite and the Python around it), on one thread: not the HTTP between the
nodes, the decoding and checking of a peer's batch, or the thread hops (see bench/cluster.py
for all of it, and the README for the split).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent

_CHILD = r'''
import json, sys, tempfile, time
from pathlib import Path
from crawler_node.frontier import Frontier, FrontierBatch, UrlEntry
try:  # a peer's batch taken in as one InboundBatch (since the peer wire has one home)
    from crawler_node.frontier import InboundBatch
    def take_queued(f, rows): f.take_in(InboundBatch(queued_replicas=rows))
    def take_fetched(f, urls): f.take_in(InboundBatch(fetched_replicas=urls))
except ImportError:
    def take_queued(f, rows): f.take_in([], [], False, [], queued_replicas=rows)
    def take_fetched(f, urls): f.take_in([], [], True, urls)
n = int(sys.argv[1])
hosts = [f"site-{i}.test" for i in range(10)]
def url(host, k):
    return f"http://{host}/section-{k % 97}/page-{k}.html"
out = {}
with tempfile.TemporaryDirectory() as d, Frontier(Path(d)) as f:
    f.add([UrlEntry(f"http://{h}/", h, 0, 0, 0, 0, None) for h in hosts])
    made = pages = 0
    started = time.process_time()
    while pages < n:
        leases = [lease for h in hosts for lease in f.lease(h, 4)[0]]
        add = []
        for lease in leases:
            for _ in range(2):  # two new links a page
                made += 1
                add.append(UrlEntry(url(lease.host, made), lease.host, lease.depth + 1, 0, 0, 0, lease.url))
        f.apply(FrontierBatch(done=[lease.id for lease in leases], add=add, successors=dict.fromkeys(hosts, "succ"),
                              replicate=[("succ", UrlEntry(lease.url, lease.host, lease.depth, 0, 0, 0, lease.via))
                                         for lease in leases]))
        pages += len(leases)
        rows = f.outbox.peek_rows("succ", 190)
        while rows:
            f.outbox.ack("succ", [(row.id, row.entry.url) for row in rows])
            rows = f.outbox.peek_rows("succ", 190)
    out["owner_us_per_page"] = 1e6 * (time.process_time() - started) / pages
with tempfile.TemporaryDirectory() as d, Frontier(Path(d)) as f:
    theirs = [UrlEntry(url(f"their-{i % 10}.test", i), f"their-{i % 10}.test", 3, 0, 1, 0,
                       f"http://their-{i % 10}.test/") for i in range(n)]
    lag = 2000  # fetched a while after it was queued, as a crawl does
    started = time.process_time()
    for k in range(0, n + lag, 95):
        if k < n:
            take_queued(f, theirs[k:k + 95])
        done = theirs[max(0, k - lag):max(0, k - lag + 95)] if k >= lag else []
        if done:
            take_fetched(f, [entry.url for entry in done])
    out["successor_us_per_url"] = 1e6 * (time.process_time() - started) / n
    own = [UrlEntry(url(f"own-{i % 10}.test", i), f"own-{i % 10}.test", 3, 0, 1, 0, None) for i in range(n)]
    started = time.process_time()
    for k in range(0, n, 64):
        f.add(own[k:k + 64])
    out["own_add_us_per_url"] = 1e6 * (time.process_time() - started) / n
print(json.dumps(out))
'''


def measure(tree: Path, urls: int) -> dict:
    result = subprocess.run([sys.executable, "-c", _CHILD, str(urls)], capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONPATH=str(tree)), cwd="/")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other-tree", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--urls", type=int, default=30000)
    args = parser.parse_args()
    trees = {"this": TREE}
    if args.other_tree is not None:
        trees[f"other ({args.other_tree})"] = args.other_tree.resolve()
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        order = list(trees.items()) if round_number % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            cost = measure(tree, args.urls)
            results[name].append(cost)
            print(f"round {round_number + 1} {name:28} owner {cost['owner_us_per_page']:6.1f} µs/page, successor"
                  f" {cost['successor_us_per_url']:5.1f} µs/URL, own add {cost['own_add_us_per_url']:5.1f} µs/URL",
                  flush=True)
    print("medians:")
    for name, costs in results.items():
        medians = {key: statistics.median(cost[key] for cost in costs) for key in costs[0]}
        print(f"  {name:28} " + ", ".join(f"{key} {value:.1f}" for key, value in medians.items()))


if __name__ == "__main__":
    main()
