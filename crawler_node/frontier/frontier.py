"""Durable per-host frontier: the exact URL-seen set, per-host queues, priorities and leases.

Everything per URL lives in SQLite (WAL, synchronous=NORMAL: a commit survives a SIGKILL of the
process, not a power cut). Python memory holds one small `HostQueue` per host and nothing per
URL, so memory grows with hosts, not with URLs; SQLite's page cache is bounded explicitly.

Threading: the class is synchronous and single-threaded on purpose. The node owns one worker
thread for it (a one-worker executor) and calls it only from there, so the event loop never
blocks on disk and SQLite never sees concurrent use of the connection.

Leases: `lease()` hands out rows (lease id == row id) and marks them leased with an expiry. A
lease that is neither finished nor returned goes back to the queue at expiry or at the next
open, so a crashed worker or a crashed process never holds work forever (at-least-once).
The outstanding leases are also kept in memory (id -> host record, expiry): they are bounded
by what the node holds in flight, and they spare the database an index of leased rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from crawler_node.core.shedding import ARRIVED_WHILE_SHEDDING, QUEUE_OVER_HIGH_WATER

FRONTIER_FILENAME = "frontier.sqlite3"

# Row states. They appear as literals in the SQL below because SQLite only uses a partial
# index when the query's WHERE clause repeats the index's condition literally.
QUEUED = 0
LEASED = 1
DONE = 2
FAILED = 3
DEFERRED = 4  # parked by load shedding: in the seen-set, not leased, restored later
_UNKNOWN_ROW = ("", -1)  # (host, state) of an id that matches no row

# Negative = KiB: bounds the page cache (~8 MB) whatever the size of the database.
CACHE_SIZE_KIB = -8000
RECENT_URLS = 32_768  # URLs remembered as rows (RecentUrls): about 8 MB at 60-char URLs
# Pages of a new database (an existing one keeps its own). A commit writes every page it dirtied
# to the WAL, and a batch dirties pages all over: the rows it leases or finishes, a seen-set
# leaf per new URL, a queue leaf per host. Smaller pages write fewer bytes for the same rows.
# Measured on a 20k-page crawl: 2 KiB costs ~7% less CPU than 4 KiB; 1 KiB no less than 2 KiB.
PAGE_SIZE_BYTES = 2048
# Checkpoint every ~32 MB of WAL rather than SQLite's default ~4 MB: a page that many commits
# dirty (the rightmost leaf of a busy host's queue) is then copied into the database once, not
# once per commit. Measured: about a third less time per add at 1M URLs.
WAL_AUTOCHECKPOINT_BYTES = 32 * 1024 * 1024
# Keeps the WAL file from staying huge on disk after a burst of writes.
JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
# Parameters per statement stay well below SQLite's limit (999 before 3.32): an `IN (...)`
# list holds at most this many values (a power of two: lists are padded to one, see
# _in_lists), and a batch insert at most 32 rows of 8.
IN_LIST_MAX = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    -- AUTOINCREMENT: an id is a lease's handle and is never given to another URL, even after
    -- its row is handed to another node (a late outcome for it then finds nothing to change)
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL UNIQUE,        -- the UNIQUE index is the exact URL-seen set
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    state INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    lease_expires REAL,
    enqueued_at REAL NOT NULL
);
-- Leasing walks this in order; not_before rides along so waiting rows are skipped in the index.
CREATE INDEX IF NOT EXISTS urls_ready ON urls(host, priority DESC, id, not_before)
    WHERE state = 0;
-- Leased rows are found through Frontier._leases; databases made before that lose the index.
DROP INDEX IF EXISTS urls_leased;
-- Makes the oldest queued age a single index probe instead of a scan.
CREATE INDEX IF NOT EXISTS urls_age ON urls(enqueued_at) WHERE state = 0;
-- Deferred rows come back per host, highest priority first; only deferred rows pay for this.
CREATE INDEX IF NOT EXISTS urls_deferred ON urls(host, priority DESC, id) WHERE state = 4;
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL
) WITHOUT ROWID;
-- URLs on their way to another node, kept until that node acknowledges them (cluster).
-- seen = 1: already fetched here; the new owner only records it in its seen-set.
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused (outbox_ack matches the URL as well)
    peer TEXT NOT NULL,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    seen INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_peer ON outbox(peer, id);
-- URLs a neighbour on the ring has fetched, kept by its successor: if the neighbour dies and
-- its hosts come here, these are not fetched a second time.
CREATE TABLE IF NOT EXISTS replica (
    url TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

# ON CONFLICT(url) rather than INSERT OR IGNORE: only a seen URL is skipped; a malformed
# entry (NULL url) still fails the batch instead of silently counting as a duplicate.
# Many rows per statement: one statement per row cost more than the row itself.
_INSERT_ROW = "(?, ?, ?, ?, ?, ?, 0, ?, ?)"  # url, host, depth, priority, hops, state, not_before, now
_INSERT_ROW_PARAMS = _INSERT_ROW.count("?")
# Statement sizes in rows: a batch is cut into these, so a few statement texts serve every
# batch size (each one is compiled once and then reused from the connection's cache).
_INSERT_CHUNKS = (32, 16, 8, 4, 2, 1)


def _insert_sql(rows: int) -> str:
    return (
        "INSERT INTO urls (url, host, depth, priority, hops, state, attempts, not_before, enqueued_at)"
        f" VALUES {', '.join([_INSERT_ROW] * rows)} ON CONFLICT(url) DO NOTHING"
    )


_INSERT_SQL = {rows: _insert_sql(rows) for rows in _INSERT_CHUNKS}
# Load shedding: the lowest priority first, and among equals the newest (the deepest links
# of the latest pages) first. Seeds are protected by the caller's priority bound.
_DEFER_SQL = """
UPDATE urls SET state = 4
WHERE id IN (
    SELECT id FROM urls WHERE state = 0 AND priority < ?
    ORDER BY priority ASC, id DESC
    LIMIT ?
)
RETURNING host, priority
"""
_RESTORE_SQL = """
UPDATE urls SET state = 0
WHERE id IN (SELECT id FROM urls WHERE host = ? AND state = 4 ORDER BY priority DESC, id LIMIT ?)
"""
# Leasing reads the rows in lease order, then marks them by id. Cheaper than one UPDATE ...
# RETURNING, whose rows come back in no particular order and cost a copy each.
_LEASE_SELECT_SQL = """
SELECT id, url, depth, priority, attempts, hops FROM urls
WHERE host = ? AND state = 0 AND not_before <= ?
ORDER BY priority DESC, id
LIMIT ?
"""
_LEASE_UPDATE_SQL = "UPDATE urls SET state = 1, attempts = attempts + 1, lease_expires = ? WHERE id IN ({})"
_EXPORT_SQL = """
SELECT id, url, host, depth, priority, hops FROM urls
WHERE host = ? AND state = 0
ORDER BY priority DESC, id
LIMIT ?
"""


@dataclass(slots=True)
class UrlEntry:
    """A URL to crawl; `url` is already normalised. Higher priority is leased sooner."""

    url: str
    host: str
    depth: int = 0
    priority: int = 0
    hops: int = 0


@dataclass(slots=True)
class Lease:
    """One leased URL. `attempts` counts this attempt (1 on the first lease)."""

    id: int
    url: str
    host: str
    depth: int
    priority: int
    attempts: int
    hops: int


@dataclass(slots=True)
class HostQueue:
    """The in-memory record of one host. `queued` includes URLs waiting for a retry time."""

    host: str
    queued: int = 0
    leased: int = 0
    next_eligible: float = 0.0
    done: int = 0
    failed: int = 0
    deferred: int = 0


@dataclass(slots=True)
class AddResult:
    accepted: list[UrlEntry]  # new to the seen-set: queued, or deferred by load shedding
    duplicates: int
    deferred: list[UrlEntry] = field(default_factory=list)  # the accepted ones parked on arrival

    @property
    def queued(self) -> list[UrlEntry]:
        """The accepted URLs that went into the queue (work for the scheduler now)."""
        if not self.deferred:
            return self.accepted
        parked = {id(entry) for entry in self.deferred}
        return [entry for entry in self.accepted if id(entry) not in parked]


@dataclass(slots=True)
class FrontierBatch:
    """Outcomes collected by the node, applied by `Frontier.apply` in one transaction."""

    done: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    retry: list[tuple[int, float]] = field(default_factory=list)  # (lease id, not_before)
    returned: list[int] = field(default_factory=list)  # never attempted: attempt not counted
    # refused before reaching the site (a fetch-through API's limit): back to the queue
    # until not_before, the attempt not counted, so the retry budget is not spent on it
    postponed: list[tuple[int, float]] = field(default_factory=list)
    add: list[UrlEntry] = field(default_factory=list)
    forward: list[tuple[str, UrlEntry]] = field(default_factory=list)  # (peer, url) to the outbox
    replicate: list[tuple[str, UrlEntry]] = field(default_factory=list)  # fetched here: tell the successor

    def __len__(self) -> int:
        return (
            len(self.done) + len(self.failed) + len(self.retry) + len(self.returned)
            + len(self.postponed) + len(self.add) + len(self.forward)
        )


class RecentUrls:
    """URLs known to be rows of the frontier, the most recent ones only: most discovered
    links are duplicates of URLs seen moments ago (the same navigation on every page), and
    answering those from memory saves a database statement each. Exact, never probabilistic:
    a URL is here only while its row is committed. Two generations of at most
    ``capacity / 2`` each bound the memory; a full young generation becomes the old one."""

    def __init__(self, capacity: int) -> None:
        self._half = max(1, capacity // 2)
        self._young: set[str] = set()
        self._old: set[str] = set()

    def __contains__(self, url: str) -> bool:
        return url in self._young or url in self._old

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def unknown(self, entries: Iterable[UrlEntry]) -> list[UrlEntry]:
        """The entries whose URL is not remembered here, in order (the hot path of `add`)."""
        young, old = self._young, self._old
        return [entry for entry in entries if entry.url not in young and entry.url not in old]

    def update(self, urls: Iterable[str]) -> None:
        young = self._young
        for url in urls:
            young.add(url)
            if len(young) >= self._half:
                self._old, self._young = young, set()
                young = self._young

    def clear(self) -> None:
        self._young.clear()
        self._old.clear()


class Frontier:
    """The durable frontier of one node. Synchronous; use from a single thread."""

    def __init__(
        self,
        path: Path,
        *,
        lease_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        recent_urls: int = RECENT_URLS,
    ) -> None:
        """Open (or create) the frontier at `path`, a database file or a data directory.

        Leases left by a previous run return to the queue, their attempts kept.
        """
        if lease_timeout_s <= 0:
            raise ValueError(f"lease_timeout_s must be > 0, got {lease_timeout_s}")
        path = Path(path)
        if path.is_dir():
            path = path / FRONTIER_FILENAME
        self.path = path
        self._lease_timeout_s = lease_timeout_s
        self._clock = clock
        self._hosts: dict[str, HostQueue] = {}
        # Hosts with queued > 0, kept apart so the scheduler never scans idle hosts.
        self._hosts_with_work: dict[str, HostQueue] = {}
        self._state_totals = [0, 0, 0, 0, 0]  # indexed by state
        # Load shedding: while set, new URLs at or below this priority are parked on arrival.
        self._shed_cut: int | None = None
        self.shed_counts: Counter[str] = Counter()  # deferrals by reason, and restores
        self._dirty_next_eligible: set[str] = set()
        self._outbox_counts: dict[str, int] = {}
        self._recent = RecentUrls(recent_urls)
        self._recent_pending: list[str] = []  # known once the transaction that saw them commits
        # Every row in state LEASED: id -> (its host's record, lease_expires as stored).
        self._leases: dict[int, tuple[HostQueue, float]] = {}
        self._conn: sqlite3.Connection | None = self._open(path)
        self._has_replica = self._conn.execute("SELECT 1 FROM replica LIMIT 1").fetchone() is not None
        self._recover_leases()
        self._load_hosts()

    # -- opening -------------------------------------------------------------------------

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created on the caller's thread, used on the frontier's worker thread: never both.
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one per public call.
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE_BYTES}")  # before WAL: it fixes the size
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        # A statement that changes many rows (a batch insert, a lease) keeps a statement journal
        # to undo itself on error: in a temp file, that is a file and a write per page it
        # changes, a quarter of the frontier's CPU. Sorts stay small (LIMITed or on an index).
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA cache_size = {CACHE_SIZE_KIB}")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_BYTES // page_size}")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT_BYTES}")
        conn.executescript(_SCHEMA)
        return conn

    def _recover_leases(self) -> None:
        # Leases cannot outlive the process that held them: whoever held them is gone. A scan
        # of the table (no index of leased rows), as _load_counts makes anyway.
        with self._transaction(rebuild_on_error=False):
            self._conn.execute(
                "UPDATE urls SET state = 0, lease_expires = NULL WHERE state = 1"
            )

    def _load_hosts(self) -> None:
        for host, next_eligible in self._conn.execute("SELECT host, next_eligible FROM hosts"):
            self._host_record(host).next_eligible = next_eligible
        self._load_counts()

    def _load_counts(self) -> None:
        """Rebuild every counter from the database (at open, and after a failed transaction)."""
        for record in self._hosts.values():
            record.queued = record.leased = record.done = record.failed = record.deferred = 0
        self._hosts_with_work.clear()
        self._state_totals = [0, 0, 0, 0, 0]
        # A full scan, but only at open: counters are then kept incrementally. Counted here
        # rather than with GROUP BY, whose sorter held ~60 MB at 1M rows; this holds O(hosts).
        counted = Counter(self._conn.execute("SELECT host, state FROM urls"))
        for (host, state), count in counted.items():
            self._count(self._host_record(host), state, count)
        self._outbox_counts = dict(self._conn.execute("SELECT peer, COUNT(*) FROM outbox GROUP BY peer"))

    def _load_leases(self) -> None:
        """Rebuild the in-memory leases from the database (after a failed transaction)."""
        self._leases = {
            row_id: (self._host_record(host), lease_expires)
            for row_id, host, lease_expires in self._conn.execute(
                "SELECT id, host, lease_expires FROM urls WHERE state = 1")
        }

    # -- adding --------------------------------------------------------------------------

    def add(self, entries: Iterable[UrlEntry], *, not_before: float = 0.0) -> AddResult:
        """Queue the URLs never seen before, in one transaction; the rest are duplicates."""
        batch = list(entries)
        with self._transaction():
            return self._insert(batch, not_before)

    def _insert(self, entries: Sequence[UrlEntry], not_before: float) -> AddResult:
        # A URL in RecentUrls is a row already: a duplicate without asking the database.
        fresh = self._recent.unknown(entries)
        replicated: list[UrlEntry] = []
        if self._has_replica and fresh:
            fetched_by_neighbour = self._in_replica([entry.url for entry in fresh])
            if fetched_by_neighbour:
                replicated = [entry for entry in fresh if entry.url in fetched_by_neighbour]
                fresh = [entry for entry in fresh if entry.url not in fetched_by_neighbour]
        cut = self._shed_cut
        now = self._clock()
        params: list[object] = []
        for entry in fresh:
            state = DEFERRED if cut is not None and entry.priority <= cut else QUEUED
            params += (entry.url, entry.host, entry.depth, entry.priority, entry.hops, state, not_before, now)
        accepted = fresh
        if fresh:
            # Ids only grow (AUTOINCREMENT), so the rows this insert makes are those above it.
            highest_id = self._conn.execute("SELECT MAX(id) FROM urls").fetchone()[0] or 0
            inserted = 0
            start = 0
            for rows in _chunk_sizes(len(fresh)):
                end = start + rows * _INSERT_ROW_PARAMS
                inserted += self._conn.execute(_INSERT_SQL[rows], params[start:end]).rowcount
                start = end
            if inserted < len(fresh):
                # Some were rows older than RecentUrls remembers, or listed twice: ask which
                # are new rather than have every insert return its rows (RETURNING costs a
                # copy per row, and this case is rare).
                new_urls = {url for (url,) in self._conn.execute(
                    "SELECT url FROM urls WHERE id > ?", (highest_id,))}
                accepted = []
                for entry in fresh:
                    if entry.url in new_urls:
                        new_urls.discard(entry.url)  # a later copy of it in this batch is a duplicate
                        accepted.append(entry)
        self._recent_pending += [entry.url for entry in fresh]  # rows now, new or not
        deferred = [entry for entry in accepted if entry.priority <= cut] if cut is not None else []
        for host, count in Counter(entry.host for entry in accepted).items():
            self._count(self._host_record(host), QUEUED, count)
        if deferred:
            for host, count in Counter(entry.host for entry in deferred).items():
                record = self._host_record(host)
                self._count(record, QUEUED, -count)
                self._count(record, DEFERRED, count)
            self.shed_counts[ARRIVED_WHILE_SHEDDING] += len(deferred)
        if replicated:
            self._mark_seen(replicated)
        return AddResult(accepted=accepted, duplicates=len(entries) - len(accepted), deferred=deferred)

    def _in_replica(self, urls: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for placeholders, chunk in _in_lists(urls):
            found.update(url for (url,) in self._conn.execute(
                f"SELECT url FROM replica WHERE url IN ({placeholders})", chunk))
        return found

    def replica_add(self, urls: Sequence[str]) -> int:
        """Remember URLs a neighbour fetched (see the replica table)."""
        with self._transaction():
            cursor = self._conn.executemany(
                "INSERT INTO replica (url) VALUES (?) ON CONFLICT(url) DO NOTHING", [(u,) for u in urls]
            )
        self._has_replica = self._has_replica or bool(urls)
        return cursor.rowcount

    # -- leasing -------------------------------------------------------------------------

    def lease(self, host: str, n: int) -> tuple[list[Lease], float | None]:
        """Lease up to n eligible URLs of `host`, highest priority first, then FIFO.

        Returns (leases, next_ready_at). next_ready_at is set only when the host has queued
        URLs but none is eligible yet: the earliest not_before among them. Finding it walks
        the host's queue, so a caller should not ask again before that time.
        """
        return self.lease_many([(host, n)])[0]

    def lease_many(self, requests: Sequence[tuple[str, int]]) -> list[tuple[list[Lease], float | None]]:
        """`lease` for several hosts in one transaction (the dispatcher refills many at once)."""
        now = self._clock()
        wanted = [(host, n, self._hosts.get(host)) for host, n in requests]
        if not any(n > 0 and record is not None and record.queued for _, n, record in wanted):
            return [([], None) for _ in requests]
        expires = now + self._lease_timeout_s
        results: list[tuple[list[Lease], float | None]] = []
        # The rows picked for every host are marked leased by one statement at the end.
        picked: list[int] = []
        picked_hosts: set[str] = set()
        with self._transaction():
            for host, n, record in wanted:
                if host in picked_hosts:  # asked twice: mark the first pick, or it is picked again
                    self._mark_leased(picked, expires)
                    picked, picked_hosts = [], set()
                picked_hosts.add(host)
                leases, next_ready_at = self._lease(host, n, record, now, expires)
                picked += [lease.id for lease in leases]
                results.append((leases, next_ready_at))
            self._mark_leased(picked, expires)
        return results

    def _lease(
        self, host: str, n: int, record: HostQueue | None, now: float, expires: float,
    ) -> tuple[list[Lease], float | None]:
        """Pick the host's next rows and count them leased; the caller marks them."""
        if n <= 0 or record is None or record.queued == 0:
            return [], None
        rows = self._conn.execute(_LEASE_SELECT_SQL, (host, now, n)).fetchall()
        if not rows:
            return [], self._next_ready_at(host)
        self._count(record, QUEUED, -len(rows))
        self._count(record, LEASED, len(rows))
        # attempts + 1: this attempt, which _mark_leased counts in the row
        leases = [
            Lease(row_id, url, host, depth, priority, attempts + 1, hops)
            for row_id, url, depth, priority, attempts, hops in rows
        ]
        self._leases.update(dict.fromkeys([lease.id for lease in leases], (record, expires)))
        return leases, None

    def _mark_leased(self, ids: Sequence[int], expires: float) -> None:
        for placeholders, chunk in _in_lists(ids):
            self._conn.execute(_LEASE_UPDATE_SQL.format(placeholders), [expires, *chunk])

    def _next_ready_at(self, host: str) -> float | None:
        row = self._conn.execute(
            "SELECT MIN(not_before) FROM urls WHERE host = ? AND state = 0", (host,)
        ).fetchone()
        return row[0]

    def expire_leases(self) -> int:
        """Return every lease past its expiry to the queue (the attempt stays counted)."""
        now = self._clock()
        expired = [row_id for row_id, (_, expires) in self._leases.items() if expires <= now]
        with self._transaction():
            self._conn.executemany(
                "UPDATE urls SET state = 0, lease_expires = NULL WHERE id = ?",
                [(row_id,) for row_id in expired],
            )
            for row_id in expired:
                record, _ = self._leases.pop(row_id)
                self._count(record, LEASED, -1)
                self._count(record, QUEUED, 1)
        return len(expired)

    # -- outcomes ------------------------------------------------------------------------

    def apply(self, batch: FrontierBatch) -> AddResult:
        """Apply a batch of outcomes and discovered URLs in ONE transaction (the hot path).

        done/failed finish a row that is leased or back in the queue after its lease expired
        (the fetch happened; no need to repeat it). retry/returned only touch rows still
        leased: anything else means the lease was lost and someone else owns the URL now.
        Unknown ids are ignored.
        """
        retry_at = dict(batch.retry)
        postponed_to = dict(batch.postponed)
        ids = [*batch.done, *batch.failed, *retry_at, *batch.returned, *postponed_to]
        with self._transaction():
            states = self._states(ids)
            finishable = (QUEUED, LEASED)
            done = self._transition(states, batch.done, finishable, DONE)
            failed = self._transition(states, batch.failed, finishable, FAILED)
            retry = self._transition(states, retry_at, (LEASED,), QUEUED)
            returned = self._transition(states, batch.returned, (LEASED,), QUEUED)
            postponed = self._transition(states, postponed_to, (LEASED,), QUEUED)
            executemany = self._conn.executemany
            if postponed:
                executemany(
                    "UPDATE urls SET state = 0, lease_expires = NULL, not_before = ?,"
                    " attempts = MAX(attempts - 1, 0) WHERE id = ?",
                    [(postponed_to[row_id], row_id) for row_id in postponed],
                )
            for placeholders, chunk in _in_lists(done):
                self._conn.execute(
                    f"UPDATE urls SET state = 2, lease_expires = NULL WHERE id IN ({placeholders})", chunk)
            for placeholders, chunk in _in_lists(failed):
                self._conn.execute(
                    f"UPDATE urls SET state = 3, lease_expires = NULL WHERE id IN ({placeholders})", chunk)
            if retry:
                executemany(
                    "UPDATE urls SET state = 0, lease_expires = NULL, not_before = ? WHERE id = ?",
                    [(retry_at[row_id], row_id) for row_id in retry],
                )
            for placeholders, chunk in _in_lists(returned):
                self._conn.execute(
                    "UPDATE urls SET state = 0, lease_expires = NULL, attempts = MAX(attempts - 1, 0)"
                    f" WHERE id IN ({placeholders})", chunk)
            self._outbox_insert(batch.forward)
            self._outbox_insert(batch.replicate, seen=True)
            return self._insert(batch.add, 0.0)

    def _states(self, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """id -> (host, state) for the ids that exist: leased ones from memory, the rest (a
        lease that expired, an id handed to another node) from the database."""
        leases = self._leases
        states = {row_id: (lease[0].host, LEASED) for row_id in ids if (lease := leases.get(row_id))}
        if len(states) < len(ids):
            states.update(self._load_states([row_id for row_id in ids if row_id not in states]))
        return states

    def _load_states(self, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """id -> (host, state) for the ids that exist, in chunks of bounded size."""
        states: dict[int, tuple[str, int]] = {}
        for placeholders, chunk in _in_lists(list(dict.fromkeys(ids))):
            rows = self._conn.execute(
                f"SELECT id, host, state FROM urls WHERE id IN ({placeholders})", chunk
            )
            for row_id, host, state in rows:
                states[row_id] = (host, state)
        return states

    def _transition(
        self,
        states: dict[int, tuple[str, int]],
        ids: Iterable[int],
        allowed_from: tuple[int, ...],
        new_state: int,
    ) -> list[int]:
        """Move counters for the ids whose current state allows it; return those ids.

        `states` is updated as we go, so an id listed twice in one batch moves only once.
        """
        moved: list[int] = []
        moves: Counter[tuple[str, int]] = Counter()  # (host, from state) -> rows
        for row_id in ids:
            host, state = states.get(row_id, _UNKNOWN_ROW)
            if state not in allowed_from:
                continue
            if state == LEASED:
                del self._leases[row_id]
            states[row_id] = (host, new_state)
            moved.append(row_id)
            moves[host, state] += 1
        for (host, state), count in moves.items():
            record = self._host_record(host)
            self._count(record, state, -count)
            self._count(record, new_state, count)
        return moved

    # -- per-host records ----------------------------------------------------------------

    def set_next_eligible(self, host: str, when: float) -> None:
        """Set when `host` may be fetched next: in memory now, on disk at the next commit."""
        self._host_record(host).next_eligible = when
        self._dirty_next_eligible.add(host)

    def host(self, host: str) -> HostQueue | None:
        """A snapshot of the host's record (a copy: the live one belongs to the frontier)."""
        record = self._hosts.get(host)
        return None if record is None else _snapshot(record)

    def hosts_with_work(self) -> Iterator[HostQueue]:
        """Snapshots of the hosts that have queued URLs (eligible now or later)."""
        return iter([_snapshot(record) for record in self._hosts_with_work.values()])

    def totals(self) -> dict[str, int | float]:
        queued, leased, done, failed, deferred = self._state_totals
        return {
            "queued": queued,
            "leased": leased,
            "done": done,
            "failed": failed,
            "deferred": deferred,
            "hosts": len(self._hosts),
            "hosts_with_work": len(self._hosts_with_work),
            "oldest_queued_age_s": self._oldest_queued_age_s(),
        }

    def _oldest_queued_age_s(self) -> float:
        # One probe of the urls_age index. The age counts from first enqueue, so a URL
        # waiting for its retry keeps ageing: it is still work not done.
        row = self._conn.execute("SELECT MIN(enqueued_at) FROM urls WHERE state = 0").fetchone()
        return 0.0 if row[0] is None else max(0.0, self._clock() - row[0])

    # -- load shedding (see shedding.py for the policy) ------------------------------------

    def defer_lowest(self, n: int, *, below_priority: int) -> Counter[str]:
        """Park the ``n`` lowest-priority queued URLs (newest first among equals) whose
        priority is below ``below_priority``; from now on, new URLs at or below the highest
        priority parked are parked on arrival too. Returns the parked count per host."""
        if n <= 0:
            return Counter()
        with self._transaction():
            rows = self._conn.execute(_DEFER_SQL, (below_priority, n)).fetchall()
            per_host = Counter(host for host, _ in rows)
            for host, count in per_host.items():
                record = self._host_record(host)
                self._count(record, QUEUED, -count)
                self._count(record, DEFERRED, count)
        if rows:
            highest = max(priority for _, priority in rows)
            self._shed_cut = highest if self._shed_cut is None else max(self._shed_cut, highest)
            self.shed_counts[QUEUE_OVER_HIGH_WATER] += len(rows)
        return per_host

    def stop_shedding(self) -> None:
        """New URLs are queued again whatever their priority."""
        self._shed_cut = None

    @property
    def shed_cut(self) -> int | None:
        return self._shed_cut

    def restore_deferred(self, n: int) -> Counter[str]:
        """Queue about ``n`` deferred URLs again, an equal share from every host that has some
        (each host's highest priority first): restored work spread over many hosts can be
        fetched in parallel, work from one host only at that host's pace. Returns the count
        per host."""
        hosts = [record for record in self._hosts.values() if record.deferred]
        if n <= 0 or not hosts:
            return Counter()
        share = -(-n // len(hosts))
        per_host: Counter[str] = Counter()
        with self._transaction():
            left = n
            for record in sorted(hosts, key=lambda r: -r.deferred):
                count = self._conn.execute(_RESTORE_SQL, (record.host, min(share, left))).rowcount
                if count:
                    per_host[record.host] = count
                    self._count(record, DEFERRED, -count)
                    self._count(record, QUEUED, count)
                    left -= count
                if left <= 0:
                    break
        self.shed_counts["restored"] += sum(per_host.values())
        return per_host

    # -- handing a host's queue to another node -------------------------------------------

    def export_queued(self, host: str, limit: int) -> list[tuple[int, UrlEntry]]:
        """The host's queued URLs in lease order, without changing them (phase 1 of handback)."""
        rows = self._conn.execute(_EXPORT_SQL, (host, limit)).fetchall()
        return [
            (row_id, UrlEntry(url=url, host=row_host, depth=depth, priority=priority, hops=hops))
            for row_id, url, row_host, depth, priority, hops in rows
        ]

    def forget(self, ids: Sequence[int]) -> int:
        """Delete rows entirely (phase 2, once the new owner has them): the URL may come back."""
        with self._transaction():
            states = self._load_states(ids)
            for row_id, (host, state) in states.items():
                self._count(self._host_record(host), state, -1)
                if state == LEASED:
                    del self._leases[row_id]
            self._conn.executemany(
                "DELETE FROM urls WHERE id = ?", [(row_id,) for row_id in states]
            )
        self._recent.clear()  # rows are gone: their URLs are new again
        return len(states)

    def take_host(self, host: str, limit: int) -> list[UrlEntry]:
        """Export and forget in one go, for a caller that needs no acknowledgement."""
        exported = self.export_queued(host, limit)
        self.forget([row_id for row_id, _ in exported])
        return [entry for _, entry in exported]

    # -- the outbox: URLs owed to other nodes, durable until acknowledged -------------------

    def outbox_put(self, items: Sequence[tuple[str, UrlEntry]], *, seen: bool = False) -> None:
        with self._transaction():
            self._outbox_insert(items, seen=seen)

    def outbox_peek(self, peer: str, n: int) -> list[tuple[int, UrlEntry, bool]]:
        rows = self._conn.execute(
            "SELECT id, url, host, depth, priority, hops, seen FROM outbox WHERE peer = ? ORDER BY id LIMIT ?",
            (peer, n),
        ).fetchall()
        return [(row[0], UrlEntry(row[1], row[2], row[3], row[4], row[5]), bool(row[6])) for row in rows]

    def outbox_ack(self, peer: str, sent: Sequence[tuple[int, str]]) -> int:
        """Remove what ``peer`` acknowledged: the (id, url) pairs of the batch it answered.

        By id alone is not enough. A row id is reused once the highest rows are deleted, and
        a peer that froze with a batch in hand may answer long after its rows were rerouted
        and new rows, never sent, took their ids: matching the URL and the peer too removes
        only what was delivered (a rerouted row that was delivered anyway is sent again)."""
        with self._transaction():
            cursor = self._conn.executemany(
                "DELETE FROM outbox WHERE id = ? AND peer = ? AND url = ?",
                [(row_id, peer, url) for row_id, url in sent])
            removed = cursor.rowcount
        self._outbox_counts[peer] = max(0, self._outbox_counts.get(peer, 0) - removed)
        return removed

    def outbox_counts(self) -> dict[str, int]:
        return {peer: n for peer, n in self._outbox_counts.items() if n}

    def outbox_reroute(self, peer: str, route: Callable[[str], str | None], limit: int = 5000) -> AddResult:
        """Re-decide where a peer's pending URLs go (it is down, or no longer the owner):
        ``route(host)`` names the new peer, or None for this node, which takes them in."""
        rows = self.outbox_peek(peer, limit)
        mine: list[UrlEntry] = []
        mine_seen: list[UrlEntry] = []
        moved: list[tuple[str, int]] = []
        for row_id, entry, seen in rows:
            target = route(entry.host)
            if target is None:
                (mine_seen if seen else mine).append(entry)
            if target != peer:
                moved.append((target, row_id))
        with self._transaction():
            self._conn.executemany("UPDATE outbox SET peer = ? WHERE id = ?",
                                   [(target, row_id) for target, row_id in moved if target is not None])
            self._conn.executemany("DELETE FROM outbox WHERE id = ?",
                                   [(row_id,) for target, row_id in moved if target is None])
            self._mark_seen(mine_seen)
            result = self._insert(mine, 0.0)
        for target, _ in moved:
            self._outbox_counts[peer] -= 1
            if target is not None:
                self._outbox_counts[target] = self._outbox_counts.get(target, 0) + 1
        return result

    def handoff_host(self, host: str, peer: str, limit: int = 5000) -> int:
        """Move a host this node no longer owns to ``peer``'s outbox in one transaction: its
        queued URLs to crawl, and its finished ones as seen, so the owner never repeats them.
        Leased rows stay until their fetch ends; call again later for those."""
        rows = self._conn.execute(
            "SELECT id, url, depth, priority, hops, state FROM urls WHERE host = ? AND state != ? LIMIT ?",
            (host, LEASED, limit),
        ).fetchall()
        if not rows:
            return 0
        record = self._host_record(host)
        with self._transaction():
            self._conn.executemany(
                "INSERT INTO outbox (peer, url, host, depth, priority, hops, seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(peer, url, host, depth, priority, hops, int(state not in (QUEUED, DEFERRED)))
                 for _, url, depth, priority, hops, state in rows],
            )
            self._conn.executemany("DELETE FROM urls WHERE id = ?", [(row[0],) for row in rows])
            for row in rows:
                self._count(record, row[5], -1)
        self._recent.clear()  # rows are gone: their URLs are new again
        self._outbox_counts[peer] = self._outbox_counts.get(peer, 0) + len(rows)
        return len(rows)

    def mark_seen(self, entries: Sequence[UrlEntry]) -> int:
        """Record URLs another node already fetched: new ones enter the seen-set as done, and
        queued copies here are finished without a fetch. Returns how many changed."""
        with self._transaction():
            return self._mark_seen(entries)

    def _mark_seen(self, entries: Sequence[UrlEntry]) -> int:
        changed = 0
        now = self._clock()
        for entry in entries:
            cursor = self._conn.execute(
                "INSERT INTO urls (url, host, depth, priority, hops, state, attempts, not_before, enqueued_at)"
                " VALUES (?, ?, ?, ?, ?, 2, 0, 0, ?) ON CONFLICT(url) DO NOTHING",
                (entry.url, entry.host, entry.depth, entry.priority, entry.hops, now),
            )
            if cursor.rowcount:
                self._count(self._host_record(entry.host), DONE, 1)
                changed += 1
                continue
            cursor = self._conn.execute(
                "UPDATE urls SET state = 2 WHERE url = ? AND state = 0 RETURNING host", (entry.url,)
            )
            row = cursor.fetchone()
            if row is not None:
                record = self._host_record(row[0])
                self._count(record, QUEUED, -1)
                self._count(record, DONE, 1)
                changed += 1
        return changed

    def host_hosts(self) -> list[HostQueue]:
        """Every host with any row (queued, leased or finished), for ownership sweeps."""
        return [_snapshot(record) for record in self._hosts.values()
                if record.queued or record.leased or record.done or record.failed]

    def _outbox_insert(self, items: Sequence[tuple[str, UrlEntry]], *, seen: bool = False) -> None:
        if not items:
            return
        self._conn.executemany(
            "INSERT INTO outbox (peer, url, host, depth, priority, hops, seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(peer, e.url, e.host, e.depth, e.priority, e.hops, int(seen)) for peer, e in items],
        )
        for peer, _ in items:
            self._outbox_counts[peer] = self._outbox_counts.get(peer, 0) + 1

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is None:
            return
        with self._transaction(rebuild_on_error=False):
            pass  # persists pending next_eligible values
        self._conn.close()
        self._conn = None

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, rebuild_on_error: bool = True) -> Iterator[None]:
        self._conn.execute("BEGIN")
        try:
            yield
            self._persist_next_eligible()
            self._conn.execute("COMMIT")
        except BaseException:
            self._recent_pending.clear()
            # Some errors (disk full, I/O) make SQLite roll back by itself already.
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            # Counters and leases were moved as rows were; the database is the truth to go back to.
            if rebuild_on_error:
                self._load_counts()
                self._load_leases()
            raise
        self._dirty_next_eligible.clear()
        if self._recent_pending:
            self._recent.update(self._recent_pending)
            self._recent_pending.clear()

    def _persist_next_eligible(self) -> None:
        if not self._dirty_next_eligible:
            return
        self._conn.executemany(
            "INSERT OR REPLACE INTO hosts (host, next_eligible) VALUES (?, ?)",
            [(host, self._hosts[host].next_eligible) for host in self._dirty_next_eligible],
        )

    def _host_record(self, host: str) -> HostQueue:
        record = self._hosts.get(host)
        if record is None:
            record = self._hosts[host] = HostQueue(host)
        return record

    def _count(self, record: HostQueue, state: int, delta: int) -> None:
        """Add `delta` rows in `state` to the host's record and to the totals."""
        self._state_totals[state] += delta
        if state == QUEUED:
            record.queued += delta
            if record.queued > 0:
                self._hosts_with_work[record.host] = record
            else:
                self._hosts_with_work.pop(record.host, None)
        elif state == LEASED:
            record.leased += delta
        elif state == DONE:
            record.done += delta
        elif state == DEFERRED:
            record.deferred += delta
        else:
            record.failed += delta


def _in_lists(values: Sequence[object]) -> Iterator[tuple[str, list[object]]]:
    """`values` as (placeholders, parameters) for `IN (...)` lists of at most IN_LIST_MAX.

    Each list is padded to a power of two with copies of its last value, which IN ignores:
    a few statement texts then serve every length, each compiled once and reused from the
    connection's statement cache instead of compiled anew for each new length."""
    for start in range(0, len(values), IN_LIST_MAX):
        chunk = list(values[start:start + IN_LIST_MAX])
        size = 1 << (len(chunk) - 1).bit_length()
        chunk += [chunk[-1]] * (size - len(chunk))
        yield _PLACEHOLDERS[size], chunk


_PLACEHOLDERS = {1 << bits: ",".join("?" * (1 << bits)) for bits in range(IN_LIST_MAX.bit_length())}


def _chunk_sizes(rows: int) -> Iterator[int]:
    """Cut `rows` into sizes from _INSERT_CHUNKS, largest first."""
    for size in _INSERT_CHUNKS:
        while rows >= size:
            yield size
            rows -= size


def _snapshot(record: HostQueue) -> HostQueue:
    # Spelled out: 7x faster than dataclasses.replace, and the node snapshots every host
    # with work each time it schedules.
    return HostQueue(record.host, record.queued, record.leased, record.next_eligible,
                     record.done, record.failed, record.deferred)
