"""Leases: the frontier hands out rows (lease id == row id) and records each in `leases` with
an expiry (schema: the URL's row stays queued, its attempt counted when the lease ends). A
lease that is neither finished nor returned goes back to the queue at expiry (`expire_leases`)
or at the next open (FrontierDb.recover_leases), so a crashed worker or a crashed process
never holds work forever (at-least-once), and a URL that crashes the node each time it is
fetched runs out of attempts all the same."""

from __future__ import annotations

from collections.abc import Sequence

from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import LEASED, QUEUED, HostQueue, Lease
from crawler_node.frontier.statements import NOT_LEASED

# A host's queued rows in lease order, but for those leased (a leased row stays in state 0):
# urls_ready holds the id, so a leased row costs a probe of the small `leases` table, not a
# read of its row.
_LEASE_SELECT_SQL = f"""
SELECT id, url, depth, priority, attempts, hops, redirects, via, etag, last_modified, visits, history FROM urls
WHERE host = ? AND state = 0 AND not_before <= ? AND {NOT_LEASED}
ORDER BY priority DESC, id
LIMIT ?
"""
_LEASE_INSERT_SQL = "INSERT INTO leases (id, expires) VALUES (?, ?)"
# When a host's next queued row is ready, if none is now: those waiting have not_before in the
# future (a leased row was ready when leased, so it is not among them).
_NEXT_READY_SQL = "SELECT MIN(not_before) FROM urls WHERE host = ? AND state = 0 AND not_before > ?"
# An expired lease's attempt stays counted: in its row, as its lease ends.
_EXPIRE_SQL = "UPDATE urls SET attempts = attempts + 1 WHERE id = ?"


class Leasing:
    """The frontier's leases over its rows, counted in its host records (FrontierDb)."""

    def __init__(self, db: FrontierDb, *, lease_timeout_s: float) -> None:
        self._db = db
        self._lease_timeout_s = lease_timeout_s

    def lease_many(self, requests: Sequence[tuple[str, int]]) -> list[tuple[list[Lease], float | None]]:
        """Up to n eligible URLs of each (host, n), highest priority first, then FIFO, in one
        transaction, with each host's next_ready_at (see Frontier.lease)."""
        core = self._db
        now = core.clock()
        records = core.hosts.records
        wanted = [(host, n, records.get(host)) for host, n in requests]
        if not any(n > 0 and record is not None and record.queued for _, n, record in wanted):
            return [([], None) for _ in requests]
        expires = now + self._lease_timeout_s
        results: list[tuple[list[Lease], float | None]] = []
        # The rows picked for every host go into `leases` by one statement at the end.
        picked: list[int] = []
        picked_hosts: set[str] = set()
        with core.transaction():
            for host, n, record in wanted:
                if host in picked_hosts:  # asked twice: record the first pick, or it is picked again
                    self._record(picked, expires)
                    picked, picked_hosts = [], set()
                picked_hosts.add(host)
                leases, next_ready_at = self._lease(host, n, record, now, expires)
                picked += [lease.id for lease in leases]
                results.append((leases, next_ready_at))
            self._record(picked, expires)
        return results

    def _record(self, ids: Sequence[int], expires: float) -> None:
        if ids:
            self._db.conn.executemany(_LEASE_INSERT_SQL, [(row_id, expires) for row_id in ids])

    def _lease(
        self, host: str, n: int, record: HostQueue | None, now: float, expires: float,
    ) -> tuple[list[Lease], float | None]:
        """Pick the host's next rows and count them leased; the caller marks them."""
        if n <= 0 or record is None or record.queued == 0:
            return [], None
        core = self._db
        rows = core.conn.execute(_LEASE_SELECT_SQL, (host, now, n)).fetchall()
        if not rows:
            return [], self._next_ready_at(host, now)
        core.count_record(record, QUEUED, -len(rows))
        core.count_record(record, LEASED, len(rows))
        # attempts + 1: this attempt, counted in the row when the lease ends
        leases = [
            Lease(row_id, url, host, depth, priority, attempts + 1, hops, redirects, via, etag, last_modified, visits,
                  history)
            for row_id, url, depth, priority, attempts, hops, redirects, via, etag, last_modified, visits, history
            in rows
        ]
        core.leases.update(dict.fromkeys([lease.id for lease in leases], (record, expires)))
        return leases, None

    def _next_ready_at(self, host: str, now: float) -> float | None:
        row = self._db.conn.execute(_NEXT_READY_SQL, (host, now)).fetchone()
        return row[0]

    def expire_leases(self) -> int:
        """Return every lease past its expiry to the queue (the attempt stays counted)."""
        core = self._db
        now = core.clock()
        expired = [row_id for row_id, (_, expires) in core.leases.items() if expires <= now]
        if not expired:
            return 0
        with core.transaction():
            core.conn.executemany(_EXPIRE_SQL, [(row_id,) for row_id in expired])
            core.end_leases(expired)
            for row_id in expired:
                record, _ = core.leases.pop(row_id)
                core.count_record(record, LEASED, -1)
                core.count_record(record, QUEUED, 1)
        return len(expired)
