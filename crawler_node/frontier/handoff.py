"""Hosts changing owner: handing a host's rows to the node that owns it now, recording what
other nodes fetched, and paging through this node's hosts for ownership sweeps."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from crawler_node.frontier.db import FrontierDb
from crawler_node.frontier.outbox import Outbox
from crawler_node.frontier.records import DEFERRED, LEASED, QUEUED, HostPoliteness, UrlEntry
from crawler_node.frontier.recrawl import Recrawl
from crawler_node.frontier.seen_set import SeenSet
from crawler_node.frontier.statements import NOT_LEASED

# Leased rows (state 1 in a file before layout 8) stay.
_HOST_ROWS_SQL = (
    "SELECT id, url, depth, priority, hops, redirects, via, state, due_at IS NOT NULL FROM urls"
    f" WHERE host = ? AND state != ? AND {NOT_LEASED} LIMIT ?"
)


class Handoff:
    def __init__(self, db: FrontierDb, outbox: Outbox, seen: SeenSet, recrawl: Recrawl) -> None:
        self._db = db
        self._outbox = outbox
        self._seen = seen
        self._recrawl = recrawl  # counts the rows due for a recrawl, some of which leave here

    def handoff_host(self, host: str, peer: str, limit: int = 5000,
                     politeness: HostPoliteness | None = None) -> int:
        """Move a host this node no longer owns to ``peer``'s outbox in one transaction: its
        queued and deferred URLs to crawl, and its finished ones as seen, so the owner never
        repeats them, with the host's ``politeness`` here (the owner's next request waits for
        it). Leased rows stay until their fetch ends; call again later for those.
        Returns the rows moved; once none is left, the host's row (its politeness) goes too."""
        core = self._db
        with core.transaction():
            rows = core.conn.execute(_HOST_ROWS_SQL, (host, LEASED, limit)).fetchall()
            if rows:
                to_crawl: list[tuple[str, UrlEntry]] = []
                fetched: list[tuple[str, UrlEntry]] = []
                for _, url, depth, priority, hops, redirects, via, state, _ in rows:
                    item = (peer, UrlEntry(url, host, depth, priority, hops, redirects, via))
                    (to_crawl if state in (QUEUED, DEFERRED) else fetched).append(item)
                carried = {host: politeness} if politeness is not None else None
                self._outbox.put(to_crawl, politeness=None if fetched else carried)
                self._outbox.put(fetched, seen=True, politeness=carried)
                # This node is the host's successor (it covered for the owner, or the owner took
                # its arc from here): what it fetched stays known as a fetched replica, so a
                # second takeover does not fetch it all again (the chaos test's worst seed: 33%).
                self._seen.replica_add([entry.url for _, entry in fetched])
                core.conn.executemany("DELETE FROM urls WHERE id = ?", [(row[0],) for row in rows])
                for state, count in Counter(row[7] for row in rows).items():
                    core.count(host, state, -count)
                # The new owner records them as seen, never to be fetched again: what this
                # node knew of their next visit goes with the rows.
                self._recrawl.unscheduled(sum(row[8] for row in rows))
                core.forget_recent()  # rows are gone: their URLs are new again
            record = core.hosts.records.get(host)
            if len(rows) < limit and (record is None or not record.leased):
                core.hosts.remove_row(host)  # every row of it was selected: none is left
        return len(rows)

    def in_flight(self, hosts: Sequence[str]) -> dict[str, int]:
        """Leased rows of each of ``hosts`` that has any: fetches under way, which a handoff
        leaves here until they end."""
        records = self._db.hosts.records
        return {host: record.leased for host in hosts if (record := records.get(host)) is not None and record.leased}

    def mark_seen(self, entries: Sequence[UrlEntry]) -> int:
        """Record URLs another node already fetched: new ones enter the seen-set as done, and
        queued copies here are finished without a fetch. Returns how many changed."""
        return self._seen.mark_seen(entries)

    def replica_add(self, urls: Sequence[str]) -> int:
        """Remember URLs a neighbour fetched: if its hosts come here, they are not fetched again."""
        return self._seen.replica_add(urls)

    def hosts_after(self, after: str, limit: int) -> list[str]:
        """Every host that has rows, in key order, one page at a time: the hosts after
        `after` (start with ""), at most `limit`. Reads the hosts table, never scans urls."""
        return self._db.hosts.after(after, limit)
