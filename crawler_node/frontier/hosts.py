"""The frontier's per-host records (not the node's host table, node.hosts): a record in
memory for each host with work, a row on disk for each host with rows.

A host is in one of three states, and only the frontier's own transactions move it:

- *unknown*: no row in `hosts` and none in `urls`;
- *resting*: a row in `hosts` (its politeness), perhaps finished rows in `urls`, but nothing
  queued, leased or deferred; nothing of it in memory;
- *active*: queued, leased or deferred rows, and a `HostQueue` in `records` (also in
  `with_work` while it has queued rows) carrying the politeness loaded when it was created.

`ensure` makes a host active (its first queued or deferred row of a call): it inserts the
host's row, or loads the row's politeness if there is one. `committed` makes it resting again
at the end of the transaction that left its record with no work, never mid-transaction: a
record counted down to nothing may be counted up again in the same transaction, and the
frontier's leases point at the records of leased rows. So memory holds the hosts with work,
not every host the crawl has met. `ensure_rows` gives a row to hosts whose URLs arrive already
finished; `remove_row` drops the row of a host handed away with all its rows.

Each row also counts the URLs its host has had in `urls` (`accepted`, for the per-host page
cap: frontier.intake). The count is read from and added to the row inside the caller's
transaction, never cached, so a rollback leaves nothing in memory to undo.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence

from crawler_node.frontier.records import DEFERRED, LEASED, QUEUED, HostPoliteness, HostQueue
from crawler_node.frontier.statements import in_lists, value_rows

_POLITENESS_COLUMNS = "host, next_eligible, crawl_delay, backoff_level, last_throttle"
# next_eligible named: the first layout of the table has no default for it.
_INSERT_ROWS_SQL = "INSERT INTO hosts (host, next_eligible) VALUES {} ON CONFLICT(host) DO NOTHING"
_SAVE_SQL = f"""
INSERT INTO hosts ({_POLITENESS_COLUMNS}) VALUES (?, ?, ?, ?, ?)
ON CONFLICT(host) DO UPDATE SET next_eligible = excluded.next_eligible, crawl_delay = excluded.crawl_delay,
    backoff_level = excluded.backoff_level, last_throttle = excluded.last_throttle
"""


class HostRecords:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # Both dicts keep their identity for the life of the table: callers may hold them.
        self.records: dict[str, HostQueue] = {}
        self.with_work: dict[str, HostQueue] = {}  # queued > 0: nobody scans idle hosts
        self._rows: int = conn.execute("SELECT COUNT(*) FROM hosts").fetchone()[0]
        self._rows_pending = 0  # rows added (or removed) by the open transaction
        self._maybe_idle: list[HostQueue] = []  # counted down to nothing in the open transaction
        # The politeness a neighbour had for hosts that come here (frontier.replica), taken by
        # `ensure` with the hosts' records; None: none is kept.
        self.inherited: Callable[[Sequence[str]], dict[str, HostPoliteness]] | None = None

    @property
    def rows(self) -> int:
        """Rows in `hosts` as last committed: every host that has rows in `urls`."""
        return self._rows

    # -- becoming active -------------------------------------------------------------------

    def ensure(self, hosts: Iterable[str]) -> dict[str, HostPoliteness]:
        """Give every host in `hosts` a record. Returns the stored politeness of the hosts
        whose record this made, when not all defaults."""
        records = self.records
        missing = [host for host in dict.fromkeys(hosts) if host not in records]
        if not missing:
            return {}
        # New hosts are the common case while a crawl grows: when every row was new, there
        # is no politeness to look up.
        inserted = self._insert_rows(missing)
        stored = {} if inserted == len(missing) else self._load_politeness(missing)
        if self.inherited is not None:
            for host, theirs in self.inherited(missing).items():
                stored[host] = _stricter(stored.get(host), theirs)
        for host in missing:
            record = records[host] = HostQueue(host, politeness=stored.get(host))
            self._maybe_idle.append(record)  # until it is counted
        return stored

    def ensure_rows(self, hosts: Iterable[str]) -> None:
        """Give a `hosts` row to hosts that get only finished rows (no record needed)."""
        missing = [host for host in dict.fromkeys(hosts) if host not in self.records]
        if missing:
            self._insert_rows(missing)

    def _insert_rows(self, hosts: Sequence[str]) -> int:
        inserted = 0
        for rows, chunk in value_rows(hosts, "(?, 0)"):
            inserted += self._conn.execute(_INSERT_ROWS_SQL.format(rows), chunk).rowcount
        self._rows_pending += inserted
        return inserted

    def _load_politeness(self, hosts: Sequence[str]) -> dict[str, HostPoliteness]:
        """The stored politeness of `hosts` that is not all defaults (primary-key probes)."""
        found: dict[str, HostPoliteness] = {}
        for placeholders, chunk in in_lists(hosts):
            rows = self._conn.execute(
                f"SELECT {_POLITENESS_COLUMNS} FROM hosts WHERE host IN ({placeholders})", chunk)
            for row in rows:
                politeness = HostPoliteness(*row)
                if not politeness.is_default:
                    found[politeness.host] = politeness
        return found

    # -- URLs taken in per host (the page cap) -----------------------------------------------

    def accepted(self, hosts: Sequence[str]) -> dict[str, int]:
        """URLs each of `hosts` has had in `urls` so far (0 for a host without a row)."""
        found = dict.fromkeys(hosts, 0)
        for placeholders, chunk in in_lists(list(found)):
            found.update(self._conn.execute(
                f"SELECT host, accepted FROM hosts WHERE host IN ({placeholders})", chunk))
        return found

    def count_accepted(self, per_host: Mapping[str, int]) -> None:
        """Add new rows of `urls` to their hosts' counts (the hosts' rows exist: `ensure`)."""
        if per_host:
            self._conn.executemany("UPDATE hosts SET accepted = accepted + ? WHERE host = ?",
                                   [(rows, host) for host, rows in per_host.items()])

    # -- counting --------------------------------------------------------------------------

    def count(self, record: HostQueue, state: int, delta: int) -> None:
        """Add `delta` rows in `state` (queued, leased or deferred) to the host's record."""
        if state == QUEUED:
            record.queued += delta
            if record.queued > 0:
                self.with_work[record.host] = record
            else:
                self.with_work.pop(record.host, None)
        elif state == LEASED:
            record.leased += delta
        elif state == DEFERRED:
            record.deferred += delta
        else:
            raise ValueError(f"state {state} is not kept per host")
        if delta < 0 and record.idle:
            self._maybe_idle.append(record)

    # -- the durable part ------------------------------------------------------------------

    def save(self, politeness: Sequence[HostPoliteness]) -> None:
        """Upsert hosts' politeness (in the caller's transaction); the last one of a host wins."""
        latest = {record.host: record for record in politeness}
        known: set[str] = set()
        for placeholders, chunk in in_lists(list(latest)):
            known.update(host for (host,) in self._conn.execute(
                f"SELECT host FROM hosts WHERE host IN ({placeholders})", chunk))
        self._conn.executemany(_SAVE_SQL, [
            (p.host, p.next_eligible, p.crawl_delay, p.backoff_level, p.last_throttle) for p in latest.values()
        ])
        self._rows_pending += len(latest) - len(known)
        for host, stored in latest.items():
            record = self.records.get(host)
            if record is not None:
                record.politeness = None if stored.is_default else stored

    def remove_row(self, host: str) -> None:
        """Forget a host that has no rows left (handed to another node with all of them)."""
        self._rows_pending -= self._conn.execute("DELETE FROM hosts WHERE host = ?", (host,)).rowcount

    def after(self, after: str, limit: int) -> list[str]:
        """The hosts with rows whose name sorts after `after`, in order, at most `limit`."""
        return [host for (host,) in self._conn.execute(
            "SELECT host FROM hosts WHERE host > ? ORDER BY host LIMIT ?", (after, limit))]

    # -- transaction ends ------------------------------------------------------------------

    def committed(self) -> None:
        """The open transaction committed: drop the records left with no work."""
        records = self.records
        for record in self._maybe_idle:
            if record.idle and records.get(record.host) is record:
                del records[record.host]
        self._maybe_idle.clear()
        self._rows += self._rows_pending
        self._rows_pending = 0

    def reload(self, counted: Mapping[tuple[str | None, int], int]) -> None:
        """Rebuild the records from `counted`: rows per (host, state) of the queue states
        (at open, and after a rolled-back transaction). Entries without a host are ignored."""
        self._maybe_idle.clear()
        self._rows_pending = 0
        records = self.records
        records.clear()
        self.with_work.clear()
        for (host, state), rows in counted.items():
            if host is None:
                continue
            record = records.get(host)
            if record is None:
                record = records[host] = HostQueue(host)
            self.count(record, state, rows)
        for host, stored in self._load_politeness(list(records)).items():
            records[host].politeness = stored


def _stricter(ours: HostPoliteness | None, theirs: HostPoliteness) -> HostPoliteness:
    """A host's politeness here and a neighbour's for it, the later time and longer delay."""
    if ours is None:
        return theirs
    return HostPoliteness(ours.host, max(ours.next_eligible, theirs.next_eligible),
                          max(ours.crawl_delay, theirs.crawl_delay), ours.backoff_level, ours.last_throttle)
