"""What the cluster costs and what it buys, on this machine (a benchmark, not a test).

  (a) scaling: 1 node vs 3 independent nodes (a third of the sites each) vs a 3-node cluster
      crawling the same testweb (zero latency): pages/s,
      CPU-seconds per 1,000 pages (node processes and their children), forwarded URLs/s and
      msgpack bytes per forwarded URL;
  (b) failover: a 3-node crawl, one node SIGKILLed mid-crawl: kill -> detected down by a
      peer -> its outbox rerouted -> first fetch of one of its hosts by a successor;
  (c) hosts moved when a 4th node joins 3: consistent hashing (crawler_node.ring.Ring)
      vs hash mod N (pure computation).

    python bench/cluster.py [--hosts 30 --pages 200 --failover-latency-ms 20] [--rounds 4]

Writes bench/results/cluster.json. Every process is started and stopped by PID through the
context managers of NodeProcess and TestwebProcess.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import msgpack
import psutil

from crawler_node.cluster.ring import Ring
from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools import client
from crawler_node.tools.node_process import NodeProcess, free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import process_cpu_by_role  # noqa: E402

RESULTS = Path(__file__).parent / "results"
FAST_CLUSTER = ["--heartbeat-interval-s", "0.3", "--startup-grace-s", "1.0", "--retry-base-s", "0.1"]
SECRET = "bench-secret"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ------------------------------------------------------------------ helpers
def get_json(url: str, timeout: float = 5.0) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {SECRET}"})
    with _OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read())


STATUS_ERRORS: list[str] = []


def local_status(node: NodeProcess, timeout: float = 5.0) -> dict:
    """GET /v1/status?scope=local; a 5xx is recorded (with the body) and retried."""
    for attempt in range(5):
        try:
            return get_json(f"{node.url}/v1/status?scope=local", timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == 4:
                raise
            body = exc.read()[:300].decode(errors="replace")
            STATUS_ERRORS.append(f"{node.node_id}: HTTP {exc.code} {body}")
            print(f"    ! {node.node_id} status HTTP {exc.code}: {body}\n{node.log_tail(15)}", flush=True)
            time.sleep(0.2)
    raise AssertionError("unreachable")


def roles_cpu(pids: list[int]) -> dict[str, float]:
    """CPU-seconds by role (throughput.process_cpu_by_role), summed over the nodes."""
    total: dict[str, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            for role, seconds in process_cpu_by_role(pid).items():
                role = "parse" if role.startswith("parse") else role  # parse-0, parse-1, ...
                total[role] = total.get(role, 0.0) + seconds
    return total


def tree_cpu(pid: int) -> float:
    """user+system CPU-seconds of a process and its (live) children."""
    try:
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(child.cpu_times()[:2])
    return total


def roots(hosts: int) -> list[str]:
    return [f"http://site-{i}.test/" for i in range(hosts)]


class CrawlLogTail:
    """Reads new lines of a node's crawl.log incrementally."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "crawl.log"
        self.offset = 0
        self.partial = b""

    def new_lines(self) -> list[dict]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.partial + chunk
        *complete, self.partial = data.split(b"\n")
        lines = [json.loads(line) for line in complete if line.strip()]
        return [line for line in lines if line.get("kind", "page") == "page"]  # not the robots.txt exchanges


def start_nodes(ids: list[str], web: TestwebProcess, workdir: Path, stack: contextlib.ExitStack,
                extra: list[str], *, cluster: bool = True) -> dict[str, NodeProcess]:
    """``cluster=False``: the nodes know nothing of each other (each a cluster of one)."""
    addresses = {}
    for offset, node_id in enumerate(ids):
        host = f"127.0.0.{2 + offset}"
        addresses[node_id] = (host, free_port(host))
    together = cluster and len(ids) > 1
    peers = {node_id: f"http://{host}:{port}" for node_id, (host, port) in addresses.items()} if together else {}
    nodes = {}
    for node_id in ids:
        host, port = addresses[node_id]
        node = NodeProcess(node_id=node_id, data_dir=workdir / node_id, host=host, port=port, proxy=web.url,
                           peers=peers,
                           extra_args=[*FAST_CLUSTER, "--secret", SECRET, "--log-level", "WARNING", *extra])
        node.start(wait=False)
        stack.callback(node.stop, 15)
        nodes[node_id] = node
    for node in nodes.values():
        node.wait_healthy(30)
    return nodes


def wait_all_idle(nodes: list[NodeProcess], timeout_s: float, settle_polls: int = 2, interval_s: float = 0.1) -> float:
    """Poll every node's local status until all are idle on consecutive polls; returns the
    monotonic time of the first poll of the settled streak."""
    deadline = time.monotonic() + timeout_s
    streak, first = 0, None
    while time.monotonic() < deadline:
        now = time.monotonic()
        idle = all(local_status(n)["idle"] for n in nodes)
        if idle:
            first = first if streak else now
            streak += 1
            if streak >= settle_polls:
                return first
        else:
            streak = 0
        time.sleep(interval_s)
    raise TimeoutError(f"not idle after {timeout_s}s")


def forward_payload_bytes(urls: list[str], batch: int = 500) -> dict:
    """msgpack bytes per URL of the body a sender posts to /v1/urls (cluster._send_batch)."""
    sizes = []
    for start in range(0, len(urls), batch):
        chunk = urls[start:start + batch]
        for seen in (False, True):
            body = msgpack.packb({"urls": [{"url": u, "depth": 3, "priority": 0, "hops": 1, "seen": seen}
                                           for u in chunk]})
            sizes.append((len(body), len(chunk)))
    total_bytes, total_urls = sum(b for b, _ in sizes), sum(n for _, n in sizes)
    return {"payload_bytes_per_url": total_bytes / total_urls,
            "mean_url_chars": sum(map(len, urls)) / len(urls)}


# ------------------------------------------------------------------ (a) scaling
def crawl_run(ids: list[str], web: TestwebProcess, workdir: Path, hosts: int, extra: list[str],
              *, cluster: bool = True) -> dict:
    """``cluster=False``: as many independent nodes, each given every len(ids)-th site: what
    running that many processes on this machine costs, without the cluster's traffic."""
    web.reset()
    with contextlib.ExitStack() as stack:
        nodes = start_nodes(ids, web, workdir, stack, extra, cluster=cluster)
        time.sleep(1.5)  # past the startup grace: members have heard each other
        pids = [n.pid for n in nodes.values()]
        cpu0 = sum(tree_cpu(p) for p in pids)
        roles0 = roles_cpu(pids)
        web_cpu0 = tree_cpu(web.pid)
        t0, t0_wall = time.monotonic(), time.time()
        if cluster:
            client.submit(nodes[ids[0]].url, roots(hosts), secret=SECRET)
        else:
            for index, node_id in enumerate(ids):
                client.submit(nodes[node_id].url, roots(hosts)[index::len(ids)], secret=SECRET)
        # Polled twice a second, not ten times: a status read costs a node ~1-2 CPU-ms (an idle
        # one's is built anew for each read), and three nodes polled would pay three times what
        # one does, in the CPU per page this compares.
        t_end = wait_all_idle(list(nodes.values()), timeout_s=1800, interval_s=0.5)
        cpu = sum(tree_cpu(p) for p in pids) - cpu0
        roles = {role: seconds - roles0.get(role, 0.0) for role, seconds in roles_cpu(pids).items()}
        web_cpu = tree_cpu(web.pid) - web_cpu0
        statuses = {node_id: local_status(n) for node_id, n in nodes.items()}
    # timed to the last commit of any node (as throughput.py does), not to the poll that saw it
    last_stored = max((s.get("last_stored_at") or 0.0) for s in statuses.values())
    wall = last_stored - t0_wall if last_stored > t0_wall else t_end - t0
    fetched = {node_id: s["counters"]["fetched"] for node_id, s in statuses.items()}
    pages = sum(fetched.values())
    counters = {}
    for s in statuses.values():
        for key, value in s["cluster"]["counters"].items():
            counters[key] = counters.get(key, 0) + value
    forwarded = counters.get("forwarded", 0)  # discovered links sent to their owner
    sent_seen = counters.get("sent_seen", 0)  # replicas of fetched URLs for the successor
    batches = counters.get("forward_batches", 0)
    calls: dict[str, int] = {}  # trips to the members' frontier threads on the crawl's path, summed
    for s in statuses.values():
        for name, histogram in s.get("frontier_calls", {}).items():
            calls[name] = calls.get(name, 0) + histogram["count"]
    return {
        "nodes": len(ids) if cluster else f"{len(ids)}i", "pages": pages, "fetched_per_node": fetched,
        "wall_s": round(wall, 3),
        "pages_per_s": pages / wall, "cpu_s": cpu, "cpu_s_per_1000": 1000 * cpu / pages,
        # which process pays, summed over the members: the loop thread, the other threads (the frontier), parse, store
        "cpu_us_per_page": {role: 1e6 * seconds / pages for role, seconds in roles.items()},
        "testweb_cpu_s": web_cpu,
        "forwarded": forwarded, "sent_seen": sent_seen, "forward_batches": batches,
        "forwarded_per_s": forwarded / wall,
        "urls_per_batch": (forwarded + sent_seen) / batches if batches else 0.0,
        "cluster_counters": counters,
        "frontier_calls_per_1000_pages": {name: 1000 * count / pages for name, count in calls.items()},
    }


# ------------------------------------------------------------------ (b) failover
def failover_run(web: TestwebProcess, workdir: Path, hosts: int, victim_id: str = "b") -> dict:
    web.reset()
    expected = len(web.expected())
    ids = ["a", "b", "c"]
    with contextlib.ExitStack() as stack:
        nodes = start_nodes(ids, web, workdir, stack, [])
        time.sleep(1.5)
        survivors = [nodes[i] for i in ids if i != victim_id]
        victim = nodes[victim_id]
        owners = {f"site-{i}.test": get_json(f"{survivors[0].url}/v1/ring?host=site-{i}.test")["owner"]
                  for i in range(hosts)}
        victim_hosts = {h for h, o in owners.items() if o == victim_id}
        tails = {n.node_id: CrawlLogTail(n.data_dir) for n in nodes.values()}
        t_start = time.monotonic()
        client.submit(nodes["a"].url, roots(hosts), secret=SECRET)
        logged = 0
        while logged < expected // 3:
            for tail in tails.values():
                logged += len(tail.new_lines())
            time.sleep(0.05)
            if time.monotonic() - t_start > 300:
                raise TimeoutError("crawl too slow to reach a third")
        before = {n.node_id: local_status(n) for n in survivors}
        rerouted0 = {k: s["cluster"]["counters"]["rerouted"] for k, s in before.items()}
        outbox_at_kill = {k: next(m["outbox"] for m in s["members"] if m["id"] == victim_id)
                          for k, s in before.items()}
        for tail in (tails[n.node_id] for n in survivors):
            tail.new_lines()  # skip what was logged before the kill
        victim_fetched_before = len(CrawlLogTail(victim.data_dir).new_lines())

        wall_kill = time.time()
        killed = time.monotonic()
        victim.kill()
        detected = {}
        rerouted = {}
        outbox_drained = {}
        first_takeover = None
        first_takeover_fetched_at = None
        while time.monotonic() - killed < 60 and not (
                len(detected) == len(survivors) and first_takeover is not None
                and len(outbox_drained) == len(survivors)):
            now = time.monotonic()
            for node in survivors:
                s = local_status(node)
                member = next(m for m in s["members"] if m["id"] == victim_id)
                if member["state"] == "down" and node.node_id not in detected:
                    detected[node.node_id] = now - killed
                if s["cluster"]["counters"]["rerouted"] > rerouted0[node.node_id] and node.node_id not in rerouted:
                    rerouted[node.node_id] = now - killed
                if member["state"] == "down" and member["outbox"] == 0 and node.node_id not in outbox_drained:
                    outbox_drained[node.node_id] = now - killed
            if first_takeover is None:
                for node in survivors:
                    for line in tails[node.node_id].new_lines():
                        if line.get("host") in victim_hosts:
                            first_takeover = {"node": node.node_id, "host": line["host"], "after_s": now - killed}
                            with contextlib.suppress(Exception):
                                first_takeover_fetched_at = datetime.fromisoformat(
                                    line["fetched_at"].replace("Z", "+00:00")).timestamp() - wall_kill
                            break
                    if first_takeover:
                        break
            time.sleep(0.05)
        # let the survivors finish the crawl without the victim
        try:
            done_at = wait_all_idle(survivors, timeout_s=240)
            finished_after = done_at - killed
        except TimeoutError:
            finished_after = None
        after = {n.node_id: local_status(n) for n in survivors}
    covered = set()
    for node in nodes.values():
        for line in CrawlLogTail(node.data_dir).new_lines():
            covered.add(line["url"])
    return {
        "victim": victim_id, "victim_hosts": len(victim_hosts), "expected_pages": expected,
        "victim_fetched_before_kill": victim_fetched_before,
        "victim_outbox_at_kill": outbox_at_kill,
        "detected_s": {k: round(v, 3) for k, v in detected.items()},
        "rerouted_counter_up_s": {k: round(v, 3) for k, v in rerouted.items()},
        "outbox_for_victim_drained_s": {k: round(v, 3) for k, v in outbox_drained.items()},
        "first_takeover_fetch": first_takeover and {**first_takeover, "after_s": round(first_takeover["after_s"], 3)},
        "first_takeover_fetched_at_s": (
            None if first_takeover_fetched_at is None else round(first_takeover_fetched_at, 3)
        ),
        "survivors_idle_after_s": None if finished_after is None else round(finished_after, 2),
        "rerouted_total": sum(s["cluster"]["counters"]["rerouted"] for s in after.values()),
        "coverage": len(covered) / expected,
    }


# ------------------------------------------------------------------ (c) moved on join
def moved_on_join(n_hosts: int = 10_000, n_before: int = 3) -> dict:
    hosts = [f"site-{i}.example-{i % 97}.test" for i in range(n_hosts)]
    before_ids = [f"n{i}" for i in range(1, n_before + 1)]
    ring_before = Ring(before_ids)
    ring_after = ring_before.with_node(f"n{n_before + 1}")
    moved_ring = [h for h in hosts if ring_before.owner(h) != ring_after.owner(h)]
    to_new = sum(ring_after.owner(h) == f"n{n_before + 1}" for h in moved_ring)

    def stable_hash(host: str) -> int:
        return int.from_bytes(hashlib.md5(host.encode()).digest()[:4], "big")

    moved_mod = sum(stable_hash(h) % n_before != stable_hash(h) % (n_before + 1) for h in hosts)
    shares = {}
    for h in hosts:
        owner = ring_after.owner(h)
        shares[owner] = shares.get(owner, 0) + 1
    return {
        "hosts": n_hosts, "n_before": n_before, "n_after": n_before + 1,
        "ideal_fraction": 1 / (n_before + 1),
        "ring_fraction_moved": len(moved_ring) / n_hosts,
        "ring_moved_only_to_new_node": to_new == len(moved_ring),
        "mod_n_fraction_moved": moved_mod / n_hosts,
        "ring_hosts_per_node_after": dict(sorted(shares.items())),
    }


# ------------------------------------------------------------------ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=30)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--failover-latency-ms", type=int, default=20,
                        help="testweb latency for the failover run, so the crawl lasts past the kill")
    parser.add_argument("--skip", action="append", default=[], choices=["scaling", "failover", "join"])
    parser.add_argument("--rounds", type=int, default=1,
                        help="scaling rounds, 1 and 3 nodes in each, the order alternating; the median is reported")
    parser.add_argument("--node-arg", action="append", default=[],
                        help="extra option for every crawler-node run of the scaling runs (repeat it)")
    args = parser.parse_args()
    results: dict = {"hosts": args.hosts, "pages": args.pages, "cpus": psutil.cpu_count()}

    if "join" not in args.skip:
        join = results["join"] = moved_on_join()
        print(f"(c) join 3->4 over {join['hosts']} hosts: ring moves {join['ring_fraction_moved']:.3f} "
              f"(all to the new node: {join['ring_moved_only_to_new_node']}), "
              f"mod N moves {join['mod_n_fraction_moved']:.3f}; ideal {join['ideal_fraction']:.3f}", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        tmp_path = Path(tmp)
        if "scaling" not in args.skip:
            with TestwebProcess(hosts=args.hosts, pages=args.pages, seed=1, tmp_dir=tmp_path) as web:
                urls = web.expected()
                # testweb renders a page once and serves it from its cache after: untimed, one crawl
                # first, so that no run pays for a cold testweb (the first one would)
                crawl_run(["warm"], web, tmp_path / "warm", args.hosts, args.node_arg)
                runs, pairs = [], []
                for index in range(args.rounds):  # 1 node, 3 independent, 3 in a cluster; then reversed
                    kinds: list[tuple[str | int, list[str], bool]] = [
                        (1, ["solo"], True), ("3i", ["x", "y", "z"], False), (3, ["a", "b", "c"], True)]
                    pair: dict[str | int, dict] = {}
                    for key, ids, together in kinds if index % 2 == 0 else reversed(kinds):
                        run = crawl_run(ids, web, tmp_path / f"scale-{index}-{key}", args.hosts, args.node_arg,
                                        cluster=together)
                        pair[key] = run
                        print(f"(a) round {index + 1}, {run['nodes']} node(s): {run['pages']} pages in "
                              f"{run['wall_s']:.1f}s, {run['cpu_s_per_1000']:.2f} CPU-s/1k; per page "
                              + ", ".join(f"{role} {us:.0f} µs" for role, us in run["cpu_us_per_page"].items())
                              + "; frontier calls per 1,000 pages: " + ", ".join(
                                  f"{name} {per:.0f}" for name, per in run["frontier_calls_per_1000_pages"].items()),
                              flush=True)
                    runs += [pair[1], pair["3i"], pair[3]]
                    pairs.append(pair)
            size = forward_payload_bytes(urls)
            results["scaling"] = {"runs": runs, "forward_size": size, "rounds": args.rounds,
                                  "cpu_ratios": [p[3]["cpu_s_per_1000"] / p[1]["cpu_s_per_1000"] for p in pairs],
                                  # three processes on this machine, and then what the cluster adds to them
                                  "independent_cpu_ratios": [p["3i"]["cpu_s_per_1000"] / p[1]["cpu_s_per_1000"]
                                                             for p in pairs],
                                  "cluster_over_independent": [p[3]["cpu_s_per_1000"] / p["3i"]["cpu_s_per_1000"]
                                                               for p in pairs],
                                  "speedups": [p[3]["pages_per_s"] / p[1]["pages_per_s"] for p in pairs]}
        if "failover" not in args.skip:
            profile = {"site-*.test": {"latency_ms": args.failover_latency_ms}}
            with TestwebProcess(hosts=args.hosts, pages=args.pages, seed=2, profile=profile, tmp_dir=tmp_path) as web:
                results["failover"] = failover_run(web, tmp_path / "failover", args.hosts)

    print()
    if "scaling" in results:
        print(f"(a) scaling: {args.hosts} hosts x {args.pages} pages, zero latency, {results['cpus']} CPUs")
        print(f"    {'nodes':>5} {'pages':>6} {'wall s':>7} {'pages/s':>8} {'CPU-s/1k':>9} {'web CPU-s':>9} "
              f"{'fwd URLs':>9} {'fwd/s':>7} {'URLs/batch':>10}")
        for run in results["scaling"]["runs"]:
            print(f"    {run['nodes']:>5} {run['pages']:>6} {run['wall_s']:>7.1f} {run['pages_per_s']:>8.0f} "
                  f"{run['cpu_s_per_1000']:>9.2f} {run['testweb_cpu_s']:>9.1f} {run['forwarded']:>9} "
                  f"{run['forwarded_per_s']:>7.0f} {run['urls_per_batch']:>10.1f}")
        scaling = results["scaling"]
        three = next(run for run in reversed(scaling["runs"]) if run["nodes"] == 3)
        ratios, speedups = sorted(scaling["cpu_ratios"]), sorted(scaling["speedups"])
        scaling["speedup_3_vs_1"] = speedups[len(speedups) // 2]
        scaling["cpu_ratio_3_vs_1"] = ratios[len(ratios) // 2]
        size = scaling["forward_size"]
        print(f"    3 vs 1, median of {len(ratios)} round(s): speed-up x{scaling['speedup_3_vs_1']:.2f}, "
              f"CPU per page x{scaling['cpu_ratio_3_vs_1']:.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in scaling['cpu_ratios'])}); "
              f"sent to peers: {three['forwarded']} links + {three['sent_seen']} replicas")
        middle = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
        print(f"    of which three processes on this machine (3 independent nodes, each a third of the sites) "
              f"x{middle(scaling['independent_cpu_ratios']):.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in scaling['independent_cpu_ratios'])}), and the cluster over them "
              f"x{middle(scaling['cluster_over_independent']):.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in scaling['cluster_over_independent'])})")
        print(f"    msgpack payload {size['payload_bytes_per_url']:.1f} bytes per forwarded URL "
              f"(mean URL {size['mean_url_chars']:.1f} chars; excl. HTTP headers per batch)")
    if "failover" in results:
        f = results["failover"]
        print(f"(b) failover: SIGKILL {f['victim']} ({f['victim_hosts']} of {args.hosts} hosts) "
              f"after {f['victim_fetched_before_kill']} of its pages; "
              f"testweb latency {args.failover_latency_ms} ms")
        print(f"    detected down      : {f['detected_s']} s")
        print(f"    rerouted counter up: {f['rerouted_counter_up_s']} s  "
              f"(victim outbox at kill: {f['victim_outbox_at_kill']})")
        print(f"    outbox drained     : {f['outbox_for_victim_drained_s']} s")
        print(f"    first takeover     : {f['first_takeover_fetch']} "
              f"(fetched_at - kill: {f['first_takeover_fetched_at_s']} s)")
        print(f"    survivors idle     : {f['survivors_idle_after_s']} s after kill; coverage {f['coverage']:.3f}")
    if "join" in results:
        j = results["join"]
        print(f"(c) join {j['n_before']}->{j['n_after']}: consistent ring moves {j['ring_fraction_moved']:.3f}, "
              f"mod N {j['mod_n_fraction_moved']:.3f} (ideal {j['ideal_fraction']:.3f}); "
              f"per node after {j['ring_hosts_per_node_after']}")
    results["status_errors"] = STATUS_ERRORS
    if STATUS_ERRORS:
        print(f"!! {len(STATUS_ERRORS)} status calls answered 5xx (retried); first: {STATUS_ERRORS[0][:200]}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
