"""Frontier at scale: the cost of a lease round and of a page's outcome at 100k, 1M and 10M
queued URLs over a million hosts.

A generator (no network) fills a Frontier in a temporary data directory the way the store
stage does, in `apply(FrontierBatch(add=...))` transactions of 256 pages' links, each page
linking to its own host (its root, already seen after the first time, and new pages) and to
a few other hosts. Hosts are drawn from a Zipf-like law over HOSTS names (exponent ZIPF_S: the
largest host has ~1.3% of the URLs, and at 10M nearly every host has some), their names
scattered so that size does not follow name order. At each checkpoint it runs ROUNDS rounds as
the node does them: one `lease_many` for REFILL_HOSTS hosts with work (node/leases.py), LEASE_PER_HOST
URLs each (node/hosts.py: lease_size with the default host_limit_start of 1), then the leased
pages finished in store batches of STORE_BATCH (node/store_stage.py), each done with the links
its page had (LINKS_PER_PAGE, NEW_PER_PAGE of them new). Reported per checkpoint: pages/s
(leases finished per second of lease + apply time, the frontier's side only), lease-round and
apply latency p50/p99, the process's RSS (as it is, and trimmed: the heap's free pages handed
back as the node's upkeep does every 30 s while hosts leave memory), the SQLite files (main +
WAL) per URL row, bytes written per URL, how long filling took, and how long the file takes to
open again after the last checkpoint's rounds, as a node killed with a lease round out is
started. The frontier opens as the node's FrontierService opens it: once the file passes 256 MB
its WAL checkpoints run on a thread of their own (frontier/checkpointer.py), whose time is in
CPU µs/p but not in pages/s, the frontier thread's; `--writer-checkpoints` leaves them all to
the writer's commits, as SQLite does.

    python bench/scale.py                       # 100k and 1M
    python bench/scale.py --max 10000000 --json # and 10M; writes bench/results/scale.json
    python bench/scale.py --pragma mmap_size=4294967296 --pragma cache_size=-64000
    python bench/scale.py --other-tree /tmp/old # the same run with another checkout after this one

Each frontier runs in a child process of its own (`--child`), with the node's malloc and GC settings;
the checkpoints are measured on the way up, so the fill to 10M is paid once. `--pragma` sets a
PRAGMA on the frontier's connection after it opens (a fix measured before it is made in
frontier/schema.py); with --layout lsm, one of the prototype's settings instead
(`--pragma compress=1`: bench/frontier_layouts.py LsmSettings). Data goes under --tmp (default
/tmp) and is deleted afterwards.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
RESULTS_PATH = Path(__file__).parent / "results" / "scale.json"
CHECKPOINTS = (100_000, 1_000_000, 10_000_000)
HOSTS = 1_000_000
ZIPF_S = 0.8
REFILL_HOSTS = 256  # node/leases.py: hosts per lease_many
LEASE_PER_HOST = 4  # node/hosts.py lease_size: 2 * LEASE_AHEAD * limit, limit starting at 1
STORE_BATCH = 256  # node/store_stage.py: pages per frontier transaction
FILL_LINKS_PER_PAGE = 10  # while filling: the host's root, 7 new pages of it, 2 new elsewhere
LINKS_PER_PAGE = 10  # a finished page's links in the rounds ...
NEW_PER_PAGE = 2  # ... of which new; the rest: its host's root, links just made, pages fetched lately
RECENT_DUPLICATES = 4  # links to URLs just made (the frontier's recent set answers most)
RECENT_RING = 4096  # the URLs just made that pages link to again
FETCHED_RING = 4096  # the pages leased lately that pages link to again (old rows: the UNIQUE index answers)
ROUNDS = 80
ACTIVE_HOSTS = 10_000  # the node's default --active-hosts: hosts with work in memory, the rest parked
UNPARK_BATCH = 1000  # node/upkeep.py: parked hosts made active per round, at most
SLOWEST_SHOWN = 3  # lease rounds per checkpoint printed with what they met
BLOCKS = 10  # the rounds alternate with the reference's in this many blocks
FILL_WINDOW = 100_000  # URLs per window of the fill's timing, to see it slow down
_HOST_MULTIPLIER = 7919  # prime, so coprime with the host count: rank -> name is a permutation

if "--child" in sys.argv:  # only the child needs the frontier: its tree is on PYTHONPATH
    from crawler_node.frontier.frontier import Frontier, FrontierBatch, Lease, UrlEntry
    try:
        from crawler_node.frontier.checkpointer import FROM_BYTES as BACKGROUND_CHECKPOINTS_FROM
    except ImportError:  # a tree from before them: the writer checkpoints
        BACKGROUND_CHECKPOINTS_FROM = None
    from crawler_node.runtime.gctune import tune_for_throughput
    from crawler_node.runtime.malloctune import keep_heap_for_reuse
    try:
        from crawler_node.runtime.malloctune import release_free_heap
    except ImportError:  # a tree from before it
        def release_free_heap() -> bool:
            return False


# ----------------------------------------------------------------------------- the generator

class Ring:
    """The last `size` links of a kind, to link to again (bounded: the same in every frontier)."""

    def __init__(self, size: int) -> None:
        self.items: list = []
        self._size = size
        self._next = 0

    def add(self, item: object) -> None:
        if len(self.items) < self._size:
            self.items.append(item)
        else:
            self.items[self._next] = item
            self._next = (self._next + 1) % self._size

    def pick(self, rng: random.Random) -> object:
        return self.items[int(rng.random() * len(self.items))]


class Web:
    """Deterministic synthetic links (seeded): a counter, an RNG and two bounded rings."""

    def __init__(self, hosts: int = HOSTS, seed: int = 18) -> None:
        if hosts % _HOST_MULTIPLIER == 0:
            raise ValueError(f"hosts must not be a multiple of {_HOST_MULTIPLIER}, got {hosts}")
        self.rng = random.Random(seed)
        self.next_url = 0
        self.hosts = hosts
        self._span = hosts ** (1 - ZIPF_S) - 1
        self.added = Ring(RECENT_RING)  # links just made: a frontier answers most from memory
        self.fetched = Ring(FETCHED_RING)  # pages leased lately: rows from all over the table

    def host(self) -> str:
        # Inverse of the continuous Zipf CDF: rank r with probability ~ r^-ZIPF_S.
        rank = int((1 + self.rng.random() * self._span) ** (1 / (1 - ZIPF_S)))
        return f"www.site-{(min(rank, self.hosts) * _HOST_MULTIPLIER) % self.hosts}.example"

    def new_link(self, host: str, depth: int, via: str) -> UrlEntry:
        n = self.next_url
        self.next_url += 1
        link = UrlEntry(f"http://{host}/section-{n % 97}/page-{n}.html?ref={n * 31 % 100_003}", host, depth, 0,
                        via=via)
        self.added.add(link)
        return link

    def fill_page(self, host: str, via: str) -> list[UrlEntry]:
        """A page found while filling: its host's root (seen after the first time), new pages of
        its host, new pages of others."""
        links = [UrlEntry(f"http://{host}/", host, 1, 1, via=via)]
        links += [self.new_link(host, 1, via) for _ in range(FILL_LINKS_PER_PAGE - 3)]
        links += [self.new_link(self.host(), 1, via) for _ in range(2)]
        return links

    def fetched_page(self, lease: Lease) -> list[UrlEntry]:
        """A finished page's LINKS_PER_PAGE links: its host's root, NEW_PER_PAGE new (one of its
        host, one elsewhere), RECENT_DUPLICATES just made and the rest to pages fetched lately."""
        host, depth, via = lease.host, lease.depth + 1, lease.url
        self.fetched.add(UrlEntry(lease.url, host, lease.depth, lease.priority))
        links = [UrlEntry(f"http://{host}/", host, depth, 1, via=via), self.new_link(host, depth, via)]
        links += [self.new_link(self.host(), depth, via) for _ in range(NEW_PER_PAGE - 1)]
        links += [self.added.pick(self.rng) for _ in range(RECENT_DUPLICATES)]
        links += [self.fetched.pick(self.rng) for _ in range(LINKS_PER_PAGE - len(links))]
        return links


def fill_batches(web: Web) -> Iterator[list]:
    """Endless store-stage batches of discovered links, FILL_LINKS_PER_PAGE per page."""
    while True:
        batch: list = []
        for _ in range(STORE_BATCH):
            host = web.host()
            batch += web.fill_page(host, f"http://{host}/section-{web.next_url % 97}/index.html")
        yield batch


# ----------------------------------------------------------------------------- measuring

def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1e3, int(fields["VmHWM"].split()[0]) / 1e3


def written_bytes() -> int:
    """Bytes this process has passed to write() (the WAL and checkpoints)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def db_bytes(path: Path) -> tuple[int, int]:
    if path.is_dir():  # a prototype's store of many files (bench/frontier_layouts.py)
        return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()), 0
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, wal.stat().st_size if wal.exists() else 0


def fill_to(frontier, web: Web, batches: Iterator[list], target: int, windows: list) -> tuple[float, int]:
    """Add batches until `target` URLs are queued; returns (seconds, bytes written)."""
    started, wrote = time.perf_counter(), written_bytes()
    window_start, window_queued = started, frontier.totals()["queued"]
    while (queued := frontier.totals()["queued"]) < target:
        frontier.apply(FrontierBatch(add=next(batches)))
        if queued - window_queued >= FILL_WINDOW:
            now = time.perf_counter()
            windows.append((queued, (now - window_start) / (queued - window_queued) * 1e6))
            window_start, window_queued = now, queued
    return time.perf_counter() - started, written_bytes() - wrote


class GcClock:
    """Time spent in the cyclic garbage collector, which walks every tracked object: the
    frontier's per-host records are among them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def lease_rounds(frontier, web: Web, rounds: int, gc_clock: GcClock) -> dict:
    """`rounds` lease rounds over the active hosts, in a shuffled rotation, each finished. As in
    a node, a host that has nothing left leaves the rotation, and each round first asks the
    frontier for parked hosts (timed with the lease: the frontier's thread pays for both)."""
    hosts = [record.host for record in frontier.hosts_with_work()]
    web.rng.shuffle(hosts)
    rotation = deque(hosts)
    unpark = getattr(frontier, "unpark", None)  # a tree from before parking has none
    lease_s: list[float] = []
    apply_s: list[float] = []
    rounds_seen: list[dict] = []  # what each lease round met, to tell its slow ones apart
    leased = 0
    wrote, cpu, in_gc = written_bytes(), time.process_time(), gc_clock.seconds
    for index in range(rounds):
        wal_before, in_gc_before = wal_mb(frontier), gc_clock.seconds
        started = time.perf_counter()
        if unpark is not None:
            rotation.extend(record.host for record in unpark(UNPARK_BATCH))
        unparked = time.perf_counter()
        wanted = [rotation.popleft() for _ in range(min(REFILL_HOSTS, len(rotation)))]
        results = frontier.lease_many([(host, LEASE_PER_HOST) for host in wanted])
        lease_s.append(time.perf_counter() - started)
        rounds_seen.append({"ms": lease_s[-1] * 1e3, "round": index, "unpark_ms": (unparked - started) * 1e3,
                            "gc_ms": (gc_clock.seconds - in_gc_before) * 1e3,
                            "wal_mb": [wal_before, wal_mb(frontier)]})
        rotation.extend(host for host, (got, ready_at) in zip(wanted, results, strict=True) if got or ready_at)
        leases = [lease for got, _ in results for lease in got]
        leased += len(leases)
        for start in range(0, len(leases), STORE_BATCH):
            pages = leases[start:start + STORE_BATCH]
            add = [link for lease in pages for link in web.fetched_page(lease)]
            started = time.perf_counter()
            frontier.apply(FrontierBatch(done=[lease.id for lease in pages], add=add))
            apply_s.append(time.perf_counter() - started)
    return {"pages": leased, "lease_s": lease_s, "apply_s": apply_s, "written": written_bytes() - wrote,
            "slowest_rounds": sorted(rounds_seen, key=lambda seen: -seen["ms"])[:SLOWEST_SHOWN],
            "cpu_s": time.process_time() - cpu, "gc_s": gc_clock.seconds - in_gc}


def wal_mb(frontier) -> float:
    """The frontier's WAL file as it is (a prototype layout has none)."""
    path = getattr(frontier, "path", None)
    try:
        return os.stat(f"{path}-wal").st_size / 1e6 if path is not None else 0.0
    except OSError:
        return 0.0


def open_frontier(path: Path, active_hosts: int, checkpoints_from: int | None):
    """The frontier as the node's FrontierService opens it (frontier.service), in this tree."""
    if checkpoints_from is not None:
        return Frontier(path, resident_hosts=active_hosts, background_checkpoints_from=checkpoints_from)
    try:
        return Frontier(path, resident_hosts=active_hosts)
    except TypeError:  # a tree from before parking
        return Frontier(path)


def reopen(frontier, path: Path, active_hosts: int, checkpoints_from: int | None) -> tuple:
    """A node killed with a lease round out, started again: the frontier dropped without its
    close, opened anew (its leases queued again, its counts and active hosts rebuilt from the
    file); how long the open and the first lease round then take."""
    frontier.lease_many([(record.host, LEASE_PER_HOST) for record in frontier.hosts_with_work()[:REFILL_HOSTS]])
    frontier._db.conn.close()  # the bench reaches into the database: a kill closes nothing
    if getattr(frontier, "_checkpoints", None) is not None:  # ... and ends the checkpoint thread with it
        frontier._checkpoints.close()
    started = time.perf_counter()
    frontier = open_frontier(path, active_hosts, checkpoints_from)
    opened = time.perf_counter()
    frontier.lease_many([(record.host, LEASE_PER_HOST) for record in frontier.hosts_with_work()[:REFILL_HOSTS]])
    return frontier, {"open_s": opened - started, "first_lease_ms": (time.perf_counter() - opened) * 1e3}


def run_child(directory: Path, pragmas: list[str], hosts: int, active_hosts: int, layout: str,
              writer_checkpoints: bool) -> None:
    """Answer the parent's commands, one JSON line each: `fill N` (to N queued), `rounds N`,
    `stats`."""
    checkpoints_from = None if writer_checkpoints else BACKGROUND_CHECKPOINTS_FROM
    keep_heap_for_reuse()  # as in a node's process (crawler_node.daemon), which holds the frontier
    tune_for_throughput()
    gc_clock = GcClock()
    path = directory / "frontier.sqlite3"
    if layout != "current":  # a prototype of what could replace the frontier's layout
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from frontier_layouts import open_layout
        frontier = open_layout(layout, directory, resident_hosts=active_hosts, settings=pragmas)
        path = frontier.path
        pragmas = []  # they were the prototype's settings
    else:
        frontier = open_frontier(path, active_hosts, checkpoints_from)
    for pragma in pragmas:  # the bench reaches into the database only to try a setting before it is made
        frontier._db.conn.execute(f"PRAGMA {pragma}")
    web = Web(hosts)
    batches = fill_batches(web)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "fill":
            queued_before = frontier.totals()["queued"]
            windows: list[tuple[int, float]] = []
            seconds, wrote = fill_to(frontier, web, batches, int(argument), windows)
            added = max(1, frontier.totals()["queued"] - queued_before)
            answer = {"fill_s": seconds, "fill_us_per_url": seconds / added * 1e6,
                      "fill_windows_us_per_url": windows, "fill_written_kb_per_url": wrote / added / 1e3}
        elif command == "rounds":
            answer = lease_rounds(frontier, web, int(argument), gc_clock)
        elif command == "reopen":
            if layout != "current":
                answer = {"open_s": None, "first_lease_ms": None}
            else:
                frontier, answer = reopen(frontier, path, active_hosts, checkpoints_from)
        else:
            totals = frontier.totals()
            main_db, wal = db_bytes(path)
            rss, hwm = rss_mb()
            # and as the node's upkeep leaves it every 30 s while hosts leave memory: the heap's
            # free pages handed back (malloc_trim), which the rounds' freed memory held
            trimmed = rss_mb()[0] if release_free_heap() else rss
            rows = sum(totals[state] for state in ("queued", "leased", "done", "failed", "deferred"))
            answer = {"queued": totals["queued"], "hosts_with_work": totals["hosts_with_work"],
                      "parked_queued": totals.get("parked_queued", 0),
                      "hosts": totals["hosts"], "rows": rows, "rss_mb": rss, "peak_rss_mb": hwm,
                      "rss_trimmed_mb": trimmed,
                      "db_mb": main_db / 1e6, "wal_mb": wal / 1e6, "db_bytes_per_url": (main_db + wal) / rows,
                      "main_bytes_per_url": main_db / rows,
                      "engine_mb": frontier.memory_mb() if hasattr(frontier, "memory_mb") else {}}
        print(json.dumps(answer), flush=True)
    frontier.close()


# ----------------------------------------------------------------------------- the parent

class Child:
    """One frontier in a process of its own (its tree on PYTHONPATH), in a temporary directory."""

    def __init__(self, tree: Path, pragmas: list[str], hosts: int, tmp: Path, active_hosts: int,
                 layout: str, writer_checkpoints: bool) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="frontier-scale-", dir=tmp))
        command = [sys.executable, str(Path(__file__).resolve()), "--child", str(self.directory),
                   "--hosts", str(hosts), "--active-hosts", str(active_hosts), "--layout", layout]
        for pragma in pragmas:
            command += ["--pragma", pragma]
        if writer_checkpoints:
            command.append("--writer-checkpoints")
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                         cwd="/", env=dict(os.environ, PYTHONPATH=str(tree)))

    def ask(self, command: str) -> dict:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise SystemExit(f"the child failed (exit {self._process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def summary(blocks: list[dict]) -> dict:
    """One frontier's rounds at a checkpoint (several blocks) in figures."""
    lease_s = [s for block in blocks for s in block["lease_s"]]
    apply_s = [s for block in blocks for s in block["apply_s"]]
    pages = sum(block["pages"] for block in blocks)
    busy = sum(lease_s) + sum(apply_s)
    return {
        "rounds": len(lease_s), "pages": pages, "pages_per_s": pages / busy,
        "block_pages_per_s": [block["pages"] / (sum(block["lease_s"]) + sum(block["apply_s"])) for block in blocks],
        "lease_round_ms_p50": percentile(lease_s, 0.5) * 1e3, "lease_round_ms_p99": percentile(lease_s, 0.99) * 1e3,
        "lease_us_per_url": sum(lease_s) / pages * 1e6,
        "apply_ms_p50": percentile(apply_s, 0.5) * 1e3, "apply_ms_p99": percentile(apply_s, 0.99) * 1e3,
        "apply_ms_max": max(apply_s) * 1e3,
        "written_kb_per_page": sum(block["written"] for block in blocks) / pages / 1e3,
        # CPU of the whole process (SQLite included) per page: less moved by other jobs than pages/s
        "cpu_us_per_page": sum(block["cpu_s"] for block in blocks) / pages * 1e6,
        "gc_us_per_page": sum(block["gc_s"] for block in blocks) / pages * 1e6,
        "slowest_rounds": sorted((dict(seen, block=number) for number, block in enumerate(blocks)
                                  for seen in block.get("slowest_rounds", [])),
                                 key=lambda seen: -seen["ms"])[:SLOWEST_SHOWN],
    }


def measure(tree: Path, checkpoints: list[int], pragmas: list[str], hosts: int, rounds: int, blocks: int,
            tmp: Path, active_hosts: int, layout: str, writer_checkpoints: bool) -> Iterator[dict]:
    """Fill one frontier checkpoint by checkpoint; at each, its rounds alternate block by block
    with those of a fresh frontier of the first checkpoint's size (the reference, side by side)."""
    big = Child(tree, pragmas, hosts, tmp, active_hosts, layout, writer_checkpoints)
    filled_s = 0.0
    try:
        for checkpoint in checkpoints:
            fill = big.ask(f"fill {checkpoint}")
            filled_s += fill["fill_s"]
            before = big.ask("stats")
            reference = Child(tree, pragmas, hosts, tmp, active_hosts, layout, writer_checkpoints)
            try:
                reference.ask(f"fill {checkpoints[0]}")
                reference_before = reference.ask("stats")
                ours: list[dict] = []
                theirs: list[dict] = []
                for block in range(blocks):  # alternating which goes first
                    pair = [(big, ours), (reference, theirs)]
                    for child, results in pair if block % 2 == 0 else reversed(pair):
                        results.append(child.ask(f"rounds {max(1, rounds // blocks)}"))
                reference_stats = reference.ask("stats")
            finally:
                reference.close()
            after = big.ask("stats")  # files and memory after the rounds; the queue as filled
            row = {"checkpoint": checkpoint, **after, "queued": before["queued"], "queued_after": after["queued"],
                   "hosts_with_work": before["hosts_with_work"], **fill, "fill_total_s": filled_s,
                   **summary(ours)}
            # the last checkpoint only: a reopen's new records would count in the next one's RSS
            row.update(big.ask("reopen") if checkpoint == checkpoints[-1] else {"open_s": None})
            reference_summary = summary(theirs)
            row["reference"] = {**reference_stats, "queued": reference_before["queued"],
                                "queued_after": reference_stats["queued"], **reference_summary}
            row["pages_per_s_vs_reference"] = [
                a / b for a, b in zip(row["block_pages_per_s"], reference_summary["block_pages_per_s"], strict=True)]
            yield row
    finally:
        big.close()


HEADER = (f"{'queued':>10} {'hosts':>7} {'fill s':>7} {'fill µs':>8} {'pages/s':>8} {'vs ref':>6} {'lease p50':>9}"
          f" {'p99 ms':>7} {'µs/URL':>7} {'apply p50':>9} {'p99 ms':>7} {'RSS MB':>7} {'vs ref':>6} {'db MB':>8}"
          f" {'B/URL':>6} {'main':>5} {'wr KB/p':>7} {'CPU µs/p':>8} {'GC µs/p':>7} {'open s':>6}")


def print_row(row: dict) -> None:
    vs_pages = percentile(row["pages_per_s_vs_reference"], 0.5)
    vs_rss = row["rss_mb"] / row["reference"]["rss_mb"]
    print(f"{row['queued']:>10,} {row['hosts_with_work']:>7,} {row['fill_s']:>7.0f} {row['fill_us_per_url']:>8.1f}"
          f" {row['pages_per_s']:>8,.0f} {vs_pages:>6.2f} {row['lease_round_ms_p50']:>9.1f}"
          f" {row['lease_round_ms_p99']:>7.1f} {row['lease_us_per_url']:>7.1f} {row['apply_ms_p50']:>9.1f}"
          f" {row['apply_ms_p99']:>7.1f} {row['rss_mb']:>7.1f} {vs_rss:>6.2f} {row['db_mb'] + row['wal_mb']:>8.0f}"
          f" {row['db_bytes_per_url']:>6.0f} {row['main_bytes_per_url']:>5.0f} {row['written_kb_per_page']:>7.1f}"
          f" {row['cpu_us_per_page']:>8.0f} {row['gc_us_per_page']:>7.1f}"
          f" {'-' if row['open_s'] is None else format(row['open_s'], '.2f'):>6}", flush=True)
    reference = row["reference"]
    print(f"{'':>10} reference at {reference['queued']:,}: {reference['pages_per_s']:,.0f} pages/s, lease p50"
          f" {reference['lease_round_ms_p50']:.1f} ms, apply p50 {reference['apply_ms_p50']:.1f} ms,"
          f" RSS {reference['rss_mb']:.1f} MB ({reference['rss_trimmed_mb']:.1f} trimmed),"
          f" CPU {reference['cpu_us_per_page']:.0f} µs/page,"
          f" GC {reference['gc_us_per_page']:.1f} µs/page; this RSS trimmed {row['rss_trimmed_mb']:.1f} MB", flush=True)
    for label, slowest in (("", row["slowest_rounds"]), ("reference's ", reference["slowest_rounds"])):
        print(f"{'':>10} {label}slowest lease rounds: " + "; ".join(
            f"{seen['ms']:.0f} ms (block {seen['block']} round {seen['round']}, unpark {seen['unpark_ms']:.0f} ms,"
            f" GC {seen['gc_ms']:.0f} ms, WAL {seen['wal_mb'][0]:.0f} -> {seen['wal_mb'][1]:.0f} MB)"
            for seen in slowest), flush=True)
    for label, engine in (("", row.get("engine_mb")), ("reference ", reference.get("engine_mb"))):
        if engine:  # a prototype's store (--layout lsm): where its memory is
            print(f"{'':>10} {label}engine MB: " + ", ".join(f"{name} {mb:.1f}" for name, mb in engine.items()),
                  flush=True)


def print_ratios(first: dict, last: dict) -> None:
    def ratio(key: str) -> float:
        return last[key] / first[key]
    print(f"at {last['queued']:,} against {first['queued']:,}: pages/s x{ratio('pages_per_s'):.2f}"
          f" (side by side with a fresh {first['checkpoint']:,}:"
          f" x{percentile(last['pages_per_s_vs_reference'], 0.5):.2f};"
          f" target >= 0.8), CPU per page x{ratio('cpu_us_per_page'):.2f},"
          f" lease round p50 x{ratio('lease_round_ms_p50'):.2f}, RSS x{ratio('rss_mb'):.2f}"
          f" (target <= 1.3; side by side x{last['rss_mb'] / last['reference']['rss_mb']:.2f}, trimmed as the"
          f" node's upkeep does x{last['rss_trimmed_mb'] / last['reference']['rss_trimmed_mb']:.2f});"
          f" filled in {last['fill_total_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=1_000_000, help="the largest checkpoint (10000000 for 10M)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="lease rounds at each checkpoint")
    parser.add_argument("--blocks", type=int, default=BLOCKS, help="blocks the rounds alternate in")
    parser.add_argument("--hosts", type=int, default=HOSTS, help="host names the links are drawn from")
    parser.add_argument("--pragma", action="append", default=[],
                        help="PRAGMA to set on the connection (--layout lsm: NAME=VALUE of LsmSettings)")
    parser.add_argument("--active-hosts", type=int, default=ACTIVE_HOSTS,
                        help="hosts with work kept in memory, the rest parked (0: all, as before parking)")
    parser.add_argument("--layout", choices=["current", "clustered", "lsm"], default="current",
                        help="the frontier (current), or a prototype of another layout (bench/frontier_layouts.py)")
    parser.add_argument("--writer-checkpoints", action="store_true",
                        help="leave every WAL checkpoint to the writer's commits, as SQLite does; by default a"
                             " big file's run on a thread of their own as in the node (frontier/checkpointer.py)")
    parser.add_argument("--other-tree", type=Path, help="run another checkout's frontier the same way after")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", action="store_true", help=f"write {RESULTS_PATH.relative_to(TREE)}")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args.pragma, args.hosts, args.active_hosts, args.layout, args.writer_checkpoints)
        return
    checkpoints = [size for size in CHECKPOINTS if size <= args.max] or [args.max]
    trees = {"this": TREE}
    if args.other_tree is not None:
        trees[f"other ({args.other_tree})"] = args.other_tree.resolve()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs;"
          f" pragmas: {args.pragma or 'none'}; {args.hosts:,} hosts; active hosts {args.active_hosts or 'all'};"
          f" layout {args.layout}; WAL checkpoints {'by the writer' if args.writer_checkpoints else 'as the node'}")
    runs: dict[str, list[dict]] = {}
    for name, tree in trees.items():
        print(f"{name}:\n{HEADER}", flush=True)
        runs[name] = []
        for row in measure(tree, checkpoints, args.pragma, args.hosts, args.rounds, args.blocks, args.tmp,
                           args.active_hosts, args.layout, args.writer_checkpoints):
            row["load_average"] = os.getloadavg()[0]
            runs[name].append(row)
            print_row(row)
        if len(runs[name]) > 1:
            print_ratios(runs[name][0], runs[name][-1])
    print("fill µs: per URL added; lease: one lease_many of 256 hosts x 4; apply: one store batch of 256 pages"
          f" (done + {LINKS_PER_PAGE} links, {NEW_PER_PAGE} new); vs ref: median of the blocks' ratios to the"
          " reference, a fresh frontier of the first checkpoint's size, its blocks alternating with these;"
          " B/URL: main + WAL per row (main: without the WAL); wr KB/p: bytes written per page;"
          " CPU µs/p: the process's CPU per page in the rounds; GC µs/p: of it, in the cyclic collector;"
          " open s: opening the file again after the last rounds, as a node killed with a lease round out")
    if args.json:
        RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_PATH.write_text(json.dumps({"pragmas": args.pragma, "hosts": args.hosts, "zipf_s": ZIPF_S,
                                            "runs": runs}, indent=2) + "\n")
        print(f"wrote {RESULTS_PATH}")


if __name__ == "__main__":
    main()
