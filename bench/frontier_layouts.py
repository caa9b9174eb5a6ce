"""Prototypes of what could replace the frontier's SQLite layout at 10M URLs, measured by
`bench/scale.py --layout clustered|lsm` exactly as the frontier is (a benchmark, not product code).

The frontier's layout (frontier/schema.py) keeps every URL as a row of `urls`, in insertion
order, with three indexes over it: the URL text (the seen-set), the queued rows by host
(`urls_ready`) and by age (`urls_age`). Each page then dirties B-tree pages all over the file:
its row at the lease and again when done, an index leaf per new link in each of three indexes,
and its host's row. README "Frontier at scale" says what that costs at 10M. The two layouts here
keep what a page needs in one place per host and the rest apart:

- ``clustered`` (SQLite): the queue as a table clustered on (host, priority, id), so a lease
  reads a host's next rows from one leaf and a finished page deletes from that same leaf; the
  seen-set as a table of 64-bit URL hashes (~10 bytes an entry against ~90 for the URL text);
  finished pages appended to a table in the order they finish.
- ``lsm`` (RocksDB, through rocksdict): the same keys in a log-structured merge tree, as
  StormCrawler's URLFrontier keeps its queues: every write is an append to the memtable and its
  log, merged into sorted files in the background, so no write lands on a random page of a
  large file; a bloom filter answers most seen-set misses without a read.

Both keep in memory what the frontier keeps with --active-hosts: the active hosts (queued count,
leased ids), the parked rows and the round robin's cursor, the leases, the recent URLs. Both
persist a lease's attempt as the frontier does (the row rewritten in place). Both are
simplified where it does not change what is written per page: no politeness, deferral, outbox,
replica or recrawl; a seen-set hit is trusted (a real one would compare the URL: at 10M the
chance of any 64-bit collision is ~3e-6). Durability is the frontier's: a commit survives a
killed process, not a power cut (SQLite WAL + synchronous=NORMAL; RocksDB's log unsynced).
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from crawler_node.core.bounded import TwoGenerationSet
from crawler_node.frontier.records import FrontierBatch, HostQueue, Lease, UrlEntry

LAYOUTS = ("clustered", "lsm")
PREFIX = 9  # the lsm layout's queue keys: b"q" and 8 bytes of the host's hash
RECENT_URLS = 32_768  # as the frontier's recent set


def url_hash(url: str) -> int:
    """A URL's 64-bit hash, signed (SQLite's INTEGER)."""
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "big", signed=True)


@dataclass(slots=True)
class _Active:
    queued: int = 0  # queued rows not leased
    leased: set[int] = field(default_factory=set)


class _Prototype:
    """The in-memory part both prototypes share; subclasses keep the rows."""

    path: Path

    def __init__(self, resident_hosts: int) -> None:
        self._resident = resident_hosts or 1 << 62
        self._active: dict[str, _Active] = {}
        self._parked = 0  # queued rows of parked hosts
        self._cursor = ""
        self._leases: dict[int, Lease] = {}
        self._recent = TwoGenerationSet(RECENT_URLS)
        self._next_id = 1
        self._done = 0

    # -- what the subclass keeps -----------------------------------------------------------
    def _insert(self, fresh: list[UrlEntry]) -> list[tuple[int, UrlEntry]]:
        raise NotImplementedError

    def _read(self, host: str, n: int, skip: set[int]) -> list[Lease]:
        raise NotImplementedError

    def _finish(self, leases: list[Lease]) -> None:
        raise NotImplementedError

    def _count(self, host: str) -> int:
        raise NotImplementedError

    def _next_host(self, after: str) -> str | None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _left(self, host: str) -> None:
        """The host is no longer active (what the subclass keeps of it may go)."""

    def _order(self, host: str) -> object:
        """Where a host's queue sorts among the others ("" first): the turns' order."""
        return host

    def close(self) -> None:
        raise NotImplementedError

    # -- the frontier's calls, as bench/scale.py makes them ----------------------------------
    def apply(self, batch: FrontierBatch) -> None:
        finished = [self._leases.pop(row_id) for row_id in batch.done if row_id in self._leases]
        if finished:
            self._finish(finished)
        unique = {entry.url: entry for entry in batch.add}
        fresh = [entry for url, entry in unique.items() if url not in self._recent]
        new = self._insert(fresh) if fresh else []
        self._commit()
        self._recent.update(unique)
        for lease in finished:
            record = self._active[lease.host]
            record.leased.discard(lease.id)
            if not record.queued and not record.leased:
                del self._active[lease.host]
                self._left(lease.host)
        self._done += len(finished)
        for _, entry in new:
            record = self._active.get(entry.host)
            if record is None and not self._parked and len(self._active) < self._resident:
                record = self._active[entry.host] = _Active()
            if record is None:
                self._parked += 1
            else:
                record.queued += 1

    def lease_many(self, requests: list[tuple[str, int]]) -> list[tuple[list[Lease], float | None]]:
        results: list[tuple[list[Lease], float | None]] = []
        for host, n in requests:
            record = self._active.get(host)
            if record is None or record.queued <= 0 or n <= 0:
                results.append(([], None))
                continue
            leases = self._read(host, min(n, record.queued), record.leased)
            record.queued -= len(leases)
            record.leased.update(lease.id for lease in leases)
            self._leases.update((lease.id, lease) for lease in leases)
            results.append((leases, None))
        self._commit()
        return results

    def unpark(self, limit: int) -> list[HostQueue]:
        room = min(limit, self._resident - len(self._active))
        found: list[HostQueue] = []
        after, wrapped, start = self._cursor, False, self._cursor
        for _ in range(4 * max(0, room) + 64):
            if len(found) >= room or not self._parked:
                break
            host = self._next_host(after)
            if host is None:
                if wrapped or start == "":
                    break
                wrapped, after = True, ""
                continue
            if wrapped and self._order(host) > self._order(start):
                break
            after = self._cursor = host
            if host not in self._active:
                queued = self._count(host)
                self._active[host] = _Active(queued=queued)
                self._parked -= queued
                found.append(HostQueue(host, queued=queued))
        return found

    def hosts_with_work(self) -> list[HostQueue]:
        return [HostQueue(host, queued=record.queued) for host, record in self._active.items() if record.queued]

    def totals(self) -> dict[str, int]:
        queued = sum(record.queued for record in self._active.values()) + self._parked
        return {"queued": queued, "leased": len(self._leases), "done": self._done, "failed": 0, "deferred": 0,
                "hosts_with_work": sum(1 for record in self._active.values() if record.queued),
                "hosts": 0, "parked_queued": self._parked}  # (hosts: not counted here)

    def _ids(self, count: int) -> range:
        first = self._next_id
        self._next_id += count
        return range(first, first + count)


class ClusteredFrontier(_Prototype):
    """SQLite, with the frontier's connection settings: the queue clustered by host."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS seen (h INTEGER PRIMARY KEY);
    CREATE TABLE IF NOT EXISTS queue (host TEXT NOT NULL, priority INTEGER NOT NULL, id INTEGER NOT NULL,
        url TEXT NOT NULL, depth INTEGER NOT NULL, via TEXT, attempts INTEGER NOT NULL DEFAULT 0,
        enqueued_at REAL NOT NULL, PRIMARY KEY (host, priority DESC, id)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS fetched (id INTEGER PRIMARY KEY, url TEXT NOT NULL, host TEXT NOT NULL,
        state INTEGER NOT NULL, finished_at REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS hosts (host TEXT PRIMARY KEY, accepted INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
    """

    def __init__(self, directory: Path, resident_hosts: int) -> None:
        super().__init__(resident_hosts)
        self.path = directory / "clustered.sqlite3"
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        for pragma in ("page_size = 2048", "journal_mode = WAL", "synchronous = NORMAL", "cache_size = -8000",
                       "wal_autocheckpoint = 16384", "journal_size_limit = 67108864"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.conn.executescript(self.SCHEMA)
        self.conn.execute("BEGIN")

    def _commit(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.execute("BEGIN")

    def _insert(self, fresh: list[UrlEntry]) -> list[tuple[int, UrlEntry]]:
        by_hash = {url_hash(entry.url): entry for entry in fresh}
        hashes = list(by_hash)
        new: set[int] = set()
        for start in range(0, len(hashes), 256):
            chunk = hashes[start:start + 256]
            new.update(h for (h,) in self.conn.execute(
                f"INSERT INTO seen (h) VALUES {', '.join(['(?)'] * len(chunk))} ON CONFLICT DO NOTHING RETURNING h",
                chunk))
        added = [entry for h, entry in by_hash.items() if h in new]
        rows = list(zip(self._ids(len(added)), added, strict=True))
        now = time.time()
        self.conn.executemany(
            "INSERT INTO queue (host, priority, id, url, depth, via, enqueued_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(e.host, e.priority, row_id, e.url, e.depth, e.via, now) for row_id, e in rows])
        per_host: dict[str, int] = {}
        for _, entry in rows:
            per_host[entry.host] = per_host.get(entry.host, 0) + 1
        self.conn.executemany("INSERT INTO hosts (host, accepted) VALUES (?, ?) ON CONFLICT(host)"
                              " DO UPDATE SET accepted = accepted + excluded.accepted", list(per_host.items()))
        return rows

    def _read(self, host: str, n: int, skip: set[int]) -> list[Lease]:
        rows = self.conn.execute(
            "SELECT priority, id, url, depth, via, attempts FROM queue WHERE host = ? ORDER BY priority DESC, id"
            " LIMIT ?", (host, n + len(skip))).fetchall()
        leases = [Lease(row_id, url, host, depth, priority, attempts + 1, 0, via=via)
                  for priority, row_id, url, depth, via, attempts in rows if row_id not in skip][:n]
        self.conn.executemany("UPDATE queue SET attempts = attempts + 1 WHERE host = ? AND priority = ? AND id = ?",
                              [(host, lease.priority, lease.id) for lease in leases])
        return leases

    def _finish(self, leases: list[Lease]) -> None:
        self.conn.executemany("DELETE FROM queue WHERE host = ? AND priority = ? AND id = ?",
                              [(lease.host, lease.priority, lease.id) for lease in leases])
        now = time.time()
        self.conn.executemany("INSERT INTO fetched (id, url, host, state, finished_at) VALUES (?, ?, ?, 2, ?)",
                              [(lease.id, lease.url, lease.host, now) for lease in leases])

    def _count(self, host: str) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM queue WHERE host = ?", (host,)).fetchone()[0]

    def _next_host(self, after: str) -> str | None:
        row = self.conn.execute("SELECT host FROM queue WHERE host > ? ORDER BY host LIMIT 1", (after,)).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


@dataclass(frozen=True, slots=True)
class LsmSettings:
    """The lsm layout's RocksDB settings that were measured (README "Frontier at scale")."""

    compress: bool = False  # Snappy on every file (RocksDB's default)
    block_kb: int = 4  # data block size (RocksDB's default)
    cache_mb: int = 0  # block cache (0: RocksDB's default, 32 MB)
    partitioned: bool = False  # indexes and filters partitioned, in the block cache
    bloom_bits: int = 10  # bloom filter bits per key
    # The queue's files without filters in their last level (optimize_filters_for_hits): a host
    # leased has rows there, so its prefix filter answers nothing a seek needs
    last_level_filters: bool = False
    # The seen-set and the hosts' counts (point gets), the queue (prefix seeks) and the finished
    # rows (never read here) in column families of their own, each with the filter its reads use
    # (queue_block_kb: the queue's blocks), one block cache and one memtable budget among them.
    # In one family every queue key had a whole-key filter entry no read asks: at 10M the files'
    # indexes and filters held 50 MB of heap, 22 with these defaults (README "Frontier at scale")
    families: bool = True
    queue_block_kb: int = 16
    # With families: the seen-set's filter, bits per key. 5 (a miss reads a block ~9% of the
    # time, against ~1% at 10): at 10M its indexes and filter hold 7.8 MB of heap against 14.7,
    # which takes the RSS from x1.31-1.35 of a fresh 100k's (trimmed) to x1.24-1.28, for
    # pages/s x0.80-0.89 against x0.86-0.91 (two runs each, README "Frontier at scale")
    points_bloom_bits: int = 5
    # With families: the seen-set's last level filtered. Without (every miss reads a block of
    # it): 1.5 MB of heap, RSS x1.20, but CPU per page +15% (x0.84 in one run)
    points_last_level_filters: bool = True

    @classmethod
    def parse(cls, settings: Sequence[str]) -> LsmSettings:
        values: dict[str, object] = {}
        for setting in settings:
            name, _, value = setting.partition("=")
            if name not in cls.__dataclass_fields__:
                raise ValueError(f"the lsm layout has no setting {name!r} ({', '.join(cls.__dataclass_fields__)})")
            kind = type(getattr(cls(), name))
            values[name] = value.lower() in ("1", "true", "yes") if kind is bool else int(value)
        return cls(**values)  # type: ignore[arg-type]


class LsmFrontier(_Prototype):
    """RocksDB: the same keys, in a log-structured merge tree. Keys (bytes, sorted):
    b"q" + hash(host) + host + 0 + (priority, descending) + id: a queued URL, in the default
    column family, whose first 9 bytes are a fixed prefix with a bloom filter: a host's queue is
    found without reading the files that hold none of it (turns go in the order of the hosts'
    hashes); b"s" + hash: the seen-set and b"h" + host: its accepted count, in "points" (a
    whole-key filter); b"f" + id: a finished one, in "finished" (no filter). With `families`
    off (LsmSettings) all of them in the default family, as first measured."""

    def __init__(self, directory: Path, resident_hosts: int, settings: Sequence[str] = ()) -> None:
        super().__init__(resident_hosts)
        from rocksdict import (
            BlockBasedIndexType,
            BlockBasedOptions,
            Cache,
            DBCompressionType,
            Options,
            Rdict,
            ReadOptions,
            SliceTransform,
            WriteBatch,
        )

        tuning = LsmSettings.parse(settings)
        self._write_batch = WriteBatch
        self.path = directory / "lsm"
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.increase_parallelism(2)
        # Two memtables of 16 MB. The indexes and bloom filters (10 bits a key) stay on the heap:
        # held in a block cache of 32 MB instead (cache_index_and_filter_blocks), they were
        # thrown out and read again at every seek, and the lease rounds at 1M went from 8 ms to
        # 210 (x0.11 of a fresh 100k's pages/s).
        options.set_write_buffer_size(16 * 1024 * 1024)
        options.set_max_write_buffer_number(2)
        # Uncompressed: at 10M the seeks and gets read blocks of files past the block cache, and
        # Snappy's unpacking of each made the page's CPU 165 µs against 103-119 without (pages/s
        # x0.71 of a fresh 100k's against x0.81-0.84), for 70 bytes per URL on disk against 188.
        if not tuning.compress:
            options.set_compression_type(DBCompressionType.none())
        cache = Cache((tuning.cache_mb or 32) * 1024 * 1024) if tuning.cache_mb or tuning.families else None

        def table(bloom_bits: int, block_kb: int) -> BlockBasedOptions:
            made = BlockBasedOptions()
            if bloom_bits:
                made.set_bloom_filter(bloom_bits, False)
            made.set_block_size(block_kb * 1024)
            if cache is not None:  # one cache for every family (each would make its own of 32 MB)
                made.set_block_cache(cache)
            if tuning.partitioned:  # indexes and filters in partitions, through the block cache
                made.set_index_type(BlockBasedIndexType.two_level_index_search())
                made.set_partition_filters(True)
                made.set_cache_index_and_filter_blocks(True)
                made.set_pin_top_level_index_and_filter(True)
                made.set_pin_l0_filter_and_index_blocks_in_cache(True)
            return made

        if not tuning.last_level_filters:
            options.set_optimize_filters_for_hits(True)
        options.set_block_based_table_factory(table(tuning.bloom_bits, tuning.queue_block_kb if tuning.families
                                                    else tuning.block_kb))
        options.set_prefix_extractor(SliceTransform.create_fixed_prefix(PREFIX))
        options.set_memtable_prefix_bloom_ratio(0.1)
        families: dict[str, Options] = {}
        if tuning.families:
            # A whole-key filter on the queue's keys is never asked (a lease seeks a host's
            # prefix), so point gets go to a family whose filter is theirs alone; the queue
            # family keeps the prefix filter. The memtables of all three share one budget.
            options.set_db_write_buffer_size(32 * 1024 * 1024)
            options.create_missing_column_families(True)
            for name, bloom_bits, block_kb in (("points", tuning.points_bloom_bits, tuning.block_kb),
                                               ("finished", 0, 16)):
                family = Options(raw_mode=True)
                family.set_write_buffer_size(8 * 1024 * 1024)
                family.set_max_write_buffer_number(2)
                if not tuning.compress:
                    family.set_compression_type(DBCompressionType.none())
                family.set_block_based_table_factory(table(bloom_bits, block_kb))
                if name == "points" and not tuning.points_last_level_filters:
                    family.set_optimize_filters_for_hits(True)
                families[name] = family
        self._host_reads = ReadOptions()
        self._host_reads.set_prefix_same_as_start(True)
        self._ordered_reads = ReadOptions()  # across hosts (the turns' cursor)
        self._ordered_reads.set_total_order_seek(True)
        # Where each active host's next lease starts: past the rows it finished, whose deletes
        # stay in the tree as tombstones until a compaction drops them, and a seek from the
        # host's first key would step over every one (the lease rounds at 10M were x3.5).
        self._resume: dict[str, bytes] = {}
        self.db = Rdict(str(self.path), options, column_families=families or None)
        # where the seen-set and counts are (`_points`) and finished rows go (`_finished_cf`,
        # None: the default family, with the queue)
        self._points = self.db.get_column_family("points") if families else self.db
        self._points_cf = self.db.get_column_family_handle("points") if families else None
        self._finished_cf = self.db.get_column_family_handle("finished") if families else None
        self._families = [self.db, self._points, self.db.get_column_family("finished")] if families else [self.db]
        self._batch = WriteBatch(raw_mode=True)

    def _left(self, host: str) -> None:
        self._resume.pop(host, None)

    def _order(self, host: str) -> object:
        return self._host_prefix(host) if host else b""

    def _commit(self) -> None:
        if not self._batch.is_empty():
            self.db.write(self._batch)
            self._batch = self._write_batch(raw_mode=True)

    @staticmethod
    def _host_prefix(host: str) -> bytes:
        name = host.encode()
        return b"q" + hashlib.blake2b(name, digest_size=PREFIX - 1).digest() + name + b"\x00"

    def _queue_key(self, host: str, priority: int, row_id: int) -> bytes:
        return self._host_prefix(host) + struct.pack(">IQ", 0x7FFFFFFF - priority, row_id)

    def _insert(self, fresh: list[UrlEntry]) -> list[tuple[int, UrlEntry]]:
        by_key = {b"s" + struct.pack(">q", url_hash(entry.url)): entry for entry in fresh}
        keys = list(by_key)
        found = self._points.get(keys)
        added = [by_key[key] for key, value in zip(keys, found, strict=True) if value is None]
        rows = list(zip(self._ids(len(added)), added, strict=True))
        batch = self._batch
        now = time.time()
        new_keys = [key for key, value in zip(keys, found, strict=True) if value is None]
        for (row_id, entry), key in zip(rows, new_keys, strict=True):
            batch.put(key, b"", self._points_cf)
            queue_key = self._queue_key(entry.host, entry.priority, row_id)
            batch.put(queue_key, msgpack.packb((entry.url, entry.depth, entry.via, 0, now)))
            resume = self._resume.get(entry.host)
            if resume is not None and queue_key < resume:
                del self._resume[entry.host]  # a URL ahead of where the host's leases got to
        per_host: dict[str, int] = {}
        for _, entry in rows:
            per_host[entry.host] = per_host.get(entry.host, 0) + 1
        host_keys = [b"h" + host.encode() for host in per_host]
        for key, count, value in zip(host_keys, per_host.values(), self._points.get(host_keys), strict=True):
            batch.put(key, struct.pack(">Q", count + (struct.unpack(">Q", value)[0] if value else 0)), self._points_cf)
        return rows

    def _read(self, host: str, n: int, skip: set[int]) -> list[Lease]:
        prefix = self._host_prefix(host)
        leases: list[Lease] = []
        iterator = self.db.iter(self._host_reads)
        # every row before the resume key is finished (a tombstone) or leased (in `skip`)
        iterator.seek(self._resume.get(host, prefix))
        while iterator.valid() and len(leases) < n:
            key = iterator.key()
            if not key.startswith(prefix):
                break
            inverted, row_id = struct.unpack(">IQ", key[len(prefix):])
            if row_id not in skip:
                url, depth, via, attempts, enqueued_at = msgpack.unpackb(iterator.value())
                priority = 0x7FFFFFFF - inverted
                leases.append(Lease(row_id, url, host, depth, priority, attempts + 1, 0, via=via))
                self._batch.put(key, msgpack.packb((url, depth, via, attempts + 1, enqueued_at)))
                self._resume[host] = key
            iterator.next()
        del iterator
        return leases

    def _finish(self, leases: list[Lease]) -> None:
        now = time.time()
        for lease in leases:
            self._batch.delete(self._queue_key(lease.host, lease.priority, lease.id))
            self._batch.put(b"f" + struct.pack(">Q", lease.id), msgpack.packb((lease.url, lease.host, 2, now)),
                            self._finished_cf)

    def _count(self, host: str) -> int:
        prefix = self._host_prefix(host)
        iterator = self.db.iter(self._host_reads)
        iterator.seek(prefix)
        count = 0
        while iterator.valid() and iterator.key().startswith(prefix):
            count += 1
            iterator.next()
        return count

    def _next_host(self, after: str) -> str | None:
        """The host of the next queue key after `after`'s (in the order of the hosts' hashes;
        the round robin of bench/scale.py only needs an order that wraps)."""
        iterator = self.db.iter(self._ordered_reads)
        iterator.seek(self._host_prefix(after)[:-1] + b"\x01" if after else b"q")
        if not iterator.valid():
            return None
        key = iterator.key()
        if not key.startswith(b"q"):
            return None
        return key[PREFIX:key.index(b"\x00", PREFIX)].decode()

    def memory_mb(self) -> dict[str, float]:
        """What RocksDB holds in memory: the indexes and filters of its files (on the heap
        unless `partitioned`), its memtables, its block cache."""
        def megabytes(name: str, families: list) -> float:
            return sum(family.property_int_value(f"rocksdb.{name}") or 0 for family in families) / 1e6
        per_family = {}
        if len(self._families) > 1:
            per_family = {f"table_readers_{name}": megabytes("estimate-table-readers-mem", [family])
                          for name, family in zip(("queue", "points", "finished"), self._families, strict=True)}
        return {"table_readers": megabytes("estimate-table-readers-mem", self._families), **per_family,
                "memtables": megabytes("cur-size-all-mem-tables", self._families),
                "block_cache": megabytes("block-cache-usage", self._families[:1])}

    def close(self) -> None:
        self._commit()
        self.db.close()


def open_layout(name: str, directory: Path, *, resident_hosts: int, settings: Sequence[str] = ()) -> _Prototype:
    """`settings`: NAME=VALUE of the lsm layout's LsmSettings (bench/scale.py --pragma)."""
    if name == "clustered":
        return ClusteredFrontier(directory, resident_hosts)
    if name == "lsm":
        return LsmFrontier(directory, resident_hosts, settings)
    raise ValueError(f"layout must be one of {LAYOUTS}, got {name!r}")
