"""The state that every part of the frontier shares, and the transactions that change it.

`Frontier`, `Shedding`, `Outbox`, `Handoff` and `Intake` each hold the one `FrontierDb`; none
of them holds another's private state. The core's counters (row totals, the host table, the
leases) move as rows do, inside a transaction, because later statements of the same
transaction read them; a rollback rebuilds them from the database, the truth to go back to.
A part's own counters (deferrals, outbox sizes) change only once a transaction commits, through
`after_commit`, so a rollback never has to undo them.

Leases: the outstanding ones are kept in memory (id -> host record, expiry as stored) and in
the small `leases` table (schema), never in their URLs' rows: they are bounded by what the node
holds in flight, and a lease writes no page of the large table.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from crawler_node.core.bounded import TwoGenerationSet
from crawler_node.frontier.host_records import HostRecords
from crawler_node.frontier.records import DONE, FAILED, LEASED, QUEUED, HostQueue
from crawler_node.frontier.statements import in_lists

# Rows counted per host and state, except finished ones (only their totals are kept). A full
# scan, but only at open and after a rollback: counters are then kept incrementally. Counted
# in Python rather than with GROUP BY, whose sorter held ~60 MB at 1M rows; this holds
# O(hosts with work).
_COUNT_SQL = "SELECT CASE WHEN state IN (2, 3) THEN NULL ELSE host END, state FROM urls"
# With a bound on the active hosts: the rows per state, each from the smallest index that has
# them (a partial index per state but finished: those are all rows less the others, and
# COUNT(*) reads the narrowest full index, the URLs'), instead of a scan of the table's rows.
_STATE_COUNT_SQL = {state: f"SELECT COUNT(*) FROM urls WHERE state = {state}" for state in (0, 1, 3, 4)}
_ROWS_SQL = "SELECT COUNT(*) FROM urls"
# The leased rows per host: rows of `leases` (their URLs' rows are in state 0, counted as
# queued by the statements above).
_LEASED_SQL = "SELECT u.host, COUNT(*) FROM leases AS l JOIN urls AS u ON u.id = l.id GROUP BY u.host"
_LEASES_SQL = "SELECT l.id, u.host, l.expires FROM leases AS l JOIN urls AS u ON u.id = l.id"


class FrontierDb:
    def __init__(self, conn: sqlite3.Connection, *, clock: Callable[[], float], recent_urls: int,
                 resident_hosts: int = 0) -> None:
        """`resident_hosts`: active hosts at most (0: no bound; see hosts.HostRecords)."""
        self.conn = conn
        self.clock = clock
        self.hosts = HostRecords(conn, resident_max=resident_hosts)
        self.totals = [0, 0, 0, 0, 0]  # rows per state, indexed by state
        # URLs an operator's drop-host deleted, ever (kept in `meta`): still URLs this node knew
        # and finished, so that known/finished never go backwards for a drop.
        row = conn.execute("SELECT value FROM meta WHERE key = 'dropped'").fetchone()
        self.dropped = int(row[0]) if row else 0
        # Every row in state LEASED: id -> (its host's record, lease_expires as stored).
        self.leases: dict[int, tuple[HostQueue, float]] = {}
        # URLs known to be rows of the frontier, the most recent ones only: most discovered
        # links are duplicates of URLs seen moments ago (the same navigation on every page),
        # and answering those from memory saves a database statement each. Exact, never
        # probabilistic: a URL is here only while its row is committed.
        self.recent = TwoGenerationSet(recent_urls)
        self._recent_pending: list[str] = []  # known once the transaction that saw them commits
        self._after_commit: list[Callable[[], None]] = []
        self.on_commit: Callable[[], None] | None = None  # after every commit (checkpointer.Checkpoints)
        self._depth = 0  # nesting of transaction(): only the outermost one commits
        self._closed = False

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One SQLite transaction. Opened inside another, it joins that one: the outermost
        commits, or rolls everything back (nothing here catches an error half-way)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN")
        self._depth = 1
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise
        finally:
            self._depth = 0
        self._committed()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run `action` once the open transaction commits; never if it rolls back (at once
        when no transaction is open)."""
        if not self._depth:
            action()
            return
        self._after_commit.append(action)

    def remember(self, urls: list[str]) -> None:
        """`urls` are rows now (new or not): remembered as such once this transaction commits."""
        self._recent_pending += urls

    def forget_recent(self) -> None:
        """Rows were deleted: none of the remembered URLs may be trusted to be a row."""
        self.recent.clear()
        self._recent_pending.clear()

    def _committed(self) -> None:
        self.hosts.committed()
        if self._recent_pending:
            self.recent.update(self._recent_pending)
            self._recent_pending.clear()
        actions, self._after_commit = self._after_commit, []
        for action in actions:
            action()
        if self.on_commit is not None:
            self.on_commit()

    def _roll_back(self) -> None:
        self._recent_pending.clear()
        self._after_commit.clear()
        # Some errors (disk full, I/O) make SQLite roll back by itself already.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        # Counters and leases were moved as rows were: back to what the database says.
        self.load_counts()
        self.load_leases()

    # -- counters --------------------------------------------------------------------------

    def count(self, host: str, state: int, delta: int) -> None:
        """Add `delta` rows of `host` in `state` to the totals and, unless the state is a
        finished one, to the host's record, or to the parked rows when it has none (see
        HostRecords: only a bounded table has parked hosts)."""
        self.totals[state] += delta
        if state != DONE and state != FAILED:
            record = self.hosts.records.get(host)
            if record is not None:
                self.hosts.count(record, state, delta)
            elif self.hosts.bounded:
                self.hosts.count_parked(state, delta)
            else:
                raise KeyError(f"{host} has {state} rows and no record")

    def count_record(self, record: HostQueue, state: int, delta: int) -> None:
        """`count` for a caller that holds the record (queued, leased or deferred rows)."""
        self.totals[state] += delta
        self.hosts.count(record, state, delta)

    def add_dropped(self, count: int) -> None:
        """``count`` rows deleted by a drop-host, in the open transaction."""
        self.conn.execute("INSERT INTO meta (key, value) VALUES ('dropped', ?) ON CONFLICT(key) DO UPDATE "
                          "SET value = CAST(value AS INTEGER) + ?", (str(count), count))

        def counted() -> None:
            self.dropped += count
        self.after_commit(counted)

    def load_counts(self) -> None:
        """Rebuild the totals and the host records from the database."""
        leased: dict[str, int] = dict(self.conn.execute(_LEASED_SQL))
        if self.hosts.bounded:
            self.totals = self._count_totals()
            self.totals[QUEUED] -= sum(leased.values())
            self.totals[LEASED] += sum(leased.values())
            self.hosts.reload_resident(self.totals, leased)
            return
        counted = Counter(self.conn.execute(_COUNT_SQL))
        for host, rows in leased.items():
            counted[host, QUEUED] -= rows
            counted[host, LEASED] += rows
        counted = +counted  # without the hosts whose queued rows were all leased
        totals = [0, 0, 0, 0, 0]
        for (_, state), rows in counted.items():
            totals[state] += rows
        self.totals = totals
        self.hosts.reload(counted)

    def _count_totals(self) -> list[int]:
        """Rows per state (QUEUED ... DEFERRED), leased ones counted as queued."""
        totals = [0, 0, 0, 0, 0]
        for state, statement in _STATE_COUNT_SQL.items():
            totals[state] = self.conn.execute(statement).fetchone()[0]
        totals[DONE] = self.conn.execute(_ROWS_SQL).fetchone()[0] - sum(totals)
        return totals

    def load_leases(self) -> None:
        """Rebuild the in-memory leases from the database (the `leases` table)."""
        records = self.hosts.records
        self.leases = {row_id: (records[host], expires) for row_id, host, expires in self.conn.execute(_LEASES_SQL)}

    def end_leases(self, ids: Sequence[int]) -> None:
        """Delete the `leases` rows of `ids` (leases that ended: the caller counts their rows
        and attempts), in the caller's transaction."""
        for placeholders, chunk in in_lists(ids):
            self.conn.execute(f"DELETE FROM leases WHERE id IN ({placeholders})", chunk)

    def recover_leases(self) -> None:
        """At open: leases cannot outlive the process that held them, whoever held them is
        gone. Their rows are queued again, each lease counted as an attempt: a URL whose fetch
        kills the process runs out of attempts like any other. A file from before layout 8
        has its leased rows in state 1, attempts counted (a scan, as load_counts)."""
        with self.transaction():
            self.conn.execute("UPDATE urls SET attempts = attempts + 1 WHERE id IN (SELECT id FROM leases)")
            self.conn.execute("DELETE FROM leases")
            self.conn.execute("UPDATE urls SET state = 0, lease_expires = NULL WHERE state = 1")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.conn.close()
