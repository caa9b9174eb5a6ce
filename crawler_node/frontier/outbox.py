"""The outbox: URLs owed to other nodes, durable until the node they are for acknowledges them.

A row is a URL to crawl, or (seen = 1) one already fetched here that the owner should only
record in its seen-set; `replica = 1` marks what goes to a successor's replica (frontier.replica):
a URL queued here (seen = 0) or fetched here (seen = 1), the last row of a host in a batch
carrying the host's politeness. A replica can be part of a *refresh* (`refresh`, a token): the
successor's replica of the host made anew, ended by a row with no URL (`ends_refresh`) that
tells it the queued rows of the host that refresh did not name are stale. Rows are counted
per peer in memory, and the counts change only once the transaction that moved the rows has
committed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.records import AddResult, HostPoliteness, UrlEntry
from crawler_node.frontier.seen_set import SeenSet
from crawler_node.frontier.statements import INSERT_CHUNKS, chunk_sizes

_INSERT_COLUMNS = ("peer, url, host, depth, priority, hops, redirects, via, seen, replica, next_eligible,"
                   " crawl_delay, refresh")
_INSERT_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_ROW_PARAMS = _INSERT_ROW.count("?")
# Many rows per statement, as the frontier's own inserts (statements.chunk_sizes): 4.5 against
# 6.2 us per row of a batch of 200 with one statement per row. The rows keep their order, and
# so their ids: a peer gets them in the order they were put.
_INSERT_SQL = {rows: f"INSERT INTO outbox ({_INSERT_COLUMNS}) VALUES {', '.join([_INSERT_ROW] * rows)}"
               for rows in INSERT_CHUNKS}
_PEEK_SQL = ("SELECT id, url, host, depth, priority, hops, redirects, via, seen, replica, next_eligible, crawl_delay,"
             " refresh FROM outbox WHERE peer = ? ORDER BY id LIMIT ?")
# The URL of the row that ends a host's refresh: none (no URL is empty).
_REFRESH_END_URL = ""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One row owed to a peer. `politeness`: its host's, on a replica (None on most rows);
    `refresh`: the refresh of its host's replica it is part of (None on most rows)."""

    id: int
    entry: UrlEntry
    seen: bool
    replica: bool = False
    politeness: HostPoliteness | None = None
    refresh: str | None = None

    @property
    def ends_refresh(self) -> bool:
        """The last row of a host's refresh: it names no URL."""
        return self.refresh is not None and self.entry.url == _REFRESH_END_URL

    @property
    def politeness_only(self) -> bool:
        """A host's politeness for its successor alone, as soon as it is known (`put_politeness`):
        it names no URL."""
        return self.refresh is None and self.entry.url == _REFRESH_END_URL


def successors_of(entries: Sequence[UrlEntry], successor_of: Callable[[str], str | None]) -> dict[str, str]:
    """host -> its successor, for the hosts of `entries` that have one."""
    return {host: successor for host in {entry.host for entry in entries}
            if (successor := successor_of(host)) is not None}


class Outbox:
    def __init__(self, db: FrontierDb, seen: SeenSet) -> None:
        self._db = db
        self._seen = seen  # where a rerouted URL goes when it is this node's own
        self._counts: dict[str, int] = dict(db.conn.execute("SELECT peer, COUNT(*) FROM outbox GROUP BY peer"))

    def put(self, items: Sequence[tuple[str, UrlEntry]], *, seen: bool = False, replica: bool = False,
            politeness: Mapping[str, HostPoliteness] | None = None, refresh: str | None = None) -> None:
        """Owe each (peer, URL) to its peer; `seen`: fetched here, for its seen-set only;
        `replica`: for the peer's replica of this node's hosts, with `politeness` (by host)
        on the last row of each of its hosts, as part of the refresh `refresh` if given."""
        if not items:
            return
        carried: dict[int, HostPoliteness] = {}  # item index -> the politeness it carries
        if politeness:
            last = {entry.host: index for index, (_, entry) in enumerate(items)}
            carried = {index: politeness[host] for host, index in last.items() if host in politeness}
        params: list[object] = []
        flags = (int(seen), int(replica))
        for index, (peer, e) in enumerate(items):
            polite = carried.get(index)
            params += (peer, e.url, e.host, e.depth, e.priority, e.hops, e.redirects, e.via, *flags,
                       polite.next_eligible if polite else None, polite.crawl_delay if polite else None, refresh)
        with self._db.transaction():
            execute = self._db.conn.execute
            start = 0
            for rows in chunk_sizes(len(items)):
                end = start + rows * _INSERT_ROW_PARAMS
                execute(_INSERT_SQL[rows], params[start:end])
                start = end
            self._db.after_commit(partial(self._added, Counter(peer for peer, _ in items)))

    def put_replicas(self, entries: Sequence[UrlEntry], successors: Mapping[str, str]) -> None:
        """Owe the successor of each URL's host (`successors`, by host) a replica of it: the URLs
        were just queued here."""
        if successors:
            self.put([(successor, entry) for entry in entries if (successor := successors.get(entry.host))],
                     replica=True)

    def put_politeness(self, owed: Sequence[tuple[str, HostPoliteness]]) -> None:
        """Owe each (successor, politeness) its host's politeness now, in a row with no URL: a
        Crawl-delay learnt from robots.txt reaches the successor before the host's first page,
        whose fetched replica would carry it (a takeover in between knew of no delay)."""
        for peer, politeness in owed:
            self.put([(peer, UrlEntry(_REFRESH_END_URL, politeness.host, 0, 0))], replica=True,
                     politeness={politeness.host: politeness})

    def end_refresh(self, peer: str, hosts: Sequence[str], refresh: str) -> None:
        """Owe `peer` the end of the refresh `refresh` of each of `hosts`: a row with no URL,
        after the refresh's rows (it is put in the same transaction as they are, or after)."""
        self.put([(peer, UrlEntry(_REFRESH_END_URL, host, 0, 0)) for host in hosts], replica=True, refresh=refresh)

    def peek(self, peer: str, n: int) -> list[tuple[int, UrlEntry, bool]]:
        """The oldest `n` rows owed to `peer`, as (id, URL, seen), without removing them."""
        return [(row.id, row.entry, row.seen) for row in self.peek_rows(peer, n)]

    def peek_rows(self, peer: str, n: int) -> list[OutboxRow]:
        """The oldest `n` rows owed to `peer`, without removing them."""
        rows = self._db.conn.execute(_PEEK_SQL, (peer, n)).fetchall()
        return [OutboxRow(row[0], UrlEntry(row[1], row[2], row[3], row[4], row[5], row[6], row[7]), bool(row[8]),
                          bool(row[9]),
                          None if row[10] is None else HostPoliteness(row[2], row[10], row[11] or 0.0), row[12])
                for row in rows]

    def ack(self, peer: str, sent: Sequence[tuple[int, str]]) -> int:
        """Remove what ``peer`` acknowledged: the (id, url) pairs of the batch it answered.

        By id alone is not enough. A row id is reused once the highest rows are deleted, and
        a peer that froze with a batch in hand may answer long after its rows were rerouted
        and new rows, never sent, took their ids: matching the URL and the peer too removes
        only what was delivered (a rerouted row that was delivered anyway is sent again)."""
        with self._db.transaction():
            removed = self._db.conn.executemany(
                "DELETE FROM outbox WHERE id = ? AND peer = ? AND url = ?",
                [(row_id, peer, url) for row_id, url in sent]).rowcount
            self._db.after_commit(partial(self._moved, peer, Counter({None: removed})))
        return removed

    def counts(self) -> dict[str, int]:
        """Rows owed per peer (peers owed nothing are left out)."""
        return {peer: n for peer, n in self._counts.items() if n}

    def last_ids(self) -> dict[str, int]:
        """The id of the last row owed to each peer that is owed any (an index seek each)."""
        found = {}
        for peer in self.counts():
            (last,) = self._db.conn.execute("SELECT MAX(id) FROM outbox WHERE peer = ?", (peer,)).fetchone()
            if last is not None:
                found[peer] = int(last)
        return found

    def reroute(self, peer: str, route: Callable[[str], str | None], limit: int = 5000,
                successor_of: Callable[[str], str | None] | None = None) -> AddResult:
        """Re-decide where a peer's pending URLs go (it is down, or no longer the owner):
        ``route(host)`` names the new peer, or None for this node, which takes them in, and
        replicates them to ``successor_of(host)``. Returns what taking them in added to this
        node's queue."""
        mine: list[UrlEntry] = []
        mine_seen: list[UrlEntry] = []
        moved: list[tuple[str | None, int]] = []
        for row in self.peek_rows(peer, limit):
            entry = row.entry
            target = route(entry.host)
            # A replica of a URL queued here, for a successor that is down: dropped (this node
            # has the URL; the next successor gets what is queued from now on, and this one a
            # refresh when it is back, cluster.replica_keeper). The end of a refresh, and a row of
            # politeness alone, are for their successor alone: dropped too.
            if row.ends_refresh or row.politeness_only:
                if target != peer:
                    moved.append((None, row.id))
                continue
            if target is None and not (row.replica and not row.seen):
                (mine_seen if row.seen else mine).append(entry)
            if target != peer:
                moved.append((target, row.id))
        conn = self._db.conn
        with self._db.transaction():
            conn.executemany("UPDATE outbox SET peer = ? WHERE id = ?",
                             [(target, row_id) for target, row_id in moved if target is not None])
            conn.executemany("DELETE FROM outbox WHERE id = ?",
                             [(row_id,) for target, row_id in moved if target is None])
            if mine_seen:
                self._seen.mark_seen(mine_seen)
            result = self._seen.insert(mine, 0.0)
            if successor_of is not None:
                self.put_replicas(result.accepted, successors_of(result.accepted, successor_of))
            self._db.after_commit(partial(self._moved, peer, Counter(target for target, _ in moved)))
        return result

    def _added(self, per_peer: Counter[str]) -> None:
        for peer, count in per_peer.items():
            self._counts[peer] = self._counts.get(peer, 0) + count

    def _moved(self, peer: str, per_target: Counter[str | None]) -> None:
        """`peer`'s rows went to other peers, or (None) out of the outbox."""
        for target, count in per_target.items():
            self._counts[peer] = max(0, self._counts.get(peer, 0) - count)
            if target is not None:
                self._counts[target] = self._counts.get(target, 0) + count
