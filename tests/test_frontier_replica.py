"""The successor's replica of a neighbour's frontier (frontier.replica): queued and fetched URLs,
the hosts' politeness, a takeover that queues them, and a give-back to a neighbour that came
back with a new, empty frontier."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import msgpack
import pytest
from frontier_helpers import FakeClock, entry

from crawler_node.cluster.wire import encode_batch, peer_politeness, peer_refresh
from crawler_node.core.urls import host_of
from crawler_node.frontier import FRONTIER_FILENAME, Frontier, FrontierBatch, HostPoliteness, InboundBatch, UrlEntry
from crawler_node.frontier.outbox import OutboxRow
from crawler_node.frontier.replica import FIRST, HostRefresh
from crawler_node.frontier.schema import SCHEMA_VERSION


def replica_states(frontier: Frontier) -> dict[str, int]:
    with closing(sqlite3.connect(frontier.path)) as db:
        return dict(db.execute("SELECT url, state FROM replica"))


def test_what_a_node_queues_goes_to_its_successor_as_a_replica_and_fetched_urls_with_politeness(
        frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", 0)])
    [lease] = frontier.lease("a.test", 1)[0]
    polite = HostPoliteness("a.test", next_eligible=clock.now + 5, crawl_delay=2.0)
    frontier.apply(FrontierBatch(
        done=[lease.id], replicate=[("succ", entry("a.test", 0))], politeness={"a.test": polite},
        add=[entry("a.test", 1, depth=1), entry("a.test", 0), entry("b.test", 1)],
        successors={"a.test": "succ"}))
    rows = frontier.outbox.peek_rows("succ", 10)
    # the one new URL of a.test queued here, then the fetched URL (seen, with its host's
    # politeness): a successor that got only the first batch of two must not hold a page as
    # fetched without its links. a.test/page/0 is a duplicate and b.test has no successor
    # given: nothing of them.
    assert [(row.entry.url, row.seen, row.replica) for row in rows] == [
        ("http://a.test/page/1", False, True), ("http://a.test/page/0", True, True)]
    assert rows[1].politeness == polite and rows[0].politeness is None
    body = encode_batch(rows)
    assert body == {"urls": [{"url": "http://a.test/page/1", "depth": 1, "priority": 0, "replica": True},
                             {"url": "http://a.test/page/0", "seen": True}],
                    "hosts": [["a.test", polite.next_eligible, 2.0]]}
    assert peer_politeness(msgpack.unpackb(msgpack.packb(body))) == [polite]


def test_the_successor_keeps_queued_urls_until_fetched_and_queues_them_at_takeover(
        frontier: Frontier, clock: FakeClock) -> None:
    queued = [entry("n.test", k, depth=2) for k in range(4)]
    frontier.take_in(InboundBatch(queued_replicas=queued, politeness=[HostPoliteness("n.test", clock.now + 10, 3.0)]))
    frontier.take_in(InboundBatch(fetched_replicas=["http://n.test/page/0"]))  # the neighbour fetched one of them
    assert replica_states(frontier) == {"http://n.test/page/0": 2, "http://n.test/page/1": 0,
                                        "http://n.test/page/2": 0, "http://n.test/page/3": 0}
    assert frontier.totals()["queued"] == 0  # a replica is not work here

    result, after = frontier.replica.promote(lambda host: False, "", 100)
    assert result.accepted == [] and after is None  # not served here: nothing moves
    clock.now += 20  # the neighbour's next-eligible time has passed; its Crawl-delay holds anew
    result, after = frontier.replica.promote(lambda host: host == "n.test", "", 100, lambda host: "next")
    assert sorted(e.url for e in result.accepted) == [f"http://n.test/page/{k}" for k in (1, 2, 3)]
    # queued here now: replicated to the host's successor in turn
    assert sorted((row.entry.url, row.replica, row.seen) for row in frontier.outbox.peek_rows("next", 10)) == [
        (f"http://n.test/page/{k}", True, False) for k in (1, 2, 3)]
    assert {e.depth for e in result.accepted} == {2}
    assert result.politeness["n.test"] == HostPoliteness("n.test", clock.now + 3.0, 3.0)
    assert replica_states(frontier) == {"http://n.test/page/0": 2}
    # the URL the neighbour fetched counts as seen when met here
    assert frontier.add([entry("n.test", 0)]).accepted == []
    assert frontier.totals()["queued"] == 3


def test_the_politeness_of_a_neighbour_is_taken_once_the_later_time_winning(
        frontier: Frontier, clock: FakeClock) -> None:
    frontier.take_in(InboundBatch(politeness=[HostPoliteness("p.test", clock.now + 30, 0.5)]))
    frontier.take_in(InboundBatch(politeness=[HostPoliteness("p.test", clock.now + 10, 0.7)]))
    first = frontier.add([entry("p.test", 1)])
    assert first.politeness["p.test"] == HostPoliteness("p.test", clock.now + 30, 0.7)
    frontier.apply(FrontierBatch(done=[lease.id for lease in frontier.lease("p.test", 5)[0]]))
    assert frontier.add([entry("p.test", 2)]).politeness == {}  # taken: it is this node's own now


def test_a_peer_with_a_new_incarnation_gets_its_replica_back(frontier: Frontier) -> None:
    assert not frontier.replica.heard("b", "one")  # first heard: nothing to compare with
    assert not frontier.replica.heard("b", "one")
    frontier.take_in(InboundBatch(queued_replicas=[entry("b.test", 1), entry("c.test", 1)]))
    frontier.take_in(InboundBatch(fetched_replicas=["http://b.test/page/0", "http://c.test/page/0"]))
    assert frontier.replica.heard("b", "two")
    assert frontier.replica.heard("b", "two")  # until what it is owed is owed: a give-back cut short is redone
    frontier.replica.record("b", "two")
    assert not frontier.replica.heard("b", "two")
    route = {"b.test": "b", "c.test": "c"}.get
    owed, after = frontier.replica.give_back("b", route, FIRST, 1)
    assert (owed, after) == (1, ("b.test", "http://b.test/page/0"))  # a page of one row
    owed, after = frontier.replica.give_back("b", route, after, 100)
    assert (owed, after) == (1, None)
    assert [(row.entry.url, row.seen, row.replica) for row in frontier.outbox.peek_rows("b", 10)] == [
        ("http://b.test/page/0", True, False), ("http://b.test/page/1", False, False)]
    assert frontier.outbox.peek_rows("c", 10) == []
    assert len(replica_states(frontier)) == 4  # still its successor: the rows stay


def test_the_incarnation_is_made_once_and_survives_a_reopen(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path, clock=clock) as first:
        name = first.replica.incarnation
    with Frontier(tmp_path, clock=clock) as again:
        assert again.replica.incarnation == name
    (tmp_path / FRONTIER_FILENAME).unlink()
    with Frontier(tmp_path, clock=clock) as fresh:
        assert fresh.replica.incarnation != name


def test_a_layout_4_replica_migrates_its_rows_as_fetched_ones(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with Frontier(path, clock=clock):
        pass
    with closing(sqlite3.connect(path)) as db:  # back to the layout 4 replica and outbox
        db.executescript("""
            DROP TABLE replica;
            CREATE TABLE replica (url TEXT PRIMARY KEY) WITHOUT ROWID;
            INSERT INTO replica VALUES ('http://old.test/page/1');
            DROP TABLE outbox;
            CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, peer TEXT NOT NULL, url TEXT NOT NULL,
                host TEXT NOT NULL, depth INTEGER NOT NULL, priority INTEGER NOT NULL, hops INTEGER NOT NULL,
                seen INTEGER NOT NULL DEFAULT 0, redirects INTEGER NOT NULL DEFAULT 0, via TEXT);
            INSERT INTO outbox (peer, url, host, depth, priority, hops, seen)
                VALUES ('x', 'http://old.test/page/2', 'old.test', 1, 0, 0, 1);
            DROP TABLE replica_hosts;
            DROP TABLE peers;
            PRAGMA user_version = 4;
        """)
    with Frontier(path, clock=clock) as migrated:
        assert replica_states(migrated) == {"http://old.test/page/1": 2}
        assert migrated.add([entry("old.test", 1)]).accepted == []  # still seen
        assert migrated.replica.heard("x", "1") is False
        assert migrated.replica.heard("x", "2")
        assert migrated.replica.give_back("x", lambda host: "x", FIRST, 10) == (1, None)
        assert [(row.entry.url, row.seen, row.replica) for row in migrated.outbox.peek_rows("x", 10)] == [
            ("http://old.test/page/2", True, False), ("http://old.test/page/1", True, False)]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8


def test_a_successor_back_empty_is_sent_this_nodes_queue_again(frontier: Frontier) -> None:
    frontier.add([entry("mine.test", k) for k in range(3)] + [entry("other.test", 1)])
    frontier.lease("mine.test", 1)  # on its way, not done: it goes too
    frontier.shedding.defer_lowest(1, below_priority=1)  # parked: still work
    successor_of = {"mine.test": "s", "other.test": "t"}.get
    owed, after = frontier.replica.resend("s", successor_of, "", 100)
    assert (owed, after) == (3, None)
    rows = frontier.outbox.peek_rows("s", 10)
    assert sorted(row.entry.url for row in rows) == [f"http://mine.test/page/{k}" for k in range(3)]
    assert all(row.replica and not row.seen for row in rows)
    assert frontier.outbox.peek_rows("t", 10) == []


def test_urls_rerouted_here_are_replicated_to_their_successor(frontier: Frontier) -> None:
    frontier.outbox.put([("down", entry("r.test", 1)), ("down", entry("r.test", 2))])
    result = frontier.outbox.reroute("down", lambda host: None, successor_of=lambda host: "succ")
    assert len(result.accepted) == 2 and frontier.outbox.counts() == {"succ": 2}
    assert all(row.replica for row in frontier.outbox.peek_rows("succ", 10))


def test_a_hosts_politeness_goes_to_its_successor_as_it_is_saved_in_a_row_with_no_url(
        frontier: Frontier) -> None:
    # robots.txt gave a.test a Crawl-delay: saved here, owed to the successor at once.
    polite = HostPoliteness("a.test", next_eligible=100.0, crawl_delay=4.0)
    frontier.save_hosts([polite], [("succ", polite)])
    [row] = frontier.outbox.peek_rows("succ", 10)
    assert row.politeness_only and row.politeness == polite and not row.ends_refresh
    body = msgpack.unpackb(msgpack.packb(encode_batch([row])))
    assert body == {"urls": [], "hosts": [["a.test", 100.0, 4.0]]}
    assert peer_politeness(body) == [polite]
    # Its successor down, the row is for it alone: dropped, not taken in here or sent on.
    result = frontier.outbox.reroute("succ", lambda host: "other", successor_of=lambda host: "other")
    assert result.accepted == [] and frontier.outbox.counts() == {}


def test_a_peers_politeness_is_checked_before_it_is_kept() -> None:
    assert peer_politeness({"urls": []}) == []
    for hosts in ("x", [["a.test", 1.0]], [["", 1, 1]], [["\ud800.test", 1, 1]], [["a test", 1, 1]],
                  [["a.test", True, 1]], [["a.test", -1, 1]], [["a.test", 1, float("inf")]], [[1, 1, 1]]):
        with pytest.raises(ValueError):
            peer_politeness({"urls": [], "hosts": hosts})


def deliver(rows: list[OutboxRow], successor: Frontier) -> None:
    """One outbox batch through the wire (encode_batch, msgpack, peer_refresh), taken in by the
    successor as POST /v1/urls takes a peer's replica (one transaction)."""
    body = msgpack.unpackb(msgpack.packb(encode_batch(rows)))
    queued = [UrlEntry(item["url"], host_of(item["url"]), item["depth"], item["priority"])
              for item in body["urls"] if item.get("replica")]
    fetched = [item["url"] for item in body["urls"] if item.get("seen")]
    successor.take_in(InboundBatch(queued_replicas=queued, refreshes=peer_refresh(body)))
    if fetched:
        successor.take_in(InboundBatch(fetched_replicas=fetched))


def queued_replica(frontier: Frontier) -> set[str]:
    return {url for url, state in replica_states(frontier).items() if state == 0}


def test_a_successor_back_from_away_drops_the_queued_rows_the_owners_refresh_does_not_name(
        frontier: Frontier, tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path / "succ" / FRONTIER_FILENAME, clock=clock) as successor:
        # what the successor kept before it went away: h.test/0-3 queued, h.test/9 fetched, and
        # done.test/1 queued; meanwhile the owner fetched h.test/0-1 and all of done.test
        deliver([OutboxRow(k, entry("h.test", k), seen=False, replica=True) for k in range(4)]
                + [OutboxRow(9, entry("h.test", 9), seen=True, replica=True),
                   OutboxRow(10, entry("done.test", 1), seen=False, replica=True)], successor)
        frontier.add([entry("h.test", k) for k in range(2, 6)] + [entry("done.test", 1)])
        frontier.apply(FrontierBatch(done=[lease.id for lease in frontier.lease("done.test", 1)[0]]))
        frontier.lease("h.test", 1)  # on its way: named too

        owed, after = frontier.replica.resend("s", lambda host: "s", "", 100, refresh="t1")
        assert (owed, after) == (6, None)  # four URLs of h.test, and the end of each host
        frontier.outbox.put_replicas([entry("h.test", 7)], {"h.test": "s"})  # queued after it
        rows = frontier.outbox.peek_rows("s", 100)
        assert [row.entry.url for row in rows if row.ends_refresh] == ["", ""]
        deliver(rows[:2], successor)  # a refresh spans batches: nothing goes before its end
        kept = {f"http://h.test/page/{k}" for k in range(4)} | {"http://done.test/page/1"}
        assert queued_replica(successor) == kept | {row.entry.url for row in rows[:2]}
        deliver(rows[2:5], successor)
        deliver(rows[5:], successor)
        assert queued_replica(successor) == {f"http://h.test/page/{k}" for k in (2, 3, 4, 5, 7)}
        assert replica_states(successor)["http://h.test/page/9"] == 2  # fetched rows stay
        # a takeover queues only what the owner had not fetched
        result, _ = successor.replica.promote(lambda host: True, "", 100)
        assert sorted(e.url for e in result.accepted) == [f"http://h.test/page/{k}" for k in (2, 3, 4, 5, 7)]


def test_an_owner_that_dies_before_the_end_of_its_refresh_loses_nothing(
        frontier: Frontier, tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path / "succ" / FRONTIER_FILENAME, clock=clock) as successor:
        deliver([OutboxRow(1, entry("h.test", 1), seen=False, replica=True)], successor)
        frontier.add([entry("h.test", 2), entry("h.test", 3)])
        frontier.replica.resend("s", lambda host: "s", "", 100, refresh="t1")
        deliver(frontier.outbox.peek_rows("s", 1), successor)  # the rest never arrives
        result, _ = successor.replica.promote(lambda host: True, "", 100)
        assert sorted(e.url for e in result.accepted) == [f"http://h.test/page/{k}" for k in (1, 2)]


def test_a_second_refresh_outdates_the_first_and_a_late_row_of_the_first_is_kept(
        frontier: Frontier, tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path / "succ" / FRONTIER_FILENAME, clock=clock) as successor:
        frontier.add([entry("h.test", 1)])
        frontier.replica.resend("s", lambda host: "s", "", 100, refresh="t1")
        frontier.replica.resend("s", lambda host: "s", "", 100, refresh="t2")
        rows = frontier.outbox.peek_rows("s", 100)
        assert encode_batch(rows)["refresh"] == [["h.test", "t2", True]]  # the last one in the batch
        deliver(rows, successor)
        assert queued_replica(successor) == {"http://h.test/page/1"}


def test_the_end_of_a_refresh_is_dropped_with_a_successor_that_went_down(frontier: Frontier) -> None:
    frontier.add([entry("h.test", 1)])
    frontier.replica.resend("s", lambda host: "s", "", 100, refresh="t1")
    assert frontier.outbox.counts() == {"s": 2}
    frontier.outbox.reroute("s", lambda host: None, successor_of=lambda host: "t")
    assert frontier.outbox.counts() == {}  # this node has the URL; "s" is owed a refresh again


def test_the_peers_owed_a_refresh_are_remembered(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path, clock=clock) as first:
        first.replica.owe(["b", "c"])
        first.replica.owe(["b"])
        first.replica.refreshed("c")
    with Frontier(tmp_path, clock=clock) as again:
        assert again.replica.owed() == {"b"}


def test_a_peers_refresh_is_checked_before_it_is_kept() -> None:
    assert peer_refresh({"urls": []}) == []
    assert peer_refresh({"urls": [], "refresh": [["A.test", "t1", True]]}) == [HostRefresh("a.test", "t1", True)]
    for marks in ("x", [["a.test", "t1"]], [["", "t1", True]], [["a.test", "", True]], [["a.test", "t 1", True]],
                  [["a.test", "t1", 1]], [["a.test", 7, True]], [["\ud800.test", "t1", False]],
                  [["a.test", "x" * 65, False]]):
        with pytest.raises(ValueError):
            peer_refresh({"urls": [], "refresh": marks})


def test_a_refreshed_successor_is_sent_the_urls_finished_here_as_fetched_ones(frontier: Frontier) -> None:
    frontier.add([entry("h.test", k) for k in range(4)] + [entry("other.test", 1)])
    [done, given_up] = frontier.lease("h.test", 2)[0]
    frontier.apply(FrontierBatch(done=[done.id], failed=[given_up.id]))
    frontier.apply(FrontierBatch(done=[lease.id for lease in frontier.lease("other.test", 1)[0]]))
    successor_of = {"h.test": "s", "other.test": "t"}.get
    owed, after = frontier.replica.resend_finished("s", successor_of, 0, 2)  # a page of two rows
    assert after is not None
    while after is not None:
        more, after = frontier.replica.resend_finished("s", successor_of, after, 2)
        owed += more
    assert owed == 2
    rows = frontier.outbox.peek_rows("s", 10)
    assert sorted((row.entry.url, row.seen, row.replica) for row in rows) == [
        (done.url, True, True), (given_up.url, True, True)]
    assert frontier.outbox.peek_rows("t", 10) == []


def queued_hosts(frontier: Frontier) -> list[str]:
    with closing(sqlite3.connect(frontier.path)) as db:
        return [host for (host,) in db.execute("SELECT host FROM replica_queued_hosts ORDER BY host")]


def test_a_takeover_pages_through_the_hosts_given_queued_rows_not_through_the_fetched_ones(
        frontier: Frontier) -> None:
    frontier.take_in(InboundBatch(queued_replicas=[entry("q.test", 1), entry("f.test", 1)]))
    # fetched since
    frontier.take_in(InboundBatch(fetched_replicas=["http://f.test/page/1", "http://old.test/page/1"]))
    assert queued_hosts(frontier) == ["f.test", "q.test"]  # a fetched row lists no host
    result, after = frontier.replica.promote(lambda host: host == "f.test", "", 100)
    assert (result.accepted, after) == ([], None)  # f.test had nothing queued left...
    assert queued_hosts(frontier) == ["q.test"]  # ...and the next takeover skips it
    result, _ = frontier.replica.promote(lambda host: True, "", 1)
    assert [e.url for e in result.accepted] == ["http://q.test/page/1"]
    assert queued_hosts(frontier) == []
    assert frontier.add([entry("f.test", 1), entry("old.test", 1)]).accepted == []  # still fetched


def test_a_layout_6_replica_is_keyed_by_host_and_url_with_its_queued_rows_kept(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with Frontier(path, clock=clock):
        pass
    with closing(sqlite3.connect(path)) as db:  # back to the layout 6 replica: keyed by url
        db.executescript("""
            DROP TABLE replica;
            DROP TABLE replica_queued_hosts;
            CREATE TABLE replica (url TEXT PRIMARY KEY, host TEXT, state INTEGER NOT NULL DEFAULT 2,
                depth INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL DEFAULT 0,
                hops INTEGER NOT NULL DEFAULT 0, redirects INTEGER NOT NULL DEFAULT 0, via TEXT,
                refresh TEXT) WITHOUT ROWID;
            CREATE INDEX replica_queued ON replica(host) WHERE state = 0;
            INSERT INTO replica (url, host, state, depth, via) VALUES
                ('http://n.test/page/1', 'n.test', 0, 2, 'http://n.test/'),
                ('http://n.test/page/2', 'n.test', 2, 2, NULL),
                ('http://old.test/page/1', NULL, 2, 0, NULL);
            PRAGMA user_version = 6;
        """)
    with Frontier(path, clock=clock) as migrated:
        assert replica_states(migrated) == {"http://n.test/page/1": 0, "http://n.test/page/2": 2,
                                            "http://old.test/page/1": 2}
        assert queued_hosts(migrated) == ["n.test"]
        assert migrated.add([entry("old.test", 1), entry("n.test", 2)]).accepted == []  # fetched: seen
        result, _ = migrated.replica.promote(lambda host: True, "", 100)
        assert [(e.url, e.depth, e.via) for e in result.accepted] == [("http://n.test/page/1", 2, "http://n.test/")]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [row[1] for row in db.execute("PRAGMA table_info(replica)") if row[5]] == ["host", "url"]
        assert db.execute("SELECT name FROM sqlite_master WHERE name IN ('replica_queued', 'replica_before_7')"
                          ).fetchall() == []
        assert db.execute("SELECT host FROM replica WHERE url = 'http://old.test/page/1'").fetchone() == ("old.test",)
