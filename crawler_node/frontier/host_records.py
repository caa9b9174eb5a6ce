"""The frontier's per-host records (not the node's host table, node.hosts): a record in
memory for each *resident* host with work, a row on disk for each host with rows.

A host is in one of four states, and only the frontier's own transactions (and `unpark`)
move it:

- *unknown*: no row in `hosts` and none in `urls`;
- *resting*: a row in `hosts` (its politeness), perhaps finished rows in `urls`, but nothing
  queued, leased or deferred; nothing of it in memory;
- *active* (resident): queued, leased or deferred rows, and a `HostQueue` in `records` (also
  in `with_work` while it has queued rows) carrying the politeness loaded when it was created;
- *parked*: queued or deferred rows but no record: it waits on disk for its turn. Never leased
  rows: leases are made and kept through records.

With `resident_max` 0 every host with work is active. Otherwise at most `resident_max` are:
memory holds that many hosts however many have work (a broad crawl queues URLs of millions),
as Heritrix keeps its inactive queues on disk. A host with new work becomes active at once
while nothing is parked and there is room; once anything is parked, room goes to the parked
hosts in turn (`unpark`: host-name order from a cursor that wraps, after the hosts given
urgent work), so hosts found late do not overtake those found early. A parked host's rows
are counted in the totals only (`FrontierDb.parked_queued`).

`ensure` makes hosts active (their first queued or deferred row of a call) or leaves them
parked: it inserts the host's row, or loads the row's politeness if there is one.
`committed` makes an active host resting again at the end of the transaction that left its
record with no work, never mid-transaction: a record counted down to nothing may be counted up
again in the same transaction, and the frontier's leases point at the records of leased rows.
So memory holds the active hosts, not every host the crawl has met. `ensure_rows` gives a row
to hosts whose URLs arrive already finished; `remove_row` drops the row of a host handed away
with all its rows.

Each row also counts the URLs its host has had in `urls` (`accepted`, for the per-host page
cap: frontier.seen_set). The count is read from and added to the row inside the caller's
transaction, never cached, so a rollback leaves nothing in memory to undo.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence

from crawler_node.frontier.parked_scan import next_parked, with_deferred
from crawler_node.frontier.records import DEFERRED, LEASED, QUEUED, HostPoliteness, HostQueue, snapshot
from crawler_node.frontier.statements import NOT_LEASED, in_lists, value_rows

_POLITENESS_COLUMNS = "host, next_eligible, crawl_delay, backoff_level, last_throttle"
# next_eligible named: the first layout of the table has no default for it.
_INSERT_ROWS_SQL = "INSERT INTO hosts (host, next_eligible) VALUES {} ON CONFLICT(host) DO NOTHING"
_SAVE_SQL = f"""
INSERT INTO hosts ({_POLITENESS_COLUMNS}) VALUES (?, ?, ?, ?, ?)
ON CONFLICT(host) DO UPDATE SET next_eligible = excluded.next_eligible, crawl_delay = excluded.crawl_delay,
    backoff_level = excluded.backoff_level, last_throttle = excluded.last_throttle
"""


# A parked host's rows in a state (queued or deferred), not leased, counted when it becomes
# active, for many hosts in one statement: the IN list walks the state's partial index
# (urls_ready, urls_deferred) host by host, and a parked host has no leases, so each probe of
# `leases` finds nothing. With a statement per host and state, bringing in 10,000 hosts at
# open took 1.1 s at 10M URLs, 0.25 s so.
_COUNT_HOSTS_SQL = {state: f"SELECT host, COUNT(*) FROM urls WHERE host IN ({{}}) AND state = {state} AND {NOT_LEASED}"
                    " GROUP BY host" for state in (QUEUED, DEFERRED)}
URGENT_MAX = 10_000  # parked hosts remembered as given urgent work (a seed), unparked first


class HostRecords:
    def __init__(self, conn: sqlite3.Connection, *, resident_max: int = 0) -> None:
        """`resident_max`: active hosts at most (0: every host with work is active)."""
        if resident_max < 0:
            raise ValueError(f"resident_max must be >= 0 (0: no bound), got {resident_max}")
        self._conn = conn
        self._resident_max = resident_max
        # Both dicts keep their identity for the life of the table: callers may hold them.
        self.records: dict[str, HostQueue] = {}
        self.with_work: dict[str, HostQueue] = {}  # queued > 0: nobody scans idle hosts
        # Rows of parked hosts (no record), by state: what `unpark` has yet to bring in.
        self.parked_queued = 0
        self.parked_deferred = 0
        self._cursor = ""  # unpark's round robin: the next parked host sorts after this name
        self._urgent: dict[str, None] = {}  # parked hosts given urgent work, oldest first
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

    def ensure(self, hosts: Iterable[str],
               urgent: Callable[[], Iterable[str]] | None = None) -> dict[str, HostPoliteness]:
        """Give every host in `hosts` a row, and a record while there is room (see the module
        docstring); those left without one are parked, and of them those `urgent()` names are
        unparked first. Returns the stored politeness of the hosts whose record this made,
        when not all defaults. The caller counts the rows it adds (`count`, `count_parked`)."""
        records = self.records
        missing = [host for host in dict.fromkeys(hosts) if host not in records]
        if not missing:
            return {}
        # New hosts are the common case while a crawl grows: when every row was new, there
        # is no politeness to look up.
        inserted = self._insert_rows(missing)
        admitted = self._admit(missing)
        if len(admitted) < len(missing) and urgent is not None:
            self._note_urgent(set(urgent()).intersection(missing).difference(admitted))
        return self._make_records(admitted, look_up=inserted < len(missing))

    def _admit(self, missing: list[str]) -> list[str]:
        """The hosts of `missing` that become active now: all while nothing is parked and
        there is room, none once something is (room then goes to the parked, in turn)."""
        if not self._resident_max:
            return missing
        if self.parked_queued or self.parked_deferred:
            return []
        return missing[:max(0, self._resident_max - len(self.records))]

    def _note_urgent(self, hosts: set[str]) -> None:
        for host in sorted(hosts):
            if len(self._urgent) >= URGENT_MAX:
                break  # the round robin reaches the others in its turn
            self._urgent[host] = None

    def _make_records(self, hosts: Sequence[str], *, look_up: bool) -> dict[str, HostPoliteness]:
        """Records for `hosts`, counted from zero, with their stored politeness (`look_up`:
        some may have a row already) and a neighbour's; returns that politeness."""
        if not hosts:
            return {}
        stored = self._load_politeness(hosts) if look_up else {}
        if self.inherited is not None:
            for host, theirs in self.inherited(hosts).items():
                stored[host] = _stricter(stored.get(host), theirs)
        records = self.records
        for host in hosts:
            record = records[host] = HostQueue(host, politeness=stored.get(host))
            self._maybe_idle.append(record)  # until it is counted
        return stored

    # -- parked hosts ------------------------------------------------------------------------

    def unpark(self, limit: int) -> list[HostQueue]:
        """Make up to `limit` parked hosts with queued rows active, as far as there is room:
        first those given urgent work, then the next ones in host-name order after the last
        one unparked (wrapping around once). Reads only (no transaction): the records are
        made with the counts on disk, which only the frontier's thread changes. Returns
        snapshots of the new records, with their stored politeness."""
        if not self._resident_max or not self.parked_queued:
            return []
        room = min(limit, self._resident_max - len(self.records))
        if room < limit:
            # An active host with only deferred rows (load shedding) is no work for the node:
            # it would hold a place that queued work waits for, perhaps for good.
            shed = [host for host, record in self.records.items() if not record.queued and not record.leased]
            room += len(self.park(shed[:limit - max(0, room)]))
        if room <= 0:
            return []
        picked: list[str] = []
        while self._urgent and len(picked) < room:
            host = next(iter(self._urgent))
            del self._urgent[host]
            if host not in self.records and host not in picked:
                picked.append(host)
        taken = set(picked)
        found, self._cursor = next_parked(self._conn, self._cursor, room - len(picked),
                                          lambda host: host in self.records or host in taken)
        picked += found
        made = self._bring_in(picked)
        return [snapshot(record) for record in made if record.queued]

    def unpark_deferred(self, limit: int) -> list[str]:
        """Parked hosts that have deferred rows, up to `limit`, in host-name order: load
        shedding restores theirs too (they then wait their turn as parked queued work)."""
        return with_deferred(self._conn, limit, self.records.__contains__)

    def _bring_in(self, hosts: Sequence[str], leased: Mapping[str, int] | None = None) -> list[HostQueue]:
        """Records for parked `hosts`, counted from their rows on disk (`leased`: host ->
        leased rows, which only a rollback's reload has to count)."""
        self._make_records(hosts, look_up=True)
        made = []
        on_disk = {state: self._count_hosts(hosts, state) for state in _COUNT_HOSTS_SQL}
        for host in hosts:
            record = self.records[host]
            queued, deferred = on_disk[QUEUED].get(host, 0), on_disk[DEFERRED].get(host, 0)
            self.parked_queued -= queued
            self.parked_deferred -= deferred
            if queued:
                self.count(record, QUEUED, queued)
            if deferred:
                self.count(record, DEFERRED, deferred)
            if leased and (rows := leased.get(host, 0)):
                self.count(record, LEASED, rows)
            made.append(record)
        self._drop_idle()  # a record that found no rows after all (no transaction to wait for)
        return made

    def _count_hosts(self, hosts: Sequence[str], state: int) -> dict[str, int]:
        counted: dict[str, int] = {}
        for placeholders, chunk in in_lists(hosts):
            counted.update(self._conn.execute(_COUNT_HOSTS_SQL[state].format(placeholders), chunk))
        return counted

    def park(self, hosts: Sequence[str]) -> list[str]:
        """Make active `hosts` parked (the node ended their turn): their records leave memory,
        their rows wait on disk. A host with leased rows left (a page on its way to the store)
        stays active. Returns the hosts parked."""
        parked: list[str] = []
        if not self._resident_max:
            return parked
        for host in hosts:
            record = self.records.get(host)
            if record is None or record.leased:
                continue
            del self.records[host]
            self.with_work.pop(host, None)
            self.parked_queued += record.queued
            self.parked_deferred += record.deferred
            parked.append(host)
        return parked

    def count_parked(self, state: int, delta: int) -> None:
        """Add `delta` rows in `state` (queued or deferred) of a host without a record."""
        if state == QUEUED:
            self.parked_queued += delta
        elif state == DEFERRED:
            self.parked_deferred += delta
        else:
            raise ValueError(f"a parked host has no rows in state {state}")

    def on_disk(self, host: str) -> tuple[int, int]:
        """A host's (queued, deferred) rows as the database has them (a parked host's)."""
        return (self._count_hosts([host], QUEUED).get(host, 0), self._count_hosts([host], DEFERRED).get(host, 0))

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
        self._drop_idle()
        self._rows += self._rows_pending
        self._rows_pending = 0

    def _drop_idle(self) -> None:
        records = self.records
        for record in self._maybe_idle:
            if record.idle and records.get(record.host) is record:
                del records[record.host]
        self._maybe_idle.clear()

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
        self.parked_queued = self.parked_deferred = 0

    @property
    def bounded(self) -> bool:
        """At most `resident_max` hosts are active (some with work may be parked)."""
        return self._resident_max > 0

    def reload_resident(self, totals: Sequence[int], leased: Mapping[str, int]) -> None:
        """`reload` for a bounded table, without counting every host with work: the hosts
        active until now (none at open) and those with `leased` rows (host -> rows) are
        counted again from disk; every other queued or deferred row of `totals` (rows per
        state) is parked. At open, `unpark` then fills the room."""
        self._maybe_idle.clear()
        self._rows_pending = 0
        resident = list(dict.fromkeys([*self.records, *leased]))
        self.records.clear()
        self.with_work.clear()
        self.parked_queued, self.parked_deferred = totals[QUEUED], totals[DEFERRED]
        self._bring_in(resident, leased)


def _stricter(ours: HostPoliteness | None, theirs: HostPoliteness) -> HostPoliteness:
    """A host's politeness here and a neighbour's for it, the later time and longer delay."""
    if ours is None:
        return theirs
    return HostPoliteness(ours.host, max(ours.next_eligible, theirs.next_eligible),
                          max(ours.crawl_delay, theirs.crawl_delay), ours.backoff_level, ours.last_throttle)
