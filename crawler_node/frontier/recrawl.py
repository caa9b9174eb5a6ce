"""Recrawling: a done URL whose fetch was recorded with a due time goes back to the queue then.

What a fetch leaves for the next one (its validators, one more visit, when it is due again) is
stored as its lease finishes, from `FrontierBatch.recrawl`, in the transaction of the batch
(`finish`). `requeue_due` turns the rows whose time has come into queued work again: from then
on they are leased, retried, deferred by shedding and handed off as any queued row is.

Invariant: only done rows have a due_at. Every way out of the done state clears it
(`requeue_due`) or deletes the row (a handoff, which reports it through `unscheduled`), so the
rows scheduled are counted in memory, as the outbox counts its rows: the count changes once the
transaction that moved them commits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from functools import partial

from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import DONE, QUEUED
from crawler_node.frontier.shedding import Shedding

# One statement per recorded row, and it is the row's only one: `finish` leaves these rows out
# of the plain done update.
_FINISH_SQL = (
    "UPDATE urls SET state = 2, due_at = ?, etag = ?, last_modified = ?, visits = visits + 1,"
    " attempts = attempts + ?, history = coalesce(?, history) WHERE id = ?"
)
# Both conditions of the urls_due index are repeated, or SQLite does not use it; the index
# keeps equal due times in id order, so the ORDER BY costs no sort.
_DUE = "state = 2 AND due_at IS NOT NULL"
_REQUEUE_SQL = f"""
UPDATE urls SET state = 0, attempts = 0, not_before = 0, priority = ?, due_at = NULL, enqueued_at = ?
WHERE id IN (SELECT id FROM urls WHERE {_DUE} AND due_at <= ? ORDER BY due_at, id LIMIT ?)
RETURNING host
"""
_DUE_COUNT_SQL = f"SELECT COUNT(*) FROM urls WHERE {_DUE} AND due_at <= ?"
# A URL is fetched again this many times at most (each fetch is an attempt): a site that sends
# every request back where it came from ends there.
REFETCH_MAX_ATTEMPTS = 3
_REFETCHABLE_SQL = "SELECT id, host, due_at FROM urls WHERE url = ? AND state = 2 AND attempts < ?"
_REFETCH_SQL = "UPDATE urls SET state = 0, not_before = 0, due_at = NULL, enqueued_at = ? WHERE id = ?"
_SCHEDULED_COUNT_SQL = f"SELECT COUNT(*) FROM urls WHERE {_DUE}"


class Recrawl:
    def __init__(self, db: FrontierDb, shedding: Shedding) -> None:
        self._db = db
        self._shedding = shedding  # its cut keeps recrawls out while it sheds
        # A pass over the urls_due index, once; totals() is asked many times a second.
        self._scheduled: int = db.conn.execute(_SCHEDULED_COUNT_SQL).fetchone()[0]

    @property
    def scheduled(self) -> int:
        """Done rows with a due time, past or future, as last committed."""
        return self._scheduled

    def finish(self, done: Sequence[int], recorded: Sequence[tuple[int, float | None, str | None, str | None]],
               leased: Collection[int] = (), histories: Mapping[int, bytes] | None = None) -> Sequence[int]:
        """In the caller's transaction: finish the rows of `done` (ids that are moving to done
        now) that `recorded` lists, (id, due_at, etag, last_modified), keeping what their fetch
        left (and its history, from `histories`), and counting the attempt of those ending a
        lease (`leased`). Returns the other ids of `done`, for the caller to finish plainly."""
        if not recorded:
            return done
        finishing = set(done)
        kept = {entry[0]: entry for entry in recorded if entry[0] in finishing}  # the last of an id wins
        if not kept:
            return done
        histories = histories or {}
        self._db.conn.executemany(
            _FINISH_SQL, [(due_at, etag, last_modified, int(row_id in leased), histories.get(row_id), row_id)
                          for row_id, due_at, etag, last_modified in kept.values()])
        scheduled = sum(1 for _, due_at, _, _ in kept.values() if due_at is not None)
        if scheduled:
            self._db.after_commit(partial(self._count, scheduled))
        return [row_id for row_id in done if row_id not in kept]

    def requeue_due(self, now: float, limit: int, priority: int) -> Counter[str]:
        """Queue again up to `limit` done rows due by `now`, the longest due first, at
        `priority`, as new work: no attempts spent, eligible at once, aged from `now`, no
        longer due. Returns the rows queued per active host (the node's host table learns of
        them from this; the frontier's records of the hosts are counted here); a parked
        host's wait for its turn.

        While shedding parks URLs at or below `priority` on arrival, none is queued: the rows
        stay due and come back once shedding stops."""
        cut = self._shedding.cut
        if limit <= 0 or (cut is not None and priority <= cut):
            return Counter()
        core = self._db
        with core.transaction():
            per_host = Counter(host for (host,) in core.conn.execute(_REQUEUE_SQL, (priority, now, now, limit)))
            # A host that finished long ago has no record any more: this makes it one, or
            # parks it (its rows then wait their turn on disk).
            core.hosts.ensure(per_host)
            for host, count in per_host.items():
                core.count(host, DONE, -count)
                core.count(host, QUEUED, count)
            if per_host:
                core.after_commit(partial(self._count, -sum(per_host.values())))
        records = core.hosts.records
        return Counter({host: count for host, count in per_host.items() if host in records})

    def refetch(self, urls: Sequence[str], now: float) -> Counter[str]:
        """In the caller's transaction: queue again, at once and at their priority, the done
        rows of `urls` fetched fewer than REFETCH_MAX_ATTEMPTS times (a redirect back to itself,
        or to the page that redirected to it, once the site may have set a cookie: the next
        request carries it). Their attempts stay counted. Returns the rows queued per active
        host, as `requeue_due` does."""
        core = self._db
        rows = [row for url in dict.fromkeys(urls)
                for row in core.conn.execute(_REFETCHABLE_SQL, (url, REFETCH_MAX_ATTEMPTS)).fetchall()]
        if not rows:
            return Counter()
        core.conn.executemany(_REFETCH_SQL, [(now, row_id) for row_id, _, _ in rows])
        per_host = Counter(host for _, host, _ in rows)
        core.hosts.ensure(per_host)
        for host, count in per_host.items():
            core.count(host, DONE, -count)
            core.count(host, QUEUED, count)
        unscheduled = sum(1 for _, _, due_at in rows if due_at is not None)
        if unscheduled:
            core.after_commit(partial(self._count, -unscheduled))
        records = core.hosts.records
        return Counter({host: count for host, count in per_host.items() if host in records})

    def unscheduled(self, count: int) -> None:
        """The open transaction deleted `count` scheduled rows (a host handed away)."""
        if count:
            self._db.after_commit(partial(self._count, -count))

    def due_count(self, now: float) -> int:
        """Done rows due by `now`: an index-only count, as long as the rows due."""
        return self._db.conn.execute(_DUE_COUNT_SQL, (now,)).fetchone()[0]

    def _count(self, delta: int) -> None:
        self._scheduled += delta
