"""The durable frontier of one node: the exact URL-seen set, per-host queues, priorities and
leases, with its parts (shedding, outbox, handoff, recrawl) as attributes.

Python memory holds one small `HostQueue` per host with work and nothing per URL; a host's
record leaves memory when its work is done (see hosts.HostRecords), so memory is bounded by the
hosts with work, not by the hosts or URLs the crawl has met. SQLite's page cache is bounded
explicitly (schema.CACHE_SIZE_KIB).

Threading: the class is synchronous and single-threaded on purpose. `FrontierService` owns one
thread for it and calls it only from there, so the event loop never blocks on disk and SQLite
never sees concurrent use of the connection.

Leases: `lease_many()` hands out rows and marks them leased with an expiry (frontier.leasing);
a lease neither finished nor returned goes back to the queue at expiry or at the next open.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from crawler_node.datadir_layout import FRONTIER_FILENAME
from crawler_node.frontier.checkpointer import Checkpoints
from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.frontier_snapshot import FrontierSnapshot, FrontierTotals, ShedState
from crawler_node.frontier.handoff import Handoff
from crawler_node.frontier.leasing import Leasing
from crawler_node.frontier.outbox import Outbox
from crawler_node.frontier.records import (
    DONE,
    FAILED,
    LEASED,
    QUEUED,
    AddResult,
    FrontierBatch,
    HostPoliteness,
    HostQueue,
    InboundBatch,
    Lease,
    UrlEntry,
    snapshot,
)
from crawler_node.frontier.recrawl import Recrawl
from crawler_node.frontier.replica import Replica
from crawler_node.frontier.schema import connect
from crawler_node.frontier.seen_set import SeenSet
from crawler_node.frontier.shedding import Shedding
from crawler_node.frontier.statements import NOT_LEASED, in_lists

RECENT_URLS = 32_768  # URLs remembered as rows (FrontierDb.recent): about 8 MB at 60-char URLs
# One probe of the urls_age index (and of `leases` per leased row met on the way).
_OLDEST_SQL = f"SELECT enqueued_at FROM urls WHERE state = 0 AND {NOT_LEASED} ORDER BY enqueued_at LIMIT 1"
_UNKNOWN_ROW = ("", -1)  # (host, state) of an id that matches no row
_FINISHABLE = (QUEUED, LEASED)  # a fetch that ended after its lease expired still counts
_STILL_LEASED = (LEASED,)


class Frontier:
    """The durable frontier of one node. Synchronous; use from a single thread."""

    def __init__(
        self,
        path: Path,
        *,
        lease_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        recent_urls: int = RECENT_URLS,
        max_pages_per_host: int = 0,
        resident_hosts: int = 0,
        urgent_priority: int | None = None,
        background_checkpoints_from: int | None = None,
    ) -> None:
        """Open (or create) the frontier at `path`, a database file or a data directory.

        Leases left by a previous run return to the queue, their attempts kept.
        `max_pages_per_host`: URLs one host may have taken in (0: no cap); the new ones past
        it come back from `add`, `take_in` and `apply` as `AddResult.capped`.
        `resident_hosts`: hosts with work kept in memory at most (0: all); the others are
        parked on disk until `unpark` gives them their turn, the parked hosts given a URL of
        at least `urgent_priority` first (see hosts.HostRecords).
        `background_checkpoints_from`: once the file is this many bytes, its WAL is copied into
        it on a thread of its own (checkpointer.Checkpoints; the node's frontier does this from
        checkpointer.FROM_BYTES); None: by the writer only, as SQLite does.
        """
        if lease_timeout_s <= 0:
            raise ValueError(f"lease_timeout_s must be > 0, got {lease_timeout_s}")
        path = Path(path)
        if path.is_dir():
            path = path / FRONTIER_FILENAME
        self.path = path
        self._db = FrontierDb(connect(path), clock=clock, recent_urls=recent_urls, resident_hosts=resident_hosts)
        self._leasing = Leasing(self._db, lease_timeout_s=lease_timeout_s)
        self.shedding = Shedding(self._db)
        self._seen = SeenSet(self._db, self.shedding, max_per_host=max_pages_per_host,
                              urgent_priority=urgent_priority)
        self.outbox = Outbox(self._db, self._seen)
        self.recrawl = Recrawl(self._db, self.shedding)
        self.handoff = Handoff(self._db, self.outbox, self._seen, self.recrawl)
        self.replica = Replica(self._db, self._seen, self.outbox)
        self._db.hosts.inherited = self.replica.politeness_for
        self._db.recover_leases()
        self._db.load_counts()
        self._db.hosts.unpark(resident_hosts)  # a bounded table starts with every host parked
        self._checkpoints: Checkpoints | None = None
        if background_checkpoints_from is not None:
            self._checkpoints = Checkpoints(self._db.conn, path, background_checkpoints_from)
            self._db.on_commit = self._checkpoints.committed

    def close(self) -> None:
        if self._checkpoints is not None:
            self._db.on_commit = None
            self._checkpoints.close()
        self._db.close()

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- adding --------------------------------------------------------------------------

    def add(self, entries: Iterable[UrlEntry], *, not_before: float = 0.0) -> AddResult:
        """Queue the URLs never seen before, in one transaction; the rest are duplicates."""
        batch = list(entries)
        with self._db.transaction():
            return self._seen.insert(batch, not_before)

    def take_in(self, batch: InboundBatch) -> AddResult:
        """URLs from outside this node (InboundBatch), in one transaction: those owed to other
        members to the outbox; a neighbour's replica (the URLs it fetched and queued, its
        hosts' politeness, its refresh); this node's own, queued (those new are replicated to
        their hosts' `successors`), and those another member fetched, recorded as fetched. The
        result's duplicates count both kinds of this node's own already known."""
        with self._db.transaction():
            self.outbox.put(batch.forward, seen=False)
            self.replica.add_politeness(batch.politeness)
            if batch.fetched_replicas:
                self.handoff.replica_add(batch.fetched_replicas)
            if batch.queued_replicas:
                self.replica.add_queued(batch.queued_replicas)
            result = self._seen.insert(batch.add, 0.0) if batch.add else AddResult(accepted=[], duplicates=0)
            if result.accepted:
                self.outbox.put_replicas(result.accepted, batch.successors)
            if batch.seen:
                result.duplicates += len(batch.seen) - self.handoff.mark_seen(batch.seen)
            if batch.refreshes:
                self.replica.refresh(batch.refreshes, batch.queued_replicas)
            return result

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
        return self._leasing.lease_many(requests)

    def expire_leases(self) -> int:
        """Return every lease past its expiry to the queue (the attempt stays counted)."""
        return self._leasing.expire_leases()

    # -- outcomes ------------------------------------------------------------------------

    def apply(self, batch: FrontierBatch) -> AddResult:
        """Apply a batch of outcomes and discovered URLs in ONE transaction (the hot path).

        done/failed finish a row that is leased or back in the queue after its lease expired
        (the fetch happened; no need to repeat it). retry/returned only touch rows still
        leased: anything else means the lease was lost and someone else owns the URL now.
        Unknown ids are ignored. `recrawl` is stored for the done rows it lists (see Recrawl).
        """
        retry_at = dict(batch.retry)
        postponed_to = dict(batch.postponed)
        ids = [*batch.done, *batch.failed, *retry_at, *batch.returned, *postponed_to]
        with self._db.transaction():
            states = self._states(ids)
            leased = {row_id for row_id in ids if states.get(row_id, _UNKNOWN_ROW)[1] == LEASED}
            done = self._transition(states, batch.done, _FINISHABLE, DONE)
            self._finish(self.recrawl.finish(done, batch.recrawl, leased, batch.histories), DONE, leased)
            self._finish(self._transition(states, batch.failed, _FINISHABLE, FAILED), FAILED, leased)
            refetched = self.recrawl.refetch(batch.refetch, self._db.clock()) if batch.refetch else None
            retry = self._transition(states, retry_at, _STILL_LEASED, QUEUED)
            self._transition(states, batch.returned, _STILL_LEASED, QUEUED)  # its row is queued as it was
            postponed = self._transition(states, postponed_to, _STILL_LEASED, QUEUED)
            executemany = self._db.conn.executemany
            if postponed:  # its attempt not counted, as a returned one's
                executemany("UPDATE urls SET not_before = ? WHERE id = ?",
                            [(postponed_to[row_id], row_id) for row_id in postponed])
            if retry:  # its attempt counted
                executemany("UPDATE urls SET not_before = ?, attempts = attempts + 1 WHERE id = ?",
                            [(retry_at[row_id], row_id) for row_id in retry])
            self._db.end_leases([row_id for row_id in leased if states[row_id][1] != LEASED])
            self.outbox.put(batch.forward)
            result = self._seen.insert(batch.add, 0.0)
            # The links' queued replicas before the pages' fetched ones: the successor gets the
            # outbox in order, a prefix at a time, so whatever it holds as fetched, it holds the
            # links of. The other way, a node killed between two batches left a successor with
            # a page fetched and its links nowhere: never crawled (265 of 1,512 URLs, issue 14).
            self.outbox.put_replicas(result.accepted, batch.successors)
            self.outbox.put(batch.replicate, seen=True, replica=True, politeness=batch.politeness)
            if refetched:
                result.refetched = refetched
            return result

    def _finish(self, ids: Sequence[int], state: int, leased: set[int]) -> None:
        """Rows done or failed; those of `leased` (ending a lease, not one that expired, whose
        attempt is counted already) count their attempt."""
        for attempt in (1, 0):
            for placeholders, chunk in in_lists([row_id for row_id in ids if (row_id in leased) == attempt]):
                self._db.conn.execute(f"UPDATE urls SET state = {state}, attempts = attempts + {attempt}"
                                        f" WHERE id IN ({placeholders})", chunk)

    def _states(self, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """id -> (host, state) for the ids that exist: leased ones from memory, the rest (a
        lease that expired, an id handed to another node) from the database."""
        leases = self._db.leases
        states = {row_id: (lease[0].host, LEASED) for row_id in ids if (lease := leases.get(row_id))}
        if len(states) < len(ids):
            states.update(self._load_states([row_id for row_id in ids if row_id not in states]))
        return states

    def _load_states(self, ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """id -> (host, state) for the ids that exist, in chunks of bounded size."""
        states: dict[int, tuple[str, int]] = {}
        for placeholders, chunk in in_lists(list(dict.fromkeys(ids))):
            rows = self._db.conn.execute(
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
        leases = self._db.leases
        moved: list[int] = []
        moves: Counter[tuple[str, int]] = Counter()  # (host, from state) -> rows
        for row_id in ids:
            host, state = states.get(row_id, _UNKNOWN_ROW)
            if state not in allowed_from:
                continue
            if state == LEASED:
                del leases[row_id]
            states[row_id] = (host, new_state)
            moved.append(row_id)
            moves[host, state] += 1
        count = self._db.count
        for (host, state), rows in moves.items():
            count(host, state, -rows)
            count(host, new_state, rows)
        return moved

    # -- recrawling ----------------------------------------------------------------------

    def requeue_due(self, now: float, limit: int, priority: int) -> Counter[str]:
        """Queue again up to `limit` done URLs due by `now`, the longest due first, at
        `priority`; returns the URLs queued per host (see Recrawl.requeue_due)."""
        return self.recrawl.requeue_due(now, limit, priority)

    def due_count(self, now: float) -> int:
        """Done URLs due for a recrawl by `now`."""
        return self.recrawl.due_count(now)

    # -- per-host records and totals -----------------------------------------------------

    def save_hosts(self, records: Sequence[HostPoliteness],
                   successors: Sequence[tuple[str, HostPoliteness]] = ()) -> None:
        """Store hosts' politeness in one transaction (the node batches these, rarely), and owe
        `successors` (successor, politeness) theirs (Outbox.put_politeness)."""
        if records or successors:
            with self._db.transaction():
                self._db.hosts.save(records)
                self.outbox.put_politeness(successors)

    def host(self, host: str) -> HostQueue | None:
        """A snapshot of the host's record, or None when the host has no work here."""
        record = self._db.hosts.records.get(host)
        return None if record is None else snapshot(record)

    def hosts_with_work(self) -> list[HostQueue]:
        """Snapshots of the active hosts that have queued URLs (eligible now or later)."""
        return [snapshot(record) for record in self._db.hosts.with_work.values()]

    def park(self, hosts: Sequence[str], returned: Sequence[int] = ()) -> list[str]:
        """The leases `returned` back to their queues unattempted (the node's buffer), then
        `hosts` parked: their turn is over, their rows wait on disk (hosts.HostRecords.park).
        Returns the hosts parked; one with a lease left stays active."""
        if returned:
            self.apply(FrontierBatch(returned=list(returned)))
        return self._db.hosts.park(hosts)

    def unpark(self, limit: int) -> list[HostQueue]:
        """Make up to `limit` parked hosts active, as room allows (hosts.HostRecords.unpark);
        snapshots of their records, with their stored politeness."""
        return self._db.hosts.unpark(limit)

    def totals(self) -> dict[str, int | float]:
        core = self._db
        queued, leased, done, failed, deferred = core.totals
        return {
            "queued": queued,
            "leased": leased,
            "done": done,
            "failed": failed,
            "deferred": deferred,
            "dropped": core.dropped,  # deleted by drop-host, ever
            "hosts": core.hosts.rows,
            "hosts_with_work": len(core.hosts.with_work),
            "parked_queued": core.hosts.parked_queued,  # queued rows of hosts waiting on disk
            "oldest_queued_age_s": self._oldest_queued_age_s(),
            "recrawl_scheduled": self.recrawl.scheduled,  # done, with a due time
        }

    def snapshot(self) -> FrontierSnapshot:
        """`totals()` and what memory holds, with the shedding state: everything another
        thread may want to show, read on the frontier's own thread."""
        core = self._db
        queued, leased, done, failed, deferred = core.totals
        totals = FrontierTotals(
            queued=queued, leased=leased, done=done, failed=failed, deferred=deferred, hosts=core.hosts.rows,
            hosts_with_work=len(core.hosts.with_work), parked_queued=core.hosts.parked_queued,
            oldest_queued_age_s=self._oldest_queued_age_s(), recrawl_scheduled=self.recrawl.scheduled,
            # not in totals(), which the shedding loop asks many times a second: an index
            # count, as long as the backlog of rows due
            recrawl_due=self.recrawl.due_count(core.clock()), hosts_in_memory=len(core.hosts.records),
            recent_urls=len(core.recent), dropped=core.dropped)
        return FrontierSnapshot(totals=totals, shedding=ShedState(cut=self.shedding.cut, counts=self.shedding.counts()))

    def _oldest_queued_age_s(self) -> float:
        # One probe of the urls_age index. The age counts from first enqueue, so a URL
        # waiting for its retry keeps ageing: it is still work not done.
        row = self._db.conn.execute(_OLDEST_SQL).fetchone()
        return 0.0 if row is None else max(0.0, self._db.clock() - row[0])
