"""Every way a URL enters the seen-set: as new work (queued, or parked while shedding), or as
already fetched (by this node, by another one, or by a neighbour whose replica is kept here).

`insert` is the hot path: `Frontier.add`, `Frontier.apply` and `Outbox.reroute` all come in
through it, inside their own transaction. It holds each host to `max_per_host` URLs taken in
(counted on the host's row: hosts.HostRecords.accepted); the new URLs past it are neither
queued nor remembered, and go back to the caller as `AddResult.capped`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from crawler_node.core.urls import host_of
from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import DEFERRED, DONE, QUEUED, AddResult, UrlEntry
from crawler_node.frontier.shedding import Shedding
from crawler_node.frontier.statements import IN_LIST_MAX, INSERT_CHUNKS, NOT_LEASED, chunk_sizes, in_lists

# ON CONFLICT(url) rather than INSERT OR IGNORE: only a seen URL is skipped; a malformed
# entry (NULL url) still fails the batch instead of silently counting as a duplicate.
# Many rows per statement (statements.chunk_sizes): one statement per row cost more than the
# row itself.
# url, host, depth, priority, hops, redirects, via, state, not_before, now
_INSERT_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
_INSERT_ROW_PARAMS = _INSERT_ROW.count("?")
_INSERT_COLUMNS = "url, host, depth, priority, hops, redirects, via, state, attempts, not_before, enqueued_at"
# A queued row another node fetched is done here too; a leased one ends as its lease does.
_MARK_SEEN_SQL = f"UPDATE urls SET state = 2 WHERE url = ? AND state = 0 AND {NOT_LEASED} RETURNING host"
_INSERT_SEEN_SQL = (
    f"INSERT INTO urls ({_INSERT_COLUMNS})"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 2, 0, 0, ?) ON CONFLICT(url) DO NOTHING"
)


def _insert_sql(rows: int) -> str:
    return f"INSERT INTO urls ({_INSERT_COLUMNS}) VALUES {', '.join([_INSERT_ROW] * rows)} ON CONFLICT(url) DO NOTHING"


_INSERT_SQL = {rows: _insert_sql(rows) for rows in INSERT_CHUNKS}
# (host, url) pairs looked up in the replica, by the size of the list (statements.in_lists).
_IN_REPLICA_SQL = {
    size: f"SELECT r.url FROM (VALUES {', '.join(['(?, ?)'] * size)}) AS v JOIN replica AS r"
          " ON r.host = v.column1 AND r.url = v.column2 WHERE r.state = 2"
    for size in (1 << bits for bits in range(IN_LIST_MAX.bit_length()))}


class SeenSet:
    def __init__(self, db: FrontierDb, shedding: Shedding, *, max_per_host: int = 0,
                 urgent_priority: int | None = None) -> None:
        """`max_per_host`: URLs one host may have taken in, at most (0: no cap);
        `urgent_priority`: a parked host given a URL of at least this priority (a seed) is
        unparked before the others (None: none is)."""
        if max_per_host < 0:
            raise ValueError(f"max_per_host must be >= 0 (0: no cap), got {max_per_host}")
        self._db = db
        self._shedding = shedding
        self._max_per_host = max_per_host
        self._urgent_priority = urgent_priority
        self._has_replica = db.conn.execute("SELECT 1 FROM replica LIMIT 1").fetchone() is not None

    def insert(self, entries: Sequence[UrlEntry], not_before: float) -> AddResult:
        """Queue the URLs never seen before, in the caller's transaction; the rest are
        duplicates. URLs a neighbour fetched are recorded as done instead."""
        core = self._db
        # A URL in the recent set is a row already: a duplicate without asking the database.
        fresh = core.recent.unknown(entries)
        replicated: list[UrlEntry] = []
        if self._has_replica and fresh:
            fetched_by_neighbour = self._in_replica(fresh)
            if fetched_by_neighbour:
                replicated = [entry for entry in fresh if entry.url in fetched_by_neighbour]
                fresh = [entry for entry in fresh if entry.url not in fetched_by_neighbour]
        capped: list[UrlEntry] = []
        if self._max_per_host and fresh:
            fresh, capped = self._cap(fresh)
        cut = self._shedding.cut
        accepted = self._insert_rows(fresh, not_before, cut) if fresh else fresh
        core.remember([entry.url for entry in fresh])  # rows now, new or not
        per_host = Counter(entry.host for entry in accepted)
        politeness = core.hosts.ensure(per_host, urgent=self._urgent_hosts(accepted))
        core.hosts.count_accepted(per_host)
        for host, count in per_host.items():
            core.count(host, QUEUED, count)
        deferred = [entry for entry in accepted if entry.priority <= cut] if cut is not None else []
        if deferred:
            for host, count in Counter(entry.host for entry in deferred).items():
                core.count(host, QUEUED, -count)
                core.count(host, DEFERRED, count)
            self._shedding.parked_on_arrival(len(deferred))
        if replicated:
            self.mark_seen(replicated)
        hosts = core.hosts
        # (a host parked by this call counted its rows as parked just above)
        parked = ({host for host in per_host if host not in hosts.records}
                  if hosts.parked_queued or hosts.parked_deferred else set())
        return AddResult(accepted=accepted, duplicates=len(entries) - len(accepted) - len(capped),
                         deferred=deferred, politeness=politeness, capped=capped, parked=parked)

    def _urgent_hosts(self, accepted: Sequence[UrlEntry]) -> Callable[[], set[str]] | None:
        """The hosts given a URL of at least the urgent priority, asked for only when some
        host is parked (a call on the hot path while nothing is)."""
        urgent = self._urgent_priority
        if urgent is None:
            return None
        return lambda: {entry.host for entry in accepted if entry.priority >= urgent}

    def _cap(self, fresh: list[UrlEntry]) -> tuple[list[UrlEntry], list[UrlEntry]]:
        """`fresh` split into the URLs to insert and the new ones past their host's cap. Exact:
        a URL that is a row already is a duplicate, never capped. Hosts far from the cap cost
        one primary-key probe each; only those it would cross have their URLs looked up."""
        cap = self._max_per_host
        per_host = Counter(entry.host for entry in fresh)
        taken = self._db.hosts.accepted(list(per_host))
        room = {host: cap - taken[host] for host, count in per_host.items() if taken[host] + count > cap}
        if not room:
            return fresh, []
        known = self._known([entry.url for entry in fresh if entry.host in room])
        kept: list[UrlEntry] = []
        capped: list[UrlEntry] = []
        decided: dict[str, bool] = {}  # url -> kept, for a URL listed twice in the batch
        for entry in fresh:
            url, host = entry.url, entry.host
            if host not in room or url in known:
                kept.append(entry)  # a duplicate goes to the insert, which counts it as one
                continue
            if url in decided:
                if decided[url]:
                    kept.append(entry)
                continue  # a second copy of a capped URL: a duplicate
            keep = decided[url] = room[host] > 0
            if keep:
                room[host] -= 1
                kept.append(entry)
            else:
                capped.append(entry)
        return kept, capped

    def _known(self, urls: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for placeholders, chunk in in_lists(urls):
            found.update(url for (url,) in self._db.conn.execute(
                f"SELECT url FROM urls WHERE url IN ({placeholders})", chunk))
        return found

    def _insert_rows(self, fresh: list[UrlEntry], not_before: float, cut: int | None) -> list[UrlEntry]:
        """Insert `fresh` (URLs not known to be rows); returns those that were new."""
        conn = self._db.conn
        now = self._db.clock()
        params: list[object] = []
        for entry in fresh:
            state = DEFERRED if cut is not None and entry.priority <= cut else QUEUED
            params += (entry.url, entry.host, entry.depth, entry.priority, entry.hops, entry.redirects, entry.via,
                       state, not_before, now)
        # Ids only grow (AUTOINCREMENT), so the rows this insert makes are those above it.
        highest_id = conn.execute("SELECT MAX(id) FROM urls").fetchone()[0] or 0
        inserted = 0
        start = 0
        for rows in chunk_sizes(len(fresh)):
            end = start + rows * _INSERT_ROW_PARAMS
            inserted += conn.execute(_INSERT_SQL[rows], params[start:end]).rowcount
            start = end
        if inserted == len(fresh):
            return fresh
        # Some were rows older than the recent set remembers, or listed twice: ask which are
        # new rather than have every insert return its rows (RETURNING costs a copy per row,
        # and this case is rare).
        new_urls = {url for (url,) in conn.execute("SELECT url FROM urls WHERE id > ?", (highest_id,))}
        accepted = []
        for entry in fresh:
            if entry.url in new_urls:
                new_urls.discard(entry.url)  # a later copy of it in this batch is a duplicate
                accepted.append(entry)
        return accepted

    def mark_seen(self, entries: Sequence[UrlEntry]) -> int:
        """Record URLs already fetched elsewhere: new ones enter the seen-set as done, and
        queued copies here are finished without a fetch. Returns how many changed."""
        core = self._db
        conn = core.conn
        changed = 0
        now = core.clock()
        new_hosts: Counter[str] = Counter()  # new rows per host: counted, never capped (fetched already)
        with core.transaction():
            for entry in entries:
                cursor = conn.execute(_INSERT_SEEN_SQL, (entry.url, entry.host, entry.depth, entry.priority,
                                                         entry.hops, entry.redirects, entry.via, now))
                if cursor.rowcount:
                    core.count(entry.host, DONE, 1)
                    new_hosts[entry.host] += 1
                    changed += 1
                    continue
                row = conn.execute(_MARK_SEEN_SQL, (entry.url,)).fetchone()
                if row is not None:
                    core.count(row[0], QUEUED, -1)
                    core.count(row[0], DONE, 1)
                    changed += 1
            core.hosts.ensure_rows(new_hosts)  # once per host, not per URL
            core.hosts.count_accepted(new_hosts)
        return changed

    def replica_add(self, urls: Sequence[str]) -> int:
        """Remember URLs a neighbour fetched (see the replica table): a queued replica of one
        becomes a fetched one."""
        with self._db.transaction():
            cursor = self._db.conn.executemany(
                "INSERT INTO replica (host, url) VALUES (?, ?) ON CONFLICT(host, url) DO UPDATE SET state = 2"
                " WHERE state != 2", [(host_of(url), url) for url in urls])
        self._has_replica = self._has_replica or bool(urls)
        return cursor.rowcount

    def _in_replica(self, entries: Sequence[UrlEntry]) -> set[str]:
        """The URLs of `entries` a neighbour fetched: a probe of the replica's key per URL, in
        one statement per list of pairs (an IN list of (host, url) pairs would scan the table)."""
        found: set[str] = set()
        execute = self._db.conn.execute
        # in_lists pads with copies of the last pair: a URL found twice, kept once in the set
        for _placeholders, pairs in in_lists([(entry.host, entry.url) for entry in entries]):
            found.update(url for (url,) in execute(_IN_REPLICA_SQL[len(pairs)],
                                                   [value for pair in pairs for value in pair]))
        return found
