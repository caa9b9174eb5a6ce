"""What an operator asks of the frontier: each host's counts, one host's queue, and dropping
a host's queue (`crawler-node hosts`, `queue`, `drop-host`).

Synchronous, on the frontier's thread like its other parts (`FrontierService` calls it). The
counts come from the per-host records the frontier keeps in memory (hosts.HostRecords), so
listing the hosts never scans `urls`; one host's queue is read through the `urls_ready` and
`urls_deferred` indexes, in lease order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler_node.core.change_rate import History
from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import DEFERRED, LEASED, QUEUED
from crawler_node.frontier.statements import NOT_LEASED, in_lists

if TYPE_CHECKING:
    from crawler_node.frontier.frontier import Frontier

# Queued rows first in the order they would be leased, then the deferred ones in the order
# they would be restored: the queue as the node will work through it.
_QUEUE_SQL = f"""
SELECT url, depth, priority, attempts, not_before, state, via, history FROM urls
WHERE host = ? AND state = ? AND {NOT_LEASED} ORDER BY priority DESC, id LIMIT ?
"""
_DROP_SQL = f"DELETE FROM urls WHERE host = ? AND state = ? AND {NOT_LEASED}"
_DROP_LEASED_SQL = "DELETE FROM urls WHERE id IN ({})"
_STATE_NAMES = {QUEUED: "queued", DEFERRED: "deferred"}


@dataclass(frozen=True, slots=True)
class HostCounts:
    """One host's rows in this node's frontier that are not finished."""

    host: str
    queued: int  # waiting to be leased, retries waiting for their time included
    leased: int  # handed to the node (buffered or in flight)
    deferred: int  # parked by load shedding
    next_eligible: float  # its stored pause (Retry-After, backoff) ends then; 0: none


@dataclass(frozen=True, slots=True)
class QueuedUrl:
    url: str
    depth: int
    priority: int
    attempts: int
    not_before: float  # not leased before this time (a retry's backoff); 0: at once
    state: str  # "queued" or "deferred"
    via: str | None
    # what its recrawls saw (core.change_rate.History): the estimate of its changes per second
    # made at its last fetch, and checks (recrawls) and changes seen; None: never recrawled
    change_rate: float | None = None
    checks: int = 0
    changes: int = 0


class FrontierControl:
    def __init__(self, db: FrontierDb) -> None:
        self._db = db

    @classmethod
    def of(cls, frontier: Frontier) -> FrontierControl:
        # The frontier builds its parts over its database (shedding, outbox, handoff, recrawl);
        # this part is built beside it until Frontier.__init__ does the same for it.
        return cls(frontier._db)  # noqa: SLF001 - the frontier's own part, see above

    def host_counts(self) -> list[HostCounts]:
        """Every active host with unfinished rows here (queued, leased or deferred); parked
        hosts are not listed (`host_queue` answers for each)."""
        return [HostCounts(record.host, record.queued, record.leased, record.deferred,
                           record.politeness.next_eligible if record.politeness is not None else 0.0)
                for record in self._db.hosts.records.values()]

    def host_queue(self, host: str, limit: int) -> tuple[HostCounts | None, list[QueuedUrl]]:
        """The host's counts (None: nothing unfinished here) and up to ``limit`` of its queued,
        then deferred, URLs, each in lease order."""
        if limit < 0:
            return None, []
        counts = self._counts(host)
        if counts is None:
            return None, []
        rows: list[QueuedUrl] = []
        for state in (QUEUED, DEFERRED):
            if len(rows) >= limit:
                break
            for url, depth, priority, attempts, not_before, _, via, blob in self._db.conn.execute(
                    _QUEUE_SQL, (host, state, limit - len(rows))):
                history = History.unpack(blob)
                seen = (history.rate, history.checks, history.changes) if history is not None else (None, 0, 0)
                rows.append(QueuedUrl(url, depth, priority, attempts, not_before or 0.0, _STATE_NAMES[state], via,
                                      *seen))
        return counts, rows

    def _counts(self, host: str) -> HostCounts | None:
        """The host's counts, from its record or, parked, from disk (None: nothing unfinished)."""
        hosts = self._db.hosts
        record = hosts.records.get(host)
        if record is not None:
            return HostCounts(host, record.queued, record.leased, record.deferred,
                              record.politeness.next_eligible if record.politeness is not None else 0.0)
        if not hosts.bounded:
            return None
        queued, deferred = hosts.on_disk(host)
        if not queued and not deferred:
            return None
        row = self._db.conn.execute("SELECT next_eligible FROM hosts WHERE host = ?", (host,)).fetchone()
        return HostCounts(host, queued, 0, deferred, row[0] if row else 0.0)

    def drop_host(self, host: str, lease_ids: Sequence[int] = ()) -> Counter[str]:
        """Delete the host's queued and deferred rows, and the leases in ``lease_ids`` (the
        node's buffer for the host, never dispatched), in one transaction. Leases not listed
        (requests in flight) stay and finish normally. Returns the rows deleted by state.

        The rows leave the seen-set: a link found later queues its URL again."""
        core = self._db
        dropped: Counter[str] = Counter()
        record = core.hosts.records.get(host)
        if record is None and not core.hosts.bounded:
            return dropped
        with core.transaction():
            ours = [row_id for row_id in lease_ids if (lease := core.leases.get(row_id)) and lease[0] is record]
            for placeholders, chunk in in_lists(ours):
                core.conn.execute(_DROP_LEASED_SQL.format(placeholders), chunk)
            core.end_leases(ours)
            for row_id in ours:
                del core.leases[row_id]
            if ours and record is not None:
                core.count_record(record, LEASED, -len(ours))
                dropped["leased"] = len(ours)
            for state in (QUEUED, DEFERRED):
                count = core.conn.execute(_DROP_SQL, (host, state)).rowcount
                if count:
                    core.count(host, state, -count)  # from its record, or from the parked rows
                    dropped[_STATE_NAMES[state]] = count
            if dropped:
                core.add_dropped(sum(dropped.values()))
            core.forget_recent()  # rows are gone: their URLs are new again
        return dropped
