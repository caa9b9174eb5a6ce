"""What a node keeps of its neighbours' frontiers, as their successor on the ring, so that a
neighbour that dies, or comes back with an empty data directory, loses nothing.

A node sends the successor of each of its hosts (node.store_stage, node.intake) the URLs it
queues for that host (replica rows in state 0), the URLs it fetched (state 2: the fetched
replica turns a queued row into a fetched one), and the host's politeness (`replica_hosts`).
What the successor does with them:

- *takeover* (the neighbour is down, its hosts route here): `promote` moves the queued rows
  of the hosts served here now into this node's queue; the fetched ones make the URLs they
  name count as seen when met (frontier.seen_set); the politeness is taken with the host's
  record (`politeness_for`, called by hosts.HostRecords.ensure), so the Crawl-delay and the
  next-eligible time the neighbour had hold across the takeover;
- *empty return* (the neighbour answers with a new incarnation: a new database, see
  schema.incarnation): `give_back` puts every replica row of the hosts it owns in its outbox,
  the queued ones to crawl and the fetched ones as seen. Hosts taken over while it was away
  go back through the ordinary handback (cluster.sweep) as ever. And what it kept of this
  node went with its directory: `resend` replicates this node's queue to it again, for the
  hosts it is the successor of.
- *return* (a successor seen down comes back, with the same frontier: restarted, frozen or cut
  off): what this node queued and fetched while it was away went to another successor, so its
  queued rows include URLs fetched since; promoted, they would be fetched again. The peer is
  owed a *refresh* (`owe`, durable): `resend` with a token, the unfinished URLs of the hosts it
  is the successor of, each host ended by a row with no URL (frontier.outbox), then the URLs
  of those hosts it finished (`resend_finished`), as fetched replicas. On its side,
  `refresh` tags the queued rows the refresh names and, at a host's end, drops the queued
  rows of the host it did not name; fetched rows stay. A refresh spans outbox batches: rows
  of the host from before its end that carry another token (or none) are the stale ones, and
  the sender's outbox delivers a peer's rows in order. Until the end arrives nothing is
  dropped: an owner that dies mid-refresh costs duplicates, not URLs.

The replica is a copy, not a contract: rows the neighbour sent before a successor changed
stay at the old successor (a new successor holds what is queued or fetched from then on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.outbox import Outbox, successors_of
from crawler_node.frontier.records import AddResult, HostPoliteness, HostRefresh, UrlEntry
from crawler_node.frontier.schema import incarnation
from crawler_node.frontier.seen_set import SeenSet
from crawler_node.frontier.statements import in_lists

# A neighbour's Crawl-delay or pause is honoured for this long at most: a peer's word (or a
# clock far off) never holds a host back for good.
MAX_POLITENESS_AHEAD_S = 3600.0


def clamped(record: HostPoliteness, now: float) -> HostPoliteness:
    """A neighbour's politeness for a host, held to MAX_POLITENESS_AHEAD_S from `now`."""
    return HostPoliteness(record.host, min(record.next_eligible, now + MAX_POLITENESS_AHEAD_S),
                          min(record.crawl_delay, MAX_POLITENESS_AHEAD_S))


_ADD_QUEUED_SQL = ("INSERT INTO replica (host, url, state, depth, priority, hops, redirects, via)"
                   " VALUES (?, ?, 0, ?, ?, ?, ?, ?) ON CONFLICT(host, url) DO NOTHING")
_ADD_QUEUED_HOST_SQL = "INSERT INTO replica_queued_hosts (host) VALUES (?) ON CONFLICT(host) DO NOTHING"
_ADD_POLITENESS_SQL = (
    "INSERT INTO replica_hosts (host, next_eligible, crawl_delay) VALUES (?, ?, ?) ON CONFLICT(host)"
    " DO UPDATE SET next_eligible = MAX(next_eligible, excluded.next_eligible), crawl_delay = excluded.crawl_delay")
_QUEUED_HOSTS_SQL = "SELECT host FROM replica_queued_hosts WHERE host > ? ORDER BY host LIMIT ?"
_QUEUED_ROWS_SQL = ("SELECT url, depth, priority, hops, redirects, via FROM replica"
                    " WHERE host = ? AND state = 0")
# Queued (leased ones among them: schema) and deferred rows.
_UNFINISHED_SQL = ("SELECT url, depth, priority, hops, redirects, via FROM urls WHERE host = ? AND state = 0"
                   " UNION ALL"
                   " SELECT url, depth, priority, hops, redirects, via FROM urls WHERE host = ? AND state = 4")
_FINISHED_PAGE_SQL = ("SELECT id, url, host, state, depth, priority, hops, redirects, via FROM urls"
                      " WHERE id > ? ORDER BY id LIMIT ?")
_PAGE_SQL = ("SELECT url, host, state, depth, priority, hops, redirects, via FROM replica"
             " WHERE (host, url) > (?, ?) ORDER BY host, url LIMIT ?")
# Where a page of give_back starts: after this (host, url); ("", "") is before every row.
Cursor = tuple[str, str]
FIRST: Cursor = ("", "")


class Replica:
    def __init__(self, db: FrontierDb, seen: SeenSet, outbox: Outbox) -> None:
        self._db = db
        self._seen = seen  # where promoted rows are queued
        self._outbox = outbox  # where rows given back go
        self.incarnation = incarnation(db.conn)
        self._has_politeness = db.conn.execute("SELECT 1 FROM replica_hosts LIMIT 1").fetchone() is not None

    # -- what a neighbour sends -------------------------------------------------------------

    def add_queued(self, entries: Sequence[UrlEntry]) -> int:
        """Remember URLs a neighbour has queued; a URL it fetched already stays fetched."""
        conn = self._db.conn
        with self._db.transaction():
            added = conn.executemany(_ADD_QUEUED_SQL, [
                (e.host, e.url, e.depth, e.priority, e.hops, e.redirects, e.via) for e in entries]).rowcount
            conn.executemany(_ADD_QUEUED_HOST_SQL, [(host,) for host in {e.host for e in entries}])
            return added

    def add_politeness(self, records: Sequence[HostPoliteness]) -> None:
        """Remember a neighbour's politeness for its hosts (the later next-eligible time wins)."""
        if not records:
            return
        now = self._db.clock()
        with self._db.transaction():
            self._db.conn.executemany(_ADD_POLITENESS_SQL, [
                (r.host, r.next_eligible, r.crawl_delay) for r in (clamped(record, now) for record in records)])
        self._has_politeness = True

    def refresh(self, refreshes: Sequence[HostRefresh], queued: Sequence[UrlEntry]) -> None:
        """A neighbour's refresh of its hosts' replica (see the module's docstring): the queued
        rows of `queued` (just taken in) whose host is refreshed carry its token; at a host's end,
        the queued rows of the host without it are stale and go."""
        tokens = {mark.host: mark.token for mark in refreshes}
        conn = self._db.conn
        with self._db.transaction():
            conn.executemany("UPDATE replica SET refresh = ? WHERE host = ? AND url = ? AND state = 0",
                             [(tokens[e.host], e.host, e.url) for e in queued if e.host in tokens])
            conn.executemany("DELETE FROM replica WHERE host = ? AND state = 0 AND refresh IS NOT ?",
                             [(mark.host, mark.token) for mark in refreshes if mark.complete])

    # -- takeover ---------------------------------------------------------------------------

    def politeness_for(self, hosts: Sequence[str]) -> dict[str, HostPoliteness]:
        """The neighbour's politeness for those of `hosts` it sent one, taken (the rows go) in
        the caller's transaction. A request of the neighbour may have been on its way when it
        died, unreplicated: the first one here waits a Crawl-delay from now, too."""
        if not self._has_politeness or not hosts:
            return {}
        conn, now = self._db.conn, self._db.clock()
        found: dict[str, HostPoliteness] = {}
        for placeholders, chunk in in_lists(list(hosts)):
            for host, next_eligible, crawl_delay in conn.execute(
                    f"SELECT host, next_eligible, crawl_delay FROM replica_hosts WHERE host IN ({placeholders})",
                    chunk):
                found[host] = HostPoliteness(host, max(next_eligible, now + crawl_delay if crawl_delay else 0.0),
                                             crawl_delay)
        if found:
            conn.executemany("DELETE FROM replica_hosts WHERE host = ?", [(host,) for host in found])
        return found

    def promote(self, serves: Callable[[str], bool], after: str, limit: int,
                successor_of: Callable[[str], str | None] | None = None) -> tuple[AddResult, str | None]:
        """Queue here the replicated queued URLs of the hosts this node serves now, a page of
        `limit` hosts after `after` (start with ""), and replicate them to `successor_of(host)`.
        Returns what was queued and where the next page starts (None: that was the last).
        The hosts are those of `replica_queued_hosts`: a page reads hosts, never the fetched
        rows of a neighbour's hosts. The callables run on the frontier's thread."""
        core = self._db
        conn = core.conn
        hosts = [host for (host,) in conn.execute(_QUEUED_HOSTS_SQL, (after, limit))]
        served = [host for host in hosts if serves(host)]
        result = AddResult(accepted=[], duplicates=0)
        with core.transaction():
            for host in served:
                entries = [UrlEntry(url, host, depth, priority, hops, redirects, via)
                           for url, depth, priority, hops, redirects, via in conn.execute(_QUEUED_ROWS_SQL, (host,))]
                added = self._seen.insert(entries, 0.0)
                if successor_of is not None:
                    self._outbox.put_replicas(added.accepted, successors_of(added.accepted, successor_of))
                result.accepted += added.accepted
                result.deferred += added.deferred
                result.duplicates += added.duplicates
                result.capped += added.capped
                result.politeness.update(added.politeness)
                result.parked |= added.parked
                conn.execute("DELETE FROM replica WHERE host = ? AND state = 0", (host,))
                conn.execute("DELETE FROM replica_queued_hosts WHERE host = ?", (host,))
        return result, (hosts[-1] if len(hosts) == limit else None)

    # -- a neighbour back with an empty data directory -----------------------------------------

    def heard(self, peer: str, peer_incarnation: str) -> bool:
        """True when `peer` had another incarnation before (its frontier is not the one it had:
        it gets its replica back, then `record` the new one). One heard first is recorded."""
        row = self._db.conn.execute("SELECT incarnation FROM peers WHERE peer = ?", (peer,)).fetchone()
        if row is None:
            self.record(peer, peer_incarnation)
        return row is not None and row[0] != peer_incarnation

    def record(self, peer: str, peer_incarnation: str) -> None:
        """`peer`'s incarnation, once what it is owed for a new one is in the outbox."""
        with self._db.transaction():
            self._db.conn.execute("INSERT INTO peers (peer, incarnation) VALUES (?, ?) ON CONFLICT(peer)"
                                    " DO UPDATE SET incarnation = excluded.incarnation", (peer, peer_incarnation))

    def give_back(self, peer: str, route: Callable[[str], str | None], after: Cursor,
                  limit: int) -> tuple[int, Cursor | None]:
        """Owe `peer` the replica rows, a page of `limit` after the row `after` (start with FIRST),
        of the hosts it crawls now (`route(host) == peer`): queued ones to crawl, fetched ones
        as seen. The rows stay: this node is still its successor. Returns the rows owed and
        where the next page starts (None: that was the last)."""
        rows = self._db.conn.execute(_PAGE_SQL, (*after, limit)).fetchall()
        to_crawl: list[tuple[str, UrlEntry]] = []
        fetched: list[tuple[str, UrlEntry]] = []
        for url, host, state, depth, priority, hops, redirects, via in rows:
            if route(host) != peer:
                continue
            (to_crawl if state == 0 else fetched).append(
                (peer, UrlEntry(url, host, depth, priority, hops, redirects, via)))
        with self._db.transaction():
            self._outbox.put(fetched, seen=True)
            self._outbox.put(to_crawl)
        return len(to_crawl) + len(fetched), ((rows[-1][1], rows[-1][0]) if len(rows) == limit else None)

    def resend(self, peer: str, successor_of: Callable[[str], str | None], after: str,
               limit: int, refresh: str | None = None) -> tuple[int, str | None]:
        """Owe `peer`, a successor that came back empty or that was away, a replica of the
        unfinished (queued, leased, deferred) URLs of this node's hosts it is the successor of
        now (`successor_of(host) == peer`), a page of `limit` hosts after `after` (start with
        ""). Back empty, its replica of them went with its data directory: without this, they
        would be lost with this node's. With `refresh` (a token), each host's rows end with the
        end of its refresh, even a host with nothing unfinished: the peer then drops the queued
        rows of the host the refresh did not name. Returns the rows owed and where the next page
        starts (None: that was the last)."""
        core = self._db
        hosts = core.hosts.after(after, limit)
        owed: list[UrlEntry] = []
        wanted = {host for host in hosts if successor_of(host) == peer}
        # queued (leased ones too: a fetch under way ends, and is replicated as fetched, unless
        # this node dies first) and deferred rows, a probe of each partial index
        for host in sorted(wanted):
            rows = core.conn.execute(_UNFINISHED_SQL, (host, host))
            owed += [UrlEntry(url, host, depth, priority, hops, redirects, via)
                     for url, depth, priority, hops, redirects, via in rows]
        with core.transaction():
            self._outbox.put([(peer, entry) for entry in owed], replica=True, refresh=refresh)
            if refresh is not None:
                # in the same transaction: no other row of these hosts comes between
                self._outbox.end_refresh(peer, sorted(wanted), refresh)
        return len(owed) + (len(wanted) if refresh is not None else 0), (hosts[-1] if len(hosts) == limit else None)

    def resend_finished(self, peer: str, successor_of: Callable[[str], str | None], after: int,
                        limit: int) -> tuple[int, int | None]:
        """Owe `peer`, with a refresh or a resend, the URLs this node finished (fetched or gave
        up on) of its hosts `peer` is the successor of, as fetched replicas, a page of `limit`
        rows after the row id `after` (start with 0): what it kept of them was lost with its
        directory, or what was fetched while it was away went to another successor. Without
        them, a takeover fetches again each one it meets as a link. (Done rows have no index
        by host: a refresh reads the table once, by id.) Returns the rows owed and where the
        next page starts (None: that was the last)."""
        rows = self._db.conn.execute(_FINISHED_PAGE_SQL, (after, limit)).fetchall()
        owed = [(peer, UrlEntry(url, host, depth, priority, hops, redirects, via))
                for _, url, host, state, depth, priority, hops, redirects, via in rows
                if state in (2, 3) and successor_of(host) == peer]
        with self._db.transaction():
            self._outbox.put(owed, seen=True, replica=True)
        return len(owed), (rows[-1][0] if len(rows) == limit else None)

    # -- a successor back after being away ----------------------------------------------------

    def owe(self, peers: Sequence[str]) -> None:
        """`peers` were seen down: each is owed a refresh once back."""
        with self._db.transaction():
            self._db.conn.executemany("INSERT INTO refresh_owed (peer) VALUES (?) ON CONFLICT(peer) DO NOTHING",
                                        [(peer,) for peer in peers])

    def owed(self) -> set[str]:
        """The peers owed a refresh."""
        return {peer for (peer,) in self._db.conn.execute("SELECT peer FROM refresh_owed")}

    def refreshed(self, peer: str) -> None:
        """`peer`'s refresh is all in the outbox (it is owed again if seen down again)."""
        with self._db.transaction():
            self._db.conn.execute("DELETE FROM refresh_owed WHERE peer = ?", (peer,))

    def counts(self) -> dict[str, int]:
        """Replica rows by state (two scans of the table: for a test or an operator, not a timer)."""
        conn = self._db.conn
        queued = conn.execute("SELECT COUNT(*) FROM replica WHERE state = 0").fetchone()[0]
        total = conn.execute("SELECT COUNT(*) FROM replica").fetchone()[0]
        return {"queued": queued, "fetched": total - queued}

