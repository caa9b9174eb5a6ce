"""A frontier that keeps at most `resident_hosts` hosts with work in memory: the others are
parked on disk and come in by turns (`unpark`), none lost, none leased twice, their counts and
politeness exact, across a reopen and a rolled-back transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from frontier_helpers import FakeClock, entry

from crawler_node.frontier import FRONTIER_FILENAME, Frontier, FrontierBatch, HostPoliteness, UrlEntry

HOSTS = [f"h{n:02d}.test" for n in range(12)]  # names sort as numbered: the turn order


def open_bounded(tmp_path: Path, clock: FakeClock, resident: int = 3, **options: object) -> Frontier:
    return Frontier(tmp_path / FRONTIER_FILENAME, lease_timeout_s=60.0, clock=clock, resident_hosts=resident,
                    **options)  # type: ignore[arg-type]


def active(frontier: Frontier) -> dict[str, int]:
    return {record.host: record.queued for record in frontier.hosts_with_work()}


def crawl_active(frontier: Frontier) -> list[str]:
    """Lease and finish everything the active hosts have; the URLs fetched."""
    fetched: list[str] = []
    for host in list(active(frontier)):
        leases, _ = frontier.lease(host, 1000)
        frontier.apply(FrontierBatch(done=[lease.id for lease in leases]))
        fetched += [lease.url for lease in leases]
    return fetched


def test_past_the_bound_new_hosts_are_parked_on_disk_and_not_work_for_the_node(tmp_path: Path,
                                                                               clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock) as frontier:
        result = frontier.add([entry(host, n) for host in HOSTS for n in range(2)])

        assert active(frontier) == {"h00.test": 2, "h01.test": 2, "h02.test": 2}
        assert result.parked == set(HOSTS[3:])
        assert {e.host for e in result.queued} == set(HOSTS[:3])  # what the host table takes in
        assert len(result.accepted) == 24  # all in the seen-set (and replicated) all the same
        totals = frontier.totals()
        assert (totals["queued"], totals["parked_queued"], totals["hosts_with_work"]) == (24, 18, 3)
        assert frontier.lease("h05.test", 10) == ([], None)  # a parked host is never leased
        assert frontier.add([entry("h05.test", 0)]).duplicates == 1  # the seen-set still answers


def test_parked_hosts_come_in_by_turns_and_every_url_is_fetched_once(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock) as frontier:
        frontier.add([entry(host, n) for host in HOSTS for n in range(3)])
        fetched: list[str] = []
        turns: list[list[str]] = []
        for _ in range(10):
            fetched += crawl_active(frontier)
            unparked = frontier.unpark(100)
            if not unparked:
                break
            turns.append([record.host for record in unparked])
            assert all(record.queued == 3 for record in unparked)  # counted from disk

        assert turns == [HOSTS[3:6], HOSTS[6:9], HOSTS[9:12]]  # host-name order, as room comes
        assert sorted(fetched) == sorted(entry(host, n).url for host in HOSTS for n in range(3))
        totals = frontier.totals()
        assert (totals["queued"], totals["parked_queued"], totals["done"]) == (0, 0, 36)


def test_room_goes_to_the_parked_hosts_before_hosts_found_later(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=2) as frontier:
        frontier.add([entry(host, 0) for host in HOSTS[:4]])  # h02, h03 parked
        crawl_active(frontier)  # h00, h01 done: room for two
        late = frontier.add([entry("z-late.test", 0)])

        assert late.parked == {"z-late.test"}  # found while others wait: it waits too
        assert [r.host for r in frontier.unpark(100)] == ["h02.test", "h03.test"]
        frontier.add([entry("a-late.test", 0)])
        crawl_active(frontier)
        # the turn goes on past the last host unparked, then wraps to the start of the names
        assert [r.host for r in frontier.unpark(100)] == ["z-late.test", "a-late.test"]


def test_a_parked_host_given_a_seed_is_unparked_first(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=2, urgent_priority=100) as frontier:
        frontier.add([entry(host, 0) for host in HOSTS])
        frontier.add([entry("h11.test", 1, priority=100)])  # a submitted URL of a parked host
        crawl_active(frontier)

        assert [(r.host, r.queued) for r in frontier.unpark(100)] == [("h11.test", 2), ("h02.test", 1)]


def test_politeness_stored_for_a_parked_host_comes_with_it(tmp_path: Path, clock: FakeClock) -> None:
    slow = HostPoliteness("h03.test", next_eligible=clock.now + 30, crawl_delay=5.0)
    with open_bounded(tmp_path, clock, resident=1) as frontier:
        frontier.add([entry(host, 0) for host in HOSTS[:4]])
        frontier.save_hosts([slow])
        for _ in range(3):
            crawl_active(frontier)
            (record,) = frontier.unpark(100)
        assert record.host == "h03.test"
        assert record.politeness == slow


def test_a_reopened_frontier_holds_the_bound_with_exact_counts(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock) as frontier:
        frontier.add([entry(host, n) for host in HOSTS for n in range(host_number(host) + 1)])
        leases, _ = frontier.lease("h00.test", 1)  # left leased: back to its queue at the reopen

    with open_bounded(tmp_path, clock) as reopened:
        assert active(reopened) == {"h00.test": 1, "h01.test": 2, "h02.test": 3}
        totals = reopened.totals()
        assert (totals["queued"], totals["leased"], totals["parked_queued"]) == (78, 0, 72)
        assert reopened.host("h05.test") is None

    with open_bounded(tmp_path, clock, resident=0) as unbounded:  # the same file, every host active
        assert active(unbounded) == {host: host_number(host) + 1 for host in HOSTS}


def test_a_reopened_frontier_counts_every_state_as_its_rows_say(tmp_path: Path, clock: FakeClock) -> None:
    # At open the totals come from indexes, not a scan of urls: each state must still be exact,
    # finished rows being what the others leave of COUNT(*).
    with open_bounded(tmp_path, clock) as frontier:
        frontier.add([entry(host, n) for host in HOSTS for n in range(4)])
        done, _ = frontier.lease("h00.test", 3)
        failed, _ = frontier.lease("h01.test", 2)
        frontier.apply(FrontierBatch(done=[lease.id for lease in done], failed=[lease.id for lease in failed]))
        assert sum(frontier.shedding.defer_lowest(5, below_priority=100).values()) == 5
        frontier.lease("h02.test", 2)  # left leased: queued again at the reopen
    with sqlite3.connect(tmp_path / FRONTIER_FILENAME) as db:  # as a node of layout 7 leaves a lease
        (stale_id,) = db.execute("SELECT id FROM urls WHERE host = 'h03.test' AND state = 0 LIMIT 1").fetchone()
        db.execute("UPDATE urls SET state = 1, attempts = 1, lease_expires = 1e9 WHERE id = ?", (stale_id,))
    db.close()

    with open_bounded(tmp_path, clock) as reopened:
        totals = reopened.totals()
    with sqlite3.connect(tmp_path / FRONTIER_FILENAME) as db:
        by_state = dict(db.execute("SELECT state, COUNT(*) FROM urls GROUP BY state"))
        stale = db.execute("SELECT state, attempts FROM urls WHERE id = ?", (stale_id,)).fetchone()
    db.close()
    assert by_state == {0: 48 - 3 - 2 - 5, 2: 3, 3: 2, 4: 5}
    assert (totals["queued"], totals["leased"], totals["done"], totals["failed"], totals["deferred"]) == (
        38, 0, 3, 2, 5)
    assert stale == (0, 1)  # queued again, its attempt kept


def host_number(host: str) -> int:
    return int(host[1:3])


def test_a_rolled_back_transaction_keeps_the_active_hosts_and_their_counts(tmp_path: Path,
                                                                           clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock) as frontier:
        frontier.add([entry(host, n) for host in HOSTS for n in range(2)])
        leases, _ = frontier.lease("h01.test", 1)
        bad = UrlEntry(url=None, host="h04.test")  # type: ignore[arg-type]  # NULL url: the insert fails
        with pytest.raises(sqlite3.IntegrityError):
            frontier.apply(FrontierBatch(done=[leases[0].id], add=[entry("h02.test", 9), bad]))

        assert active(frontier) == {"h00.test": 2, "h01.test": 1, "h02.test": 2}
        assert frontier.host("h01.test").leased == 1
        assert frontier.totals()["parked_queued"] == 18
        frontier.apply(FrontierBatch(done=[leases[0].id]))  # the lease is still good
        assert frontier.totals()["done"] == 1


def test_shed_rows_of_parked_hosts_come_back_and_wait_their_turn(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=2) as frontier:
        frontier.add([entry(host, n) for host in HOSTS[:4] for n in range(2)])
        deferred = frontier.shedding.defer_lowest(8, below_priority=100)
        assert sum(deferred.values()) == 8
        assert frontier.totals()["parked_queued"] == 0

        restored = frontier.shedding.restore(8)

        assert restored == {"h00.test": 2, "h01.test": 2}  # what the host table learns of
        assert frontier.totals()["parked_queued"] == 4
        crawl_active(frontier)
        assert {r.host: r.queued for r in frontier.unpark(100)} == {"h02.test": 2, "h03.test": 2}


def test_a_restore_step_over_many_parked_hosts_gives_back_its_share_of_each(tmp_path: Path,
                                                                            clock: FakeClock) -> None:
    # A big crawl's deferred rows sit a few per parked host: a step that looked at 256 hosts
    # gave back a fiftieth of what it was asked at 10M queued (frontier.shedding).
    many = [f"p{n:04d}.test" for n in range(1500)]
    with open_bounded(tmp_path, clock, resident=2) as frontier:
        frontier.add([entry(host, n) for host in many for n in range(2)])
        assert sum(frontier.shedding.defer_lowest(3000, below_priority=100).values()) == 3000
        frontier.shedding.restore(2000)  # the 2 active hosts and 500 parked ones, a share of 4 each
        totals = frontier.totals()
        assert (totals["deferred"], totals["parked_queued"]) == (3000 - 4 - 1000, 1000)  # (256 hosts: 2484, 512)
        frontier.shedding.restore(100_000)  # at most PARKED_RESTORE_HOSTS_MAX hosts: here, all
        assert frontier.totals()["deferred"] == 0


def test_a_parked_host_is_shown_and_dropped_from_disk(tmp_path: Path, clock: FakeClock) -> None:
    from crawler_node.frontier.operator_queries import FrontierControl

    with open_bounded(tmp_path, clock, resident=1) as frontier:
        frontier.add([entry(host, n) for host in HOSTS[:3] for n in range(4)])
        control = FrontierControl.of(frontier)
        counts, rows = control.host_queue("h02.test", 2)
        assert (counts.queued, counts.leased, len(rows)) == (4, 0, 2)

        assert control.drop_host("h02.test") == {"queued": 4}

        assert control.host_queue("h02.test", 2) == (None, [])
        assert frontier.totals()["parked_queued"] == 4  # h01's
        crawl_active(frontier)
        assert [r.host for r in frontier.unpark(10)] == ["h01.test"]


def test_recrawled_rows_of_a_parked_host_wait_their_turn(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=1) as frontier:
        frontier.add([entry("h00.test", 0)])
        leases, _ = frontier.lease("h00.test", 1)
        frontier.apply(FrontierBatch(done=[leases[0].id], recrawl=[(leases[0].id, clock.now + 10, None, None)]))
        frontier.add([entry("h01.test", 0)])  # h01 takes the room
        clock.now += 20

        assert frontier.requeue_due(clock.now, 10, priority=-1000) == {}  # h00 is parked: not work yet
        assert frontier.totals()["parked_queued"] == 1
        crawl_active(frontier)
        assert [(r.host, r.queued) for r in frontier.unpark(10)] == [("h00.test", 1)]


def test_a_host_whose_turn_is_over_is_parked_with_its_buffer_back_and_comes_back_in_turn(
        tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=2) as frontier:
        frontier.add([entry(host, n) for host in HOSTS[:4] for n in range(3)])  # h02, h03 parked
        leases, _ = frontier.lease("h01.test", 3)
        frontier.apply(FrontierBatch(done=[lease.id for lease in leases]))
        assert [r.host for r in frontier.unpark(10)] == ["h02.test"]
        buffered, _ = frontier.lease("h00.test", 2)
        in_flight, _ = frontier.lease("h02.test", 1)

        parked = frontier.park(["h00.test", "h02.test"], returned=[lease.id for lease in buffered])

        assert parked == ["h00.test"]  # h02 has a page on its way: it keeps its place
        assert active(frontier) == {"h02.test": 2}
        totals = frontier.totals()
        assert (totals["queued"], totals["leased"], totals["parked_queued"]) == (8, 1, 6)
        assert [r.host for r in frontier.unpark(10)] == ["h03.test"]  # the next in turn, not h00 again
        frontier.apply(FrontierBatch(done=[in_flight[0].id]))
        crawl_active(frontier)
        # round to the start of the names: h00, its leases back unattempted
        assert [(r.host, r.queued) for r in frontier.unpark(10)] == [("h00.test", 3)]
        again, _ = frontier.lease("h00.test", 3)
        assert sorted(lease.attempts for lease in again) == [1, 1, 1]


def test_an_unbounded_frontier_parks_nothing(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=0) as frontier:
        frontier.add([entry(host, 0) for host in HOSTS])
        assert frontier.park(HOSTS) == [] and len(active(frontier)) == len(HOSTS)
        assert frontier.unpark(10) == []


def test_active_hosts_with_only_shed_rows_give_their_place_to_queued_work(tmp_path: Path, clock: FakeClock) -> None:
    with open_bounded(tmp_path, clock, resident=2) as frontier:
        frontier.add([entry(host, n, priority=1) for host in HOSTS[:2] for n in range(2)])
        frontier.add([entry(host, 0, priority=50) for host in HOSTS[2:4]])  # parked
        deferred = frontier.shedding.defer_lowest(4, below_priority=10)  # all of h00's and h01's
        assert deferred == {"h00.test": 2, "h01.test": 2} and active(frontier) == {}

        assert {r.host for r in frontier.unpark(10)} == {"h02.test", "h03.test"}
        snapshot = frontier.snapshot()
        assert (snapshot["deferred"], snapshot["hosts_in_memory"]) == (4, 2)  # h00, h01 left memory
        crawl_active(frontier)
        assert frontier.shedding.restore(4) == {}  # their rows come back parked, and wait their turn
        assert {r.host: r.queued for r in frontier.unpark(10)} == {"h00.test": 2, "h01.test": 2}


def test_a_long_run_of_active_hosts_in_name_order_does_not_stop_the_turns(tmp_path: Path, clock: FakeClock) -> None:
    many = [f"a{n:03d}.test" for n in range(200)]  # active, and all before the parked hosts' names
    with open_bounded(tmp_path, clock, resident=201) as frontier:
        frontier.add([entry(host, 0) for host in [*many, "b0.test"]])
        frontier.add([entry("z0.test", 0), entry("z1.test", 0)])  # no room: parked
        leases, _ = frontier.lease("b0.test", 1)
        frontier.apply(FrontierBatch(done=[leases[0].id]))  # room for one

        unparked = []
        for _ in range(10):  # each call steps over a bounded number of active hosts
            unparked += [record.host for record in frontier.unpark(1)]
            if unparked:
                break
        assert unparked == ["z0.test"]
