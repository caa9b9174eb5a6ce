"""The frontier keeps where a URL was found (`via`) and what a recrawl needs: the validators and
visits a fetch leaves (FrontierBatch.recrawl), and done URLs queued again when they are due
(Frontier.requeue_due). Through the rows, the outbox, handoff, the peer wire, a database of the
layout before, and the async shell."""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
from frontier_helpers import FakeClock, entry
from wire_helpers import forwarded_on_the_wire

from crawler_node.cluster.wire import MAX_VIA_LENGTH, decode_urls
from crawler_node.frontier import (
    FRONTIER_FILENAME,
    Frontier,
    FrontierBatch,
    FrontierService,
    InboundBatch,
    Lease,
    UrlEntry,
)
from crawler_node.frontier.recrawl import _REQUEUE_SQL
from crawler_node.frontier.schema import SCHEMA_VERSION

DISCOVERY = 0
RECRAWL = DISCOVERY - 1  # the node queues recrawls one below discovery


def found(host: str, n: int, via: str | None, **fields: int) -> UrlEntry:
    return UrlEntry(url=f"http://{host}/page/{n}", host=host, via=via, **fields)


def stored(frontier: Frontier, url: str, columns: str) -> tuple:
    with closing(sqlite3.connect(frontier.path)) as db:
        return db.execute(f"SELECT {columns} FROM urls WHERE url = ?", (url,)).fetchone()


def fetch_all(frontier: Frontier, host: str, recrawl_at: float | None = None,
              etag: str | None = None, last_modified: str | None = None) -> list[Lease]:
    """Lease every ready URL of `host` and record each as fetched, due again at `recrawl_at`."""
    leases, _ = frontier.lease(host, 1000)
    frontier.apply(FrontierBatch(done=[lease.id for lease in leases],
                                 recrawl=[(lease.id, recrawl_at, etag, last_modified) for lease in leases]))
    return leases


def queued(frontier: Frontier) -> dict[str, int]:
    return {record.host: record.queued for record in frontier.hosts_with_work()}


# -- via -----------------------------------------------------------------------------------------


def test_via_travels_from_add_to_the_lease(frontier: Frontier) -> None:
    frontier.add([found("a.test", 1, "http://a.test/"), found("a.test", 2, None), entry("a.test", 3)])

    leases, _ = frontier.lease("a.test", 10)

    assert [(lease.url, lease.via) for lease in leases] == [
        ("http://a.test/page/1", "http://a.test/"), ("http://a.test/page/2", None), ("http://a.test/page/3", None)]
    assert stored(frontier, "http://a.test/page/1", "via") == ("http://a.test/",)


def test_via_travels_through_the_outbox(frontier: Frontier) -> None:
    frontier.outbox.put([("b", found("b.test", 1, "http://a.test/x")), ("b", found("b.test", 2, None))])
    frontier.apply(FrontierBatch(forward=[("b", found("b.test", 3, "http://a.test/y"))],
                                 replicate=[("b", found("b.test", 4, "http://b.test/"))]))

    owed = [(e.url, e.via, seen) for _, e, seen in frontier.outbox.peek("b", 10)]

    assert owed == [("http://b.test/page/1", "http://a.test/x", False),
                    ("http://b.test/page/2", None, False),
                    ("http://b.test/page/3", "http://a.test/y", False),
                    ("http://b.test/page/4", "http://b.test/", True)]


def test_via_survives_a_handoff_and_a_reroute_back(frontier: Frontier) -> None:
    frontier.add([found("a.test", 1, "http://a.test/"), found("a.test", 2, "http://z.test/")])
    [first] = frontier.lease("a.test", 1)[0]
    frontier.apply(FrontierBatch(done=[first.id]))

    assert frontier.handoff.handoff_host("a.test", "b") == 2
    owed = {e.url: (e.via, seen) for _, e, seen in frontier.outbox.peek("b", 10)}
    assert owed == {"http://a.test/page/1": ("http://a.test/", True), "http://a.test/page/2": ("http://z.test/", False)}

    frontier.outbox.reroute("b", lambda host: None)  # "b" is gone: this node takes them back
    [lease] = frontier.lease("a.test", 10)[0]
    assert (lease.url, lease.via) == ("http://a.test/page/2", "http://z.test/")
    assert stored(frontier, "http://a.test/page/1", "state, via") == (2, "http://a.test/")  # seen, kept


def test_urls_taken_in_from_a_peer_keep_their_via(frontier: Frontier) -> None:
    frontier.take_in(InboundBatch(add=[found("a.test", 1, "http://p.test/")],
                                  forward=[("c", found("c.test", 1, "http://p.test/"))]))

    assert frontier.lease("a.test", 1)[0][0].via == "http://p.test/"
    assert [e.via for _, e, _ in frontier.outbox.peek("c", 10)] == ["http://p.test/"]


# -- what a fetch leaves -------------------------------------------------------------------------


def test_a_recorded_fetch_keeps_its_validators_and_counts_a_visit(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1), entry("a.test", 2), entry("a.test", 3)])
    one, two, three = frontier.lease("a.test", 3)[0]
    assert (one.etag, one.last_modified, one.visits) == (None, None, 0)

    frontier.apply(FrontierBatch(done=[one.id, two.id], failed=[three.id], recrawl=[
        (one.id, clock.now + 3600, '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT"),
        (three.id, clock.now + 60, '"x"', None),  # not done: nothing is kept for it
    ]))

    columns = "state, due_at, etag, last_modified, visits"
    assert stored(frontier, one.url, columns) == (2, clock.now + 3600, '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT", 1)
    assert stored(frontier, two.url, columns) == (2, None, None, None, 0)  # done, not listed: as before
    assert stored(frontier, three.url, columns) == (3, None, None, None, 0)


def test_a_fetch_recorded_without_a_due_time_is_never_recrawled(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    [lease] = fetch_all(frontier, "a.test", None, '"e"')

    assert stored(frontier, lease.url, "due_at, etag, visits") == (None, '"e"', 1)
    clock.now += 10**9
    assert frontier.due_count(clock.now) == 0 and frontier.requeue_due(clock.now, 10, RECRAWL) == Counter()


def test_a_late_or_repeated_outcome_records_one_visit(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    [lease] = frontier.lease("a.test", 1)[0]
    recrawl = (lease.id, clock.now + 60, '"a"', None)

    frontier.apply(FrontierBatch(done=[lease.id, lease.id], recrawl=[recrawl, recrawl]))
    frontier.apply(FrontierBatch(done=[lease.id], recrawl=[(lease.id, clock.now + 1, '"b"', None)]))  # finished

    assert stored(frontier, lease.url, "due_at, etag, visits") == (clock.now + 60, '"a"', 1)


def test_a_recrawl_lease_carries_what_the_last_fetch_left(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([found("a.test", 1, "http://a.test/", depth=2, hops=1, redirects=1)])
    fetch_all(frontier, "a.test", clock.now + 100, '"v1"', "Tue, 02 Jan 2024 00:00:00 GMT")
    clock.now += 100

    assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1})
    [lease] = frontier.lease("a.test", 10)[0]

    assert (lease.etag, lease.last_modified, lease.visits) == ('"v1"', "Tue, 02 Jan 2024 00:00:00 GMT", 1)
    assert (lease.via, lease.depth, lease.hops, lease.redirects) == ("http://a.test/", 2, 1, 1)
    assert (lease.priority, lease.attempts) == (RECRAWL, 1)  # a fresh retry budget
    # The second visit: a 304 keeps the validators, which the node sends back as they were.
    frontier.apply(FrontierBatch(done=[lease.id], recrawl=[(lease.id, clock.now + 100, lease.etag, None)]))
    clock.now += 100
    frontier.requeue_due(clock.now, 10, RECRAWL)
    [again] = frontier.lease("a.test", 10)[0]
    assert (again.etag, again.last_modified, again.visits) == ('"v1"', None, 2)


# -- requeue_due ---------------------------------------------------------------------------------


def test_only_rows_due_are_queued_again_the_longest_due_first(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", n) for n in range(5)])
    start = clock.now
    leases, _ = frontier.lease("a.test", 5)
    due = {leases[0].id: start + 10, leases[1].id: start + 30, leases[2].id: start + 20, leases[3].id: start + 99}
    frontier.apply(FrontierBatch(done=[lease.id for lease in leases],
                                 recrawl=[(row_id, at, None, None) for row_id, at in due.items()]))
    assert (frontier.totals()["recrawl_scheduled"], frontier.snapshot()["recrawl_due"]) == (4, 0)

    clock.now = start + 30
    assert frontier.due_count(clock.now) == 3 and frontier.snapshot()["recrawl_due"] == 3
    assert frontier.requeue_due(clock.now, 2, RECRAWL) == Counter({"a.test": 2})  # limit: the two due longest
    assert frontier.due_count(clock.now) == 1
    assert [lease.url for lease in frontier.lease("a.test", 10)[0]] == [leases[0].url, leases[2].url]

    assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1})
    assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter()  # once: no longer due
    assert [(lease.url, lease.attempts) for lease in frontier.lease("a.test", 10)[0]] == [(leases[1].url, 1)]
    totals = frontier.snapshot()
    assert (totals["recrawl_scheduled"], totals["recrawl_due"], totals["leased"], totals["done"]) == (1, 0, 3, 2)
    # a fresh retry budget: no attempt in the row (a lease's is counted there when it ends)
    assert stored(frontier, leases[1].url, "due_at, enqueued_at, not_before, attempts") == (None, start + 30, 0, 0)


def test_requeued_work_reaches_the_host_records(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1), entry("b.test", 1), entry("b.test", 2)])
    for host in ("a.test", "b.test"):
        fetch_all(frontier, host, clock.now + 10)
    frontier.add([entry("a.test", 2)])  # a.test has work; b.test rests, with no record in memory
    assert frontier.host("b.test") is None and queued(frontier) == {"a.test": 1}

    clock.now += 10
    assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1, "b.test": 2})

    assert queued(frontier) == {"a.test": 2, "b.test": 2}
    assert (frontier.totals()["queued"], frontier.totals()["hosts_with_work"]) == (4, 2)
    leases, _ = frontier.lease("b.test", 10)
    frontier.apply(FrontierBatch(done=[lease.id for lease in leases]))
    assert frontier.host("b.test") is None  # finished again: out of memory once more


def test_discovered_urls_are_leased_before_recrawls(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    fetch_all(frontier, "a.test", clock.now)
    frontier.add([entry("a.test", 2, priority=DISCOVERY), entry("a.test", 3, priority=DISCOVERY)])

    frontier.requeue_due(clock.now, 10, RECRAWL)
    leases, _ = frontier.lease("a.test", 10)

    assert [(lease.url, lease.priority) for lease in leases] == [
        ("http://a.test/page/2", DISCOVERY), ("http://a.test/page/3", DISCOVERY), ("http://a.test/page/1", RECRAWL)]


def test_a_requeued_row_is_retried_and_expires_like_any_other(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    fetch_all(frontier, "a.test", clock.now)
    frontier.requeue_due(clock.now, 10, RECRAWL)

    [lease] = frontier.lease("a.test", 1)[0]
    frontier.apply(FrontierBatch(retry=[(lease.id, clock.now + 5)]))
    assert frontier.lease("a.test", 1) == ([], clock.now + 5)
    clock.now += 5
    [lease] = frontier.lease("a.test", 1)[0]
    assert lease.attempts == 2
    clock.now += 61
    assert frontier.expire_leases() == 1 and queued(frontier) == {"a.test": 1}


def test_shedding_parks_requeued_rows_and_keeps_recrawls_out_meanwhile(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", n) for n in range(3)])
    fetch_all(frontier, "a.test", clock.now)
    assert frontier.requeue_due(clock.now, 2, RECRAWL) == Counter({"a.test": 2})

    assert frontier.shedding.defer_lowest(5, below_priority=DISCOVERY) == Counter({"a.test": 2})
    assert frontier.host("a.test").deferred == 2  # type: ignore[union-attr]
    # While recrawl's priority is shed, due rows stay due rather than be parked too.
    assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter() and frontier.due_count(clock.now) == 1
    assert frontier.requeue_due(clock.now, 10, DISCOVERY) == Counter({"a.test": 1})  # above the cut

    frontier.shedding.stop()
    assert frontier.shedding.restore(10) == Counter({"a.test": 2})
    assert len(frontier.lease("a.test", 10)[0]) == 3


def test_a_requeued_host_is_handed_off_with_its_via(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([found("a.test", 1, "http://a.test/")])
    fetch_all(frontier, "a.test", clock.now)
    frontier.requeue_due(clock.now, 10, RECRAWL)

    assert frontier.handoff.handoff_host("a.test", "b") == 1
    [(_, owed, seen)] = frontier.outbox.peek("b", 10)
    assert (owed.url, owed.via, owed.priority, seen) == ("http://a.test/page/1", "http://a.test/", RECRAWL, False)
    assert frontier.host("a.test") is None and frontier.totals()["queued"] == 0


def test_the_scheduled_count_follows_handoffs_and_rollbacks(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1), entry("a.test", 2), entry("b.test", 1)])
    fetch_all(frontier, "a.test", clock.now + 10)
    fetch_all(frontier, "b.test", None)
    assert frontier.totals()["recrawl_scheduled"] == 2

    frontier.add([entry("b.test", 2)])
    [lease] = frontier.lease("b.test", 1)[0]
    broken = UrlEntry(url=None, host="c.test")  # type: ignore[arg-type]  # violates NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        frontier.apply(FrontierBatch(done=[lease.id], recrawl=[(lease.id, clock.now, None, None)], add=[broken]))
    assert frontier.totals()["recrawl_scheduled"] == 2  # rolled back: nothing changed
    assert stored(frontier, lease.url, "state, due_at, visits") == (0, None, 0)  # leased (`leases`) as it was
    assert frontier.snapshot()["leased"] == 1

    assert frontier.handoff.handoff_host("a.test", "peer") == 2
    assert frontier.totals()["recrawl_scheduled"] == 0 and frontier.due_count(clock.now + 10) == 0


def test_requeue_walks_the_due_index(frontier: Frontier) -> None:
    conn = sqlite3.connect(frontier.path)
    with closing(conn):
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {_REQUEUE_SQL}", (0, 0.0, 0.0, 1)))
    assert "USING INDEX urls_due" in plan and "TEMP B-TREE" not in plan  # no scan, no sort


def test_recrawl_state_survives_a_reopen(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path, clock=clock) as frontier:
        frontier.add([found("a.test", 1, "http://a.test/")])
        fetch_all(frontier, "a.test", clock.now + 5, '"e"', None)
    clock.now += 5
    with Frontier(tmp_path, clock=clock) as reopened:
        assert (reopened.totals()["recrawl_scheduled"], reopened.due_count(clock.now)) == (1, 1)
        assert reopened.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1})
        [lease] = reopened.lease("a.test", 1)[0]
        assert (lease.via, lease.etag, lease.visits) == ("http://a.test/", '"e"', 1)


# -- a database of layout 2 ----------------------------------------------------------------------

# The frontier's tables as layout 2 made them (PRAGMA user_version = 2): redirects, no via, no
# recrawl columns, no urls_due index.
_LAYOUT_2 = """
CREATE TABLE urls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    state INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    lease_expires REAL,
    enqueued_at REAL NOT NULL,
    redirects INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX urls_ready ON urls(host, priority DESC, id, not_before) WHERE state = 0;
CREATE INDEX urls_age ON urls(enqueued_at) WHERE state = 0;
CREATE INDEX urls_deferred ON urls(host, priority DESC, id) WHERE state = 4;
CREATE TABLE hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL DEFAULT 0,
    crawl_delay REAL NOT NULL DEFAULT 0,
    backoff_level INTEGER NOT NULL DEFAULT 0,
    last_throttle REAL
) WITHOUT ROWID;
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    peer TEXT NOT NULL,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    seen INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX outbox_peer ON outbox(peer, id);
CREATE TABLE replica (url TEXT PRIMARY KEY) WITHOUT ROWID;
INSERT INTO hosts (host) VALUES ('a.test');
INSERT INTO urls (url, host, depth, priority, hops, state, attempts, enqueued_at, redirects) VALUES
    ('http://a.test/page/0', 'a.test', 2, 5, 1, 0, 0, 1.0, 3),
    ('http://a.test/page/1', 'a.test', 0, 0, 0, 2, 1, 1.0, 0);
INSERT INTO outbox (peer, url, host, depth, priority, hops, seen, redirects) VALUES
    ('b', 'http://b.test/page/0', 'b.test', 1, 3, 0, 0, 2);
PRAGMA user_version = 2;
"""


def columns(path: Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def test_a_layout_2_database_gains_via_and_the_recrawl_columns(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with closing(sqlite3.connect(path)) as db:
        db.executescript(_LAYOUT_2)

    with Frontier(path, clock=clock) as frontier:
        # What the old file held reads back whole, found nowhere and never visited.
        [(_, owed, seen)] = frontier.outbox.peek("b", 10)
        assert (owed, seen) == (UrlEntry("http://b.test/page/0", "b.test", 1, 3, 0, 2, None), False)
        [old] = frontier.lease("a.test", 10)[0]
        assert (old.url, old.redirects, old.via, old.etag, old.last_modified, old.visits) == (
            "http://a.test/page/0", 3, None, None, None, 0)
        assert stored(frontier, "http://a.test/page/1", "state, via, due_at, visits") == (2, None, None, 0)
        assert frontier.totals()["recrawl_scheduled"] == 0
        # and new rows keep theirs
        frontier.apply(FrontierBatch(done=[old.id], recrawl=[(old.id, clock.now, '"e"', None)],
                                     add=[found("a.test", 2, "http://a.test/page/0")]))
        assert frontier.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1})
        assert {lease.url: (lease.via, lease.visits) for lease in frontier.lease("a.test", 10)[0]} == {
            "http://a.test/page/0": (None, 1), "http://a.test/page/2": ("http://a.test/page/0", 0)}

    assert columns(path, "urls")[-7:] == ["redirects", "via", "etag", "last_modified", "due_at", "visits", "history"]
    assert columns(path, "outbox")[-6:] == ["redirects", "via", "replica", "next_eligible", "crawl_delay", "refresh"]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
        assert db.execute("SELECT 1 FROM sqlite_master WHERE name = 'urls_due'").fetchone() == (1,)
    with Frontier(path, clock=clock):  # migrated once: opening again changes nothing
        pass
    assert columns(path, "urls").count("via") == 1


def test_a_new_database_has_the_layout_a_migrated_one_gets(tmp_path: Path, clock: FakeClock) -> None:
    old = tmp_path / "old" / FRONTIER_FILENAME
    old.parent.mkdir()
    with closing(sqlite3.connect(old)) as db:
        db.executescript(_LAYOUT_2)
    Frontier(old, clock=clock).close()
    new = tmp_path / "new" / FRONTIER_FILENAME
    Frontier(new, clock=clock).close()
    for table in ("urls", "outbox", "hosts"):
        assert columns(new, table) == columns(old, table), table
    index_sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
    with closing(sqlite3.connect(old)) as a, closing(sqlite3.connect(new)) as b:
        assert a.execute(index_sql).fetchall() == b.execute(index_sql).fetchall()


# -- the async shell -----------------------------------------------------------------------------


async def test_the_service_requeues_and_counts_on_its_thread(tmp_path: Path) -> None:
    clock = FakeClock()
    service = FrontierService(path=tmp_path, lease_timeout_s=60.0, clock=clock)
    await service.open()
    try:
        await service.add([found("a.test", 1, "http://a.test/")])
        [([lease], _)] = await service.lease_many([("a.test", 1)])
        await service.apply(FrontierBatch(done=[lease.id], recrawl=[(lease.id, clock.now + 1, None, "lm")]))
        assert await service.due_count(clock.now) == 0
        clock.now += 1
        assert await service.due_count(clock.now) == 1
        assert (await service.snapshot())["recrawl_scheduled"] == 1
        assert await service.requeue_due(clock.now, 10, RECRAWL) == Counter({"a.test": 1})
        [([again], _)] = await service.lease_many([("a.test", 1)])
        assert (again.via, again.last_modified, again.visits) == ("http://a.test/", "lm", 1)
    finally:
        await service.close()


# -- the peer wire -------------------------------------------------------------------------------


def test_the_api_takes_an_optional_via_and_refuses_a_bad_one() -> None:
    good = [{"url": "http://a.test/1"}, {"url": "http://a.test/2", "via": None},
            {"url": "http://a.test/3", "via": "http://a.test/"},
            {"url": "http://a.test/4", "via": "v" * MAX_VIA_LENGTH}]
    bad = [{"url": "http://a.test/5", "via": 7}, {"url": "http://a.test/6", "via": ["http://a.test/"]},
           {"url": "http://a.test/7", "via": "v" * (MAX_VIA_LENGTH + 1)}, {"url": "http://a.test/8", "via": True}]

    body = decode_urls({"urls": good + bad})
    items, invalid = body.items, body.invalid

    assert [index for index, _ in items] == [0, 1, 2, 3]
    assert invalid == [{"index": index, "reason": "bad_field"} for index in (4, 5, 6, 7)]


@pytest.mark.timeout(30)
async def test_forwarded_urls_carry_their_via_on_the_wire(tmp_path: Path) -> None:
    received = await forwarded_on_the_wire(tmp_path, [found("b.test", 1, "http://a.test/"), found("b.test", 2, None)])
    assert {item["url"]: item["via"] for item in received} == {"http://b.test/page/1": "http://a.test/",
                                                              "http://b.test/page/2": None}


def test_the_api_refuses_counts_and_flags_of_the_wrong_type_row_by_row() -> None:
    good = [{"url": "http://a.test/1", "depth": 3, "hops": 0, "redirects": 2, "priority": -5},
            {"url": "http://a.test/2", "seen": True, "replica": False},
            {"url": "http://a.test/3", "depth": 999_999, "priority": -999_999}]
    bad = [{"url": "http://a.test/4", "depth": None}, {"url": "http://a.test/5", "depth": True},
           {"url": "http://a.test/6", "hops": -1}, {"url": "http://a.test/7", "redirects": 10**6},
           {"url": "http://a.test/8", "priority": -(10**6)}, {"url": "http://a.test/9", "priority": 1.5},
           {"url": "http://a.test/10", "seen": 1}, {"url": "http://a.test/11", "replica": None},
           {"url": "http://a.test/12", "depth": "3"}]

    body = decode_urls({"urls": good + bad})
    items, invalid = body.items, body.invalid

    assert [index for index, _ in items] == [0, 1, 2]
    assert invalid == [{"index": index, "reason": "bad_field"} for index in range(3, 12)]


# -- refetch: a redirect back into its own chain (with cookies) ---------------------------------


def test_a_refetch_queues_a_done_url_again_at_once_until_its_attempts_run_out(frontier: Frontier,
                                                                              clock: FakeClock) -> None:
    frontier.add([found("a.test", 1, None, priority=5), found("a.test", 2, None)])
    first, second = fetch_all(frontier, "a.test", recrawl_at=clock.now + 3600)
    assert frontier.totals()["recrawl_scheduled"] == 2

    # The page's own row finishes and is queued again in one batch; a URL not done (unknown
    # here) changes nothing.
    assert frontier.lease("a.test", 10)[0] == []  # nothing ready: both are done
    result = frontier.apply(FrontierBatch(refetch=[first.url, "http://a.test/unknown"]))

    assert result.refetched == Counter({"a.test": 1})
    assert stored(frontier, first.url, "state, due_at, attempts, priority") == (0, None, 1, 5)
    totals = frontier.totals()
    assert (totals["queued"], totals["done"], totals["recrawl_scheduled"]) == (1, 1, 1)
    assert queued(frontier) == {"a.test": 1}
    # Leased again (a second attempt), and again, until REFETCH_MAX_ATTEMPTS (3) attempts.
    for attempt in (2, 3):
        [lease] = frontier.lease("a.test", 10)[0]
        assert (lease.url, lease.attempts) == (first.url, attempt)
        result = frontier.apply(FrontierBatch(done=[lease.id], refetch=[lease.url]))
        assert result.refetched == (Counter({"a.test": 1}) if attempt < 3 else Counter())
    assert stored(frontier, first.url, "state, attempts") == (2, 3)
    assert frontier.totals()["queued"] == 0 and stored(frontier, second.url, "state") == (2,)
