"""Frontier transactions: a failed one leaves every counter as the database says; parts called
inside another part's transaction commit or roll back with it."""

from __future__ import annotations

import sqlite3

import pytest
from frontier_helpers import FakeClock, entry

from crawler_node.core.shed_policy import ARRIVED_WHILE_SHEDDING
from crawler_node.frontier import Frontier, FrontierBatch, HostPoliteness, InboundBatch, UrlEntry


def state(frontier: Frontier) -> tuple[object, ...]:
    return (frontier.snapshot(), frontier.hosts_with_work(), frontier.outbox.counts(),
            frontier.handoff.hosts_after("", 100))


def test_a_failed_transaction_rebuilds_every_count(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add([entry("a.test", n) for n in range(4)] + [entry("b.test", 1, priority=-5)])
    frontier.save_hosts([HostPoliteness("a.test", crawl_delay=3.0)])
    leases, _ = frontier.lease("a.test", 3)
    frontier.apply(FrontierBatch(done=[leases[0].id], failed=[leases[1].id]))
    frontier.shedding.defer_lowest(1, below_priority=0)  # b.test's only URL, and shedding is on
    frontier.handoff.replica_add(["http://r.test/fetched"])
    before = state(frontier)

    # Fails late: after the outcomes, the outbox, a new host's record and row, and a URL
    # parked on arrival; the replicated URL's depth does not fit an SQLite integer.
    overflowing = UrlEntry(url="http://r.test/fetched", host="r.test", depth=2**70)
    with pytest.raises(OverflowError):
        frontier.apply(FrontierBatch(
            done=[leases[2].id], retry=[(leases[2].id, 0.0)], forward=[("peer-2", entry("f.test", 1))],
            add=[entry("c.test", 1), entry("a.test", 9, priority=-9), overflowing]))

    assert state(frontier) == before
    assert ARRIVED_WHILE_SHEDDING not in frontier.shedding.counts()  # counted only once committed
    assert frontier.host("c.test") is None and frontier.host("a.test").politeness.crawl_delay == 3.0
    clock.now += 61.0  # the lease that the failed batch finished is still out, with its expiry
    assert frontier.expire_leases() == 1
    # The rolled-back rows were never rows: their URLs are new, not remembered duplicates.
    again = frontier.apply(FrontierBatch(add=[entry("c.test", 1), entry("a.test", 9)]))
    assert len(again.accepted) == 2
    assert frontier.totals()["hosts"] == 3  # c.test's row, made this time


def test_take_in_is_one_transaction(frontier: Frontier) -> None:
    broken = UrlEntry(url=None, host="b.test")  # type: ignore[arg-type]  # violates NOT NULL

    with pytest.raises(sqlite3.IntegrityError):
        frontier.take_in(InboundBatch(add=[entry("a.test", 1), broken], forward=[("peer-2", entry("f.test", 1))],
                                      fetched_replicas=["http://r.test/page/1"]))

    assert frontier.outbox.counts() == {} and frontier.outbox.peek("peer-2", 10) == []
    assert frontier.totals()["queued"] == 0
    result = frontier.take_in(InboundBatch(add=[entry("a.test", 1)], forward=[("peer-2", entry("f.test", 1))],
                                           fetched_replicas=["http://r.test/page/1"]))
    assert [e.url for e in result.accepted] == ["http://a.test/page/1"]
    assert frontier.outbox.counts() == {"peer-2": 1}
    assert frontier.add([entry("r.test", 1)]).accepted == []  # the replica came in too


def test_take_in_of_urls_fetched_elsewhere(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1)])

    result = frontier.take_in(InboundBatch(seen=[entry("a.test", 1), entry("a.test", 2)]))

    assert result.accepted == [] and result.duplicates == 0  # both changed: one finished, one new
    assert frontier.totals()["done"] == 2 and frontier.totals()["queued"] == 0
    assert frontier.take_in(InboundBatch(seen=[entry("a.test", 2)])).duplicates == 1
