"""Frontier: exact dedupe, lease order, outcome bookkeeping, expiry, durability across crashes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest
from frontier_helpers import OLD_URLS_TABLE, FakeClock, entry

from crawler_node.frontier import (
    FRONTIER_FILENAME,
    Frontier,
    FrontierBatch,
    HostPoliteness,
    UrlEntry,
)


def counts(frontier: Frontier, host: str) -> tuple[int, int, int, int]:
    """(queued, leased, done, failed) of a host. Memory holds only what a host still has to do
    (no record at all once it has none); finished rows are counted in the database, which
    must also agree with what memory holds."""
    record = frontier.host(host)
    queued, leased = (record.queued, record.leased) if record is not None else (0, 0)
    with closing(sqlite3.connect(frontier.path)) as db:
        # a leased row stays in state 0, its lease a row of `leases` (schema, layout 8)
        stored = dict(db.execute("SELECT CASE WHEN l.id IS NULL THEN u.state ELSE 1 END, COUNT(*) FROM urls AS u"
                                 " LEFT JOIN leases AS l ON l.id = u.id WHERE u.host = ? GROUP BY 1", (host,)))
    assert (queued, leased) == (stored.get(0, 0), stored.get(1, 0))
    return queued, leased, stored.get(2, 0), stored.get(3, 0)


# -- adding ----------------------------------------------------------------------------------


def test_same_url_twice_is_accepted_once(frontier: Frontier) -> None:
    first = frontier.add([entry("a.test", 1), entry("a.test", 1)])
    again = frontier.add([entry("a.test", 1)])

    assert [e.url for e in first.accepted] == ["http://a.test/page/1"]
    assert first.duplicates == 1
    assert again.accepted == [] and again.duplicates == 1
    assert counts(frontier, "a.test") == (1, 0, 0, 0)


def test_ten_thousand_distinct_urls_are_all_accepted(frontier: Frontier) -> None:
    entries = [entry(f"h{n % 37}.test", n) for n in range(10_000)]

    result = frontier.add(entries)

    assert len(result.accepted) == 10_000 and result.duplicates == 0
    assert frontier.totals()["queued"] == 10_000
    assert sum(record.queued for record in frontier.hosts_with_work()) == 10_000
    assert frontier.add(entries).duplicates == 10_000


def test_finished_urls_stay_in_the_seen_set(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1), entry("a.test", 2)])
    leases, _ = frontier.lease("a.test", 2)
    frontier.apply(FrontierBatch(done=[leases[0].id], failed=[leases[1].id]))

    assert frontier.add([entry("a.test", 1), entry("a.test", 2)]).duplicates == 2


# -- leasing ---------------------------------------------------------------------------------


def test_lease_order_is_priority_then_fifo(frontier: Frontier) -> None:
    frontier.add([
        entry("a.test", 1, priority=0),
        entry("a.test", 2, priority=5),
        entry("a.test", 3, priority=0),
        entry("a.test", 4, priority=5),
        entry("b.test", 5, priority=9),
    ])

    leases, next_ready = frontier.lease("a.test", 10)

    assert [lease.url.rsplit("/", 1)[1] for lease in leases] == ["2", "4", "1", "3"]
    assert next_ready is None
    assert all(lease.host == "a.test" and lease.attempts == 1 for lease in leases)


def test_leased_urls_are_not_leased_again(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(5)])

    first, _ = frontier.lease("a.test", 3)
    second, _ = frontier.lease("a.test", 3)
    third, _ = frontier.lease("a.test", 3)

    assert len(first) == 3 and len(second) == 2 and third == []
    assert {lease.id for lease in first}.isdisjoint(lease.id for lease in second)
    assert counts(frontier, "a.test") == (0, 5, 0, 0)
    assert list(frontier.hosts_with_work()) == []


def test_lease_of_unknown_or_empty_host(frontier: Frontier) -> None:
    assert frontier.lease("nowhere.test", 5) == ([], None)
    frontier.add([entry("a.test", 1)])
    assert frontier.lease("a.test", 0) == ([], None)


def test_a_host_asked_twice_in_one_call_gets_distinct_urls(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(4)])

    (first, _), (second, _) = frontier.lease_many([("a.test", 1), ("a.test", 2)])

    assert [lease.url for lease in first + second] == [f"http://a.test/page/{n}" for n in range(3)]
    assert counts(frontier, "a.test") == (1, 3, 0, 0)


def test_lease_keeps_the_fields(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1, depth=3, priority=2, hops=1)])

    (lease,), _ = frontier.lease("a.test", 1)

    assert (lease.url, lease.depth, lease.priority, lease.hops) == ("http://a.test/page/1", 3, 2, 1)


# -- outcomes --------------------------------------------------------------------------------


def test_apply_bookkeeping(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(6)])
    leases, _ = frontier.lease("a.test", 5)
    ids = [lease.id for lease in leases]

    result = frontier.apply(FrontierBatch(
        done=[ids[0], ids[1]],
        failed=[ids[2]],
        retry=[(ids[3], 0.0)],
        returned=[ids[4]],
        add=[entry("a.test", 0), entry("a.test", 100), entry("b.test", 1)],
    ))

    assert [e.url for e in result.accepted] == ["http://a.test/page/100", "http://b.test/page/1"]
    assert result.duplicates == 1
    # queued: 1 never leased + 1 retry + 1 returned + 1 new
    assert counts(frontier, "a.test") == (4, 0, 2, 1)
    assert counts(frontier, "b.test") == (1, 0, 0, 0)
    totals = frontier.totals()
    assert (totals["queued"], totals["leased"], totals["done"], totals["failed"]) == (5, 0, 2, 1)
    assert totals["hosts"] == 2

    attempts = {lease.url: lease.attempts for lease in frontier.lease("a.test", 10)[0]}
    assert attempts[leases[3].url] == 2  # the retry counted its first attempt
    assert attempts[leases[4].url] == 1  # the returned one did not
    assert attempts["http://a.test/page/100"] == 1


def test_batches_larger_than_one_statement(frontier: Frontier) -> None:
    frontier.add([entry(f"h{n % 3}.test", n) for n in range(700)])
    leases = [lease for leases, _ in frontier.lease_many([(f"h{h}.test", 200) for h in range(3)])
              for lease in leases]

    result = frontier.apply(FrontierBatch(
        done=[lease.id for lease in leases[:500]],
        failed=[lease.id for lease in leases[500:]],
        add=[entry(f"h{n % 3}.test", n) for n in range(650, 1000)],  # the first 50 are known
    ))

    assert len(leases) == 600 and len({lease.id for lease in leases}) == 600
    assert len(result.accepted) == 300 and result.duplicates == 50
    totals = frontier.totals()
    assert (totals["queued"], totals["leased"], totals["done"], totals["failed"]) == (400, 0, 500, 100)


def test_apply_ignores_unknown_and_repeated_ids(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)

    frontier.apply(FrontierBatch(done=[lease.id, lease.id, 999_999], retry=[(lease.id, 0.0)]))
    frontier.apply(FrontierBatch(done=[lease.id], returned=[lease.id]))

    assert counts(frontier, "a.test") == (0, 0, 1, 0)


def test_retry_waits_for_its_not_before(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)
    frontier.apply(FrontierBatch(retry=[(lease.id, clock.now + 30.0)]))

    assert frontier.lease("a.test", 1) == ([], clock.now + 30.0)
    assert counts(frontier, "a.test") == (1, 0, 0, 0)

    clock.now += 30.0
    (again,), _ = frontier.lease("a.test", 1)
    assert again.id == lease.id and again.attempts == 2


def test_waiting_urls_do_not_block_ready_ones(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1, priority=9)])
    frontier.add([entry("a.test", 2)])
    (urgent,), _ = frontier.lease("a.test", 1)
    frontier.apply(FrontierBatch(retry=[(urgent.id, clock.now + 60.0)]))

    (lease,), next_ready = frontier.lease("a.test", 5)

    assert lease.url == "http://a.test/page/2" and next_ready is None


def test_a_host_with_its_ready_urls_leased_says_when_its_waiting_one_is_ready(
        frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1), entry("a.test", 2)])
    (retried,), _ = frontier.lease("a.test", 1)
    frontier.apply(FrontierBatch(retry=[(retried.id, clock.now + 30.0)]))
    (out,), _ = frontier.lease("a.test", 1)  # leased rows stay queued on disk (schema, layout 8)

    assert frontier.lease("a.test", 1) == ([], clock.now + 30.0)  # not "now", for the leased one
    frontier.apply(FrontierBatch(returned=[out.id]))
    assert [lease.id for lease in frontier.lease("a.test", 5)[0]] == [out.id]


def test_add_with_not_before(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)], not_before=clock.now + 5.0)

    assert frontier.lease("a.test", 1) == ([], clock.now + 5.0)
    clock.now += 5.0
    assert len(frontier.lease("a.test", 1)[0]) == 1


def test_expired_leases_return_to_the_queue(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", n) for n in range(3)])
    early, _ = frontier.lease("a.test", 2)
    clock.now += 30.0
    late, _ = frontier.lease("a.test", 1)

    clock.now += 30.0  # the first two are now at their expiry, the last one is not
    assert frontier.expire_leases() == 2
    assert frontier.expire_leases() == 0
    assert counts(frontier, "a.test") == (2, 1, 0, 0)

    again, _ = frontier.lease("a.test", 5)
    assert sorted(lease.id for lease in again) == sorted(lease.id for lease in early)
    assert all(lease.attempts == 2 for lease in again)
    assert late[0].id not in {lease.id for lease in again}


def test_done_after_expiry_still_finishes_the_url(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)
    clock.now += 61.0
    frontier.expire_leases()

    frontier.apply(FrontierBatch(done=[lease.id]))

    assert counts(frontier, "a.test") == (0, 0, 1, 0)
    assert frontier.lease("a.test", 1) == ([], None)


# -- per-host records and totals -------------------------------------------------------------


def test_host_snapshots_are_copies(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1)])
    snapshot = frontier.host("a.test")
    snapshot.queued = 99

    assert frontier.host("a.test").queued == 1
    assert frontier.host("unknown.test") is None


def test_next_eligible_is_immediate_and_persisted(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with Frontier(path, clock=clock) as frontier:
        frontier.add([entry("a.test", 1)])
        frontier.save_hosts([HostPoliteness("a.test", next_eligible=1234.5)])
        assert frontier.host("a.test").politeness.next_eligible == 1234.5
        assert [r.politeness.next_eligible for r in frontier.hosts_with_work()] == [1234.5]

    with Frontier(path, clock=clock) as reopened:
        assert reopened.host("a.test").politeness.next_eligible == 1234.5


def test_oldest_queued_age(frontier: Frontier, clock: FakeClock) -> None:
    assert frontier.totals()["oldest_queued_age_s"] == 0.0
    frontier.add([entry("a.test", 1)])
    clock.now += 10.0
    frontier.add([entry("a.test", 2)])
    clock.now += 5.0

    assert frontier.totals()["oldest_queued_age_s"] == pytest.approx(15.0)
    frontier.lease("a.test", 1)
    assert frontier.totals()["oldest_queued_age_s"] == pytest.approx(5.0)


# -- handback --------------------------------------------------------------------------------


def test_duplicates_stay_exact_past_the_memory_of_recent_urls(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path / FRONTIER_FILENAME, clock=clock, recent_urls=8) as small:
        urls = [entry("a.test", n) for n in range(100)]
        assert len(small.add(urls).accepted) == 100
        again = small.add(list(reversed(urls)))  # most are long forgotten by the memory
        assert again.accepted == [] and again.duplicates == 100
        assert small.snapshot()["recent_urls"] <= 8
        mixed = small.add([urls[0], entry("a.test", 100), entry("a.test", 100), entry("a.test", 101)])
        assert [e.url for e in mixed.accepted] == ["http://a.test/page/100", "http://a.test/page/101"]
        assert mixed.duplicates == 2


def test_urls_a_neighbour_fetched_are_seen_not_queued(frontier: Frontier) -> None:
    frontier.handoff.replica_add(["http://a.test/page/1"])

    result = frontier.add([entry("a.test", 1), entry("a.test", 2)])

    assert [e.url for e in result.accepted] == ["http://a.test/page/2"]
    assert counts(frontier, "a.test") == (1, 0, 1, 0)


def test_a_host_handed_off_can_come_back(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(3)])
    assert frontier.handoff.handoff_host("a.test", "peer-2") == 3
    # The host returned to this node: its URLs are new here again.
    assert len(frontier.add([entry("a.test", n) for n in range(3)]).accepted) == 3


def test_a_host_handed_off_goes_to_the_peers_outbox_whole(frontier: Frontier) -> None:
    frontier.add([entry("a.test", n) for n in range(4)] + [entry("b.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)
    frontier.apply(FrontierBatch(done=[lease.id]))

    assert frontier.handoff.handoff_host("a.test", "peer-2") == 4

    owed = frontier.outbox.peek("peer-2", 10)
    assert sorted((e.url, seen) for _, e, seen in owed) == [
        ("http://a.test/page/0", True), *((f"http://a.test/page/{n}", False) for n in range(1, 4))]
    assert frontier.outbox.counts() == {"peer-2": 4}
    assert counts(frontier, "a.test") == (0, 0, 0, 0)
    assert frontier.totals()["queued"] == 1
    assert [record.host for record in frontier.hosts_with_work()] == ["b.test"]
    assert frontier.handoff.hosts_after("", 10) == ["b.test"]  # nothing of a.test is left


# -- durability ------------------------------------------------------------------------------


def test_reopen_returns_leases_and_keeps_the_seen_set(tmp_path: Path, clock: FakeClock) -> None:
    frontier = Frontier(tmp_path, clock=clock)  # a directory: the file goes inside it
    frontier.add([entry("a.test", n) for n in range(4)])
    leases, _ = frontier.lease("a.test", 3)
    frontier.apply(FrontierBatch(done=[leases[0].id]))
    del frontier  # dropped without close or apply, as a crash would

    with Frontier(tmp_path / FRONTIER_FILENAME, clock=clock) as reopened:
        assert counts(reopened, "a.test") == (3, 0, 1, 0)
        assert reopened.add([entry("a.test", n) for n in range(4)]).duplicates == 4
        again, _ = reopened.lease("a.test", 10)
        attempts = {lease.url: lease.attempts for lease in again}
        assert attempts == {leases[1].url: 2, leases[2].url: 2, "http://a.test/page/3": 1}


def test_a_lease_rewrites_no_url_row_and_a_url_that_kills_the_node_runs_out_of_attempts(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with Frontier(path, clock=clock) as frontier:
        frontier.add([entry("a.test", n) for n in range(3)])
    with closing(sqlite3.connect(path)) as db:
        before = db.execute("SELECT * FROM urls ORDER BY id").fetchall()
    for crash in range(1, 4):  # each run leases the same first URL, and dies with it
        frontier = Frontier(path, clock=clock)
        (lease,), _ = frontier.lease("a.test", 1)
        assert (lease.url, lease.attempts) == ("http://a.test/page/0", crash)
        with closing(sqlite3.connect(path)) as db:
            # the lease is a row of its own small table; the URL's row, and the pages of the
            # big table and its indexes, are as they were (schema: no random page per lease)
            assert db.execute("SELECT id FROM leases").fetchall() == [(lease.id,)]
            if crash == 1:
                assert db.execute("SELECT * FROM urls ORDER BY id").fetchall() == before
        del frontier  # no close, no outcome: a crash

    with Frontier(path, clock=clock) as frontier:
        assert counts(frontier, "a.test") == (3, 0, 0, 0)
        again, _ = frontier.lease("a.test", 3)
        assert [lease.attempts for lease in again] == [4, 1, 1]  # the node gives a URL up by its attempts
        frontier.apply(FrontierBatch(done=[again[0].id], returned=[again[1].id], retry=[(again[2].id, clock.now)]))
    with closing(sqlite3.connect(path)) as db:
        # counted as each lease ended: done and retried yes, returned no
        assert db.execute("SELECT attempts FROM urls ORDER BY id").fetchall() == [(4,), (0,), (1,)]
        assert db.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)


_CRASH_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from crawler_node.frontier import Frontier, UrlEntry

    frontier = Frontier(Path(sys.argv[1]))
    for start in range(0, 1000, 100):
        frontier.add(
            UrlEntry(url=f"http://h{n % 7}.test/{n}", host=f"h{n % 7}.test")
            for n in range(start, start + 100)
        )
    frontier.lease("h0.test", 10)
    print("committed", flush=True)
    time.sleep(60)
    """
)


def test_sigkill_after_commit_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / FRONTIER_FILENAME
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASH_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "committed"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()

    with Frontier(path) as reopened:
        totals = reopened.totals()
        assert (totals["queued"], totals["leased"], totals["hosts"]) == (1000, 0, 7)
        assert reopened.add(
            UrlEntry(url=f"http://h{n % 7}.test/{n}", host=f"h{n % 7}.test") for n in range(1000)
        ).duplicates == 1000


# The urls table and its indexes as written before leased rows were tracked in memory (with
# SQLite's default 4 KiB pages); the tables that did not change are created on open.
_OLD_LAYOUT = OLD_URLS_TABLE + """
CREATE INDEX urls_ready ON urls(host, priority DESC, id, not_before) WHERE state = 0;
CREATE INDEX urls_leased ON urls(lease_expires) WHERE state = 1;
CREATE INDEX urls_age ON urls(enqueued_at) WHERE state = 0;
CREATE INDEX urls_deferred ON urls(host, priority DESC, id) WHERE state = 4;
INSERT INTO urls (url, host, depth, priority, hops, state, attempts, lease_expires, enqueued_at) VALUES
    ('http://a.test/page/0', 'a.test', 0, 0, 0, 2, 1, NULL, 1.0),
    ('http://a.test/page/1', 'a.test', 0, 0, 0, 1, 1, 2000000.0, 1.0),
    ('http://a.test/page/2', 'a.test', 0, 0, 0, 0, 0, NULL, 1.0);
"""


def test_opens_a_database_of_the_earlier_layout(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(_OLD_LAYOUT)
    db.close()

    with Frontier(path, clock=clock) as frontier:
        assert counts(frontier, "a.test") == (2, 0, 1, 0)  # the lease went back to the queue
        leases, _ = frontier.lease("a.test", 5)
        assert [(lease.url, lease.attempts) for lease in leases] == [
            ("http://a.test/page/1", 2), ("http://a.test/page/2", 1)]
        clock.now += 121.0
        assert frontier.expire_leases() == 2
        assert frontier.add([entry("a.test", n) for n in range(4)]).duplicates == 3

    with sqlite3.connect(path) as db:
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    assert "urls_leased" not in indexes and "urls_ready" in indexes
    assert {"urls_failed", "urls_leased_before_8"} <= indexes  # built once: later opens count from them
    assert "urls_shed" in indexes  # load shedding's steps read the lowest priorities from it
    assert page_size == 4096  # an existing database keeps its pages


def test_rejects_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Frontier(tmp_path / FRONTIER_FILENAME, lease_timeout_s=0)


def test_a_failing_batch_changes_nothing(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)
    broken = UrlEntry(url=None, host="b.test")  # type: ignore[arg-type]  # violates NOT NULL

    with pytest.raises(sqlite3.IntegrityError):
        frontier.apply(FrontierBatch(done=[lease.id], add=[entry("b.test", 1), broken]))

    assert counts(frontier, "a.test") == (0, 1, 0, 0)
    assert frontier.totals()["queued"] == 0
    clock.now += 61.0  # the lease survived the rollback, and so did its expiry
    assert frontier.expire_leases() == 1
    frontier.apply(FrontierBatch(done=[lease.id]))
    assert counts(frontier, "a.test") == (0, 0, 1, 0)
    # The rolled-back row was never one: the URL is new, not a remembered duplicate.
    assert len(frontier.add([entry("b.test", 1)]).accepted) == 1


def test_an_acknowledgement_never_removes_what_was_not_sent(frontier: Frontier) -> None:
    # A peer froze (SIGSTOP) with a batch in hand; meanwhile its rows were rerouted, and new
    # rows took their freed ids (SQLite reuses the highest ones). When the frozen peer finally
    # answers 202 for the old batch, only the rows of that batch may go.
    frontier.outbox.put([("b", entry("b.test", n)) for n in range(3)])
    sent = frontier.outbox.peek("b", 10)
    frontier.outbox.reroute("b", lambda host: None)  # b is down: this node takes them in
    frontier.outbox.put([("b", entry("b.test", n)) for n in range(10, 13)])  # found later, for b
    assert frontier.outbox.ack("b", [(row_id, e.url) for row_id, e, _ in sent]) == 0
    assert [e.url for _, e, _ in frontier.outbox.peek("b", 10)] == [
        f"http://b.test/page/{n}" for n in range(10, 13)]


def test_a_late_outcome_never_lands_on_another_url(frontier: Frontier, clock: FakeClock) -> None:
    # A lease outlives its row: it expired, the host was handed to another node, and only then
    # did the slow fetch finish. Its id must not have gone to a URL found since.
    frontier.add([entry("a.test", 1)])
    (lease,), _ = frontier.lease("a.test", 1)
    clock.now += 61.0
    assert frontier.expire_leases() == 1
    assert frontier.handoff.handoff_host("a.test", "peer-2") == 1
    frontier.add([entry("a.test", 2)])  # the next row, with the next id

    frontier.apply(FrontierBatch(done=[lease.id]))

    assert counts(frontier, "a.test") == (1, 0, 0, 0)  # still queued: to be fetched
    (fresh,), _ = frontier.lease("a.test", 1)
    assert fresh.url == "http://a.test/page/2" and fresh.id != lease.id


def test_lease_many_hosts_in_one_call(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", n) for n in range(3)] + [entry("b.test", 1)])
    frontier.add([entry("c.test", 1)], not_before=clock.now + 5)

    results = frontier.lease_many([("a.test", 2), ("b.test", 5), ("c.test", 1), ("nobody.test", 3), ("a.test", 0)])

    assert [[lease.url for lease in leases] for leases, _ in results] == [
        ["http://a.test/page/0", "http://a.test/page/1"], ["http://b.test/page/1"], [], [], []]
    assert [ready for _, ready in results] == [None, None, clock.now + 5, None, None]
    assert counts(frontier, "a.test") == (1, 2, 0, 0)
