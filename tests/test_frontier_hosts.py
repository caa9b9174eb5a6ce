"""The frontier's per-host table: durable politeness, records that leave memory when their
work is done (and come back with their politeness), and paging through every host."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from frontier_helpers import OLD_URLS_TABLE, FakeClock, entry

from crawler_node.frontier import FRONTIER_FILENAME, Frontier, FrontierBatch, HostPoliteness


def finish_all(frontier: Frontier, host: str) -> None:
    leases, _ = frontier.lease(host, 1000)
    frontier.apply(FrontierBatch(done=[lease.id for lease in leases]))


THROTTLED = HostPoliteness("a.test", next_eligible=1_000_120.0, crawl_delay=2.5, backoff_level=3,
                           last_throttle=1_000_000.0)


# -- durable politeness ----------------------------------------------------------------------


def test_politeness_is_saved_and_reopened(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path, clock=clock) as frontier:
        frontier.add([entry("a.test", 1), entry("b.test", 1)])
        frontier.save_hosts([THROTTLED, HostPoliteness("b.test", crawl_delay=1.0)])
        assert frontier.host("a.test").politeness == THROTTLED  # at once, in memory too
        assert {r.host: r.politeness for r in frontier.hosts_with_work()} == {
            "a.test": THROTTLED, "b.test": HostPoliteness("b.test", crawl_delay=1.0)}

    with Frontier(tmp_path, clock=clock) as reopened:
        assert reopened.host("a.test").politeness == THROTTLED
        assert reopened.host("b.test").politeness == HostPoliteness("b.test", crawl_delay=1.0)
        reopened.save_hosts([HostPoliteness("a.test")])  # back to defaults: nothing to report
        assert reopened.host("a.test").politeness is None
        assert reopened.totals()["hosts"] == 2


def test_the_last_politeness_of_a_host_in_one_call_wins(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1)])
    frontier.save_hosts([HostPoliteness("a.test", crawl_delay=9.0), THROTTLED])

    assert frontier.host("a.test").politeness == THROTTLED
    assert frontier.totals()["hosts"] == 1


# The first layout of the hosts table (host, next_eligible: no default), with urls rows for a
# host it never listed.
_TWO_COLUMN_HOSTS = OLD_URLS_TABLE + """
CREATE TABLE hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO hosts (host, next_eligible) VALUES ('a.test', 1234.5);
INSERT INTO urls (url, host, depth, priority, hops, state, attempts, lease_expires, enqueued_at) VALUES
    ('http://a.test/page/0', 'a.test', 0, 0, 0, 0, 0, NULL, 1.0),
    ('http://b.test/page/0', 'b.test', 0, 0, 0, 2, 1, NULL, 1.0);
"""


def test_opens_a_database_with_the_two_column_hosts_table(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with closing(sqlite3.connect(path)) as db:
        db.executescript(_TWO_COLUMN_HOSTS)

    with Frontier(path, clock=clock) as frontier:
        assert frontier.host("a.test").politeness == HostPoliteness("a.test", next_eligible=1234.5)
        assert frontier.totals()["hosts"] == 2  # b.test, which has only a finished row, too
        assert frontier.handoff.hosts_after("", 10) == ["a.test", "b.test"]
        frontier.save_hosts([THROTTLED])
        assert len(frontier.add([entry("c.test", 1)]).accepted) == 1  # a new host's row
        assert frontier.totals()["hosts"] == 3

    with Frontier(path, clock=clock) as reopened:
        assert reopened.host("a.test").politeness == THROTTLED
        assert reopened.handoff.hosts_after("", 10) == ["a.test", "b.test", "c.test"]
    with closing(sqlite3.connect(path)) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(hosts)")]
    assert columns == ["host", "next_eligible", "crawl_delay", "backoff_level", "last_throttle", "accepted"]


# -- bounded memory --------------------------------------------------------------------------


def test_hosts_done_with_leave_memory_and_stay_counted(tmp_path: Path, clock: FakeClock) -> None:
    hosts = [f"h{n:05}.test" for n in range(10_000)]
    with Frontier(tmp_path, clock=clock) as frontier:
        for start in range(0, len(hosts), 500):
            frontier.add([entry(host, 0) for host in hosts[start:start + 500]])
        assert frontier.snapshot()["hosts_in_memory"] == 10_000
        for start in range(0, len(hosts), 256):
            results = frontier.lease_many([(host, 1) for host in hosts[start:start + 256]])
            frontier.apply(FrontierBatch(done=[lease.id for leases, _ in results for lease in leases]))

        snapshot = frontier.snapshot()
        assert snapshot["hosts_in_memory"] == 0
        assert (snapshot["hosts"], snapshot["done"], snapshot["queued"], snapshot["hosts_with_work"]) == (
            10_000, 10_000, 0, 0)
        assert frontier.host(hosts[0]) is None
    with Frontier(tmp_path, clock=clock) as reopened:
        assert reopened.snapshot()["hosts_in_memory"] == 0
        assert reopened.totals()["hosts"] == 10_000


def test_a_record_stays_while_any_row_is_leased_or_deferred(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1), entry("a.test", 2, priority=-1)])
    (lease,), _ = frontier.lease("a.test", 1)
    frontier.shedding.defer_lowest(1, below_priority=0)

    assert frontier.host("a.test") is not None  # one leased, one deferred
    frontier.apply(FrontierBatch(done=[lease.id]))
    assert frontier.host("a.test").deferred == 1
    frontier.shedding.restore(1)
    finish_all(frontier, "a.test")
    assert frontier.host("a.test") is None
    assert frontier.snapshot()["hosts_in_memory"] == 0


def test_a_host_that_gets_work_again_reports_its_stored_politeness(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1), entry("b.test", 1)])
    frontier.save_hosts([THROTTLED])
    finish_all(frontier, "a.test")
    finish_all(frontier, "b.test")
    assert frontier.snapshot()["hosts_in_memory"] == 0

    again = frontier.add([entry("a.test", 2), entry("b.test", 2), entry("c.test", 1)])

    assert again.politeness == {"a.test": THROTTLED}  # b.test's is all defaults, c.test is new
    assert frontier.host("a.test").politeness == THROTTLED
    assert frontier.add([entry("a.test", 3)]).politeness == {}  # its record is still there
    finish_all(frontier, "a.test")
    through_apply = frontier.apply(FrontierBatch(add=[entry("a.test", 4)]))
    assert through_apply.politeness == {"a.test": THROTTLED}


def test_a_rerouted_url_reports_the_politeness_of_its_host(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1)])
    frontier.save_hosts([THROTTLED])
    finish_all(frontier, "a.test")
    frontier.outbox.put([("peer-2", entry("a.test", 2))])

    result = frontier.outbox.reroute("peer-2", lambda host: None)  # the peer is down: ours

    assert [e.url for e in result.accepted] == ["http://a.test/page/2"]
    assert result.politeness == {"a.test": THROTTLED}


# -- every host, page by page ----------------------------------------------------------------


def test_hosts_after_pages_through_every_host_in_order(frontier: Frontier) -> None:
    hosts = [f"h{(n * 7919) % 25:02}.test" for n in range(25)]  # added out of order
    frontier.add([entry(host, 0) for host in hosts])
    for host in hosts[:10]:
        finish_all(frontier, host)  # out of memory, still rows on disk
    frontier.handoff.mark_seen([entry("seen-only.test", 1)])  # only a finished row

    pages: list[list[str]] = []
    after = ""
    while page := frontier.handoff.hosts_after(after, 7):
        pages.append(page)
        after = page[-1]

    assert [len(page) for page in pages] == [7, 7, 7, 5]
    assert [host for page in pages for host in page] == sorted([*hosts, "seen-only.test"])
    assert frontier.totals()["hosts"] == 26


def test_a_host_keeps_its_row_while_a_lease_is_out(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(3)])
    (lease,), _ = frontier.lease("a.test", 1)

    assert frontier.handoff.handoff_host("a.test", "peer-2") == 2
    assert frontier.handoff.hosts_after("", 10) == ["a.test"]
    frontier.apply(FrontierBatch(done=[lease.id]))
    assert frontier.handoff.handoff_host("a.test", "peer-2") == 1  # the fetched one, as seen

    assert frontier.handoff.hosts_after("", 10) == []
    assert frontier.totals()["hosts"] == 0
    assert frontier.outbox.counts() == {"peer-2": 3}
