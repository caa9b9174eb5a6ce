"""FrontierService: the async shell, built alone. Every operation runs on the frontier's own
thread, never on the event loop's."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from crawler_node.core.shed_policy import QUEUE_OVER_HIGH_WATER
from crawler_node.frontier import FrontierBatch, FrontierService, HostPoliteness, InboundBatch, UrlEntry


class ThreadRecordingClock:
    """A fixed clock that notes the threads it is read on (the frontier reads it in its calls)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.threads: set[str] = set()

    def __call__(self) -> float:
        self.threads.add(threading.current_thread().name)
        return self.now


def entry(host: str, n: int, **fields: int) -> UrlEntry:
    return UrlEntry(url=f"http://{host}/page/{n}", host=host, **fields)


async def test_a_crawl_round_trip_through_the_service(tmp_path: Path) -> None:
    clock = ThreadRecordingClock()
    service = FrontierService(path=tmp_path, lease_timeout_s=60.0, clock=clock)
    await service.open()
    try:
        added = await service.add([entry("a.test", 1), entry("a.test", 2), entry("b.test", 1, priority=-1)])
        assert len(added.accepted) == 3
        await service.save_hosts([HostPoliteness("a.test", crawl_delay=2.0)])
        assert [(r.host, r.queued) for r in await service.hosts_with_work()] == [("a.test", 2), ("b.test", 1)]

        [(leases, _)] = await service.lease_many([("a.test", 1)])
        result = await service.apply(FrontierBatch(done=[lease.id for lease in leases], add=[entry("c.test", 1)]))
        assert [e.url for e in result.accepted] == ["http://c.test/page/1"]
        assert await service.expire_leases() == 0

        assert await service.defer_lowest(1, below_priority=0) == {"b.test": 1}
        await service.stop_shedding()
        assert await service.restore_deferred(1) == {"b.test": 1}

        await service.outbox_put([("peer-2", entry("d.test", 1))])
        [row] = await service.outbox_peek("peer-2", 10)
        row_id, owed = row.id, row.entry
        assert (owed.url, row.seen, row.replica) == ("http://d.test/page/1", False, False)
        assert await service.outbox_counts() == {"peer-2": 1}
        assert await service.outbox_ack("peer-2", [(row_id, owed.url)]) == 1
        await service.outbox_put([("peer-2", entry("d.test", 2))])
        assert len((await service.outbox_reroute("peer-2", lambda host: None)).accepted) == 1

        assert await service.handoff_host("c.test", "peer-3") == 1
        assert await service.mark_seen([entry("e.test", 1)]) == 1
        assert await service.replica_add(["http://f.test/page/1"]) == 1
        taken = await service.take_in(InboundBatch(add=[entry("g.test", 1)], forward=[("peer-3", entry("h.test", 1))]))
        assert len(taken.accepted) == 1
        assert await service.hosts_after("", 3) == ["a.test", "b.test", "d.test"]

        totals = await service.totals()
        snapshot = await service.snapshot()
        assert (totals["done"], totals["queued"]) == (2, 4)
        assert snapshot["shedding"] == {"cut": None, "counts": {QUEUE_OVER_HIGH_WATER: 1, "restored": 1}}
        assert snapshot["hosts_in_memory"] == 4  # with work: a.test, b.test, d.test, g.test
    finally:
        await service.close()

    assert clock.threads and threading.current_thread().name not in clock.threads
    with pytest.raises(RuntimeError):
        await service.totals()
    assert not hasattr(service, "call")  # callers name the operation


async def test_a_lease_behind_a_slow_call_counts_its_wait(tmp_path: Path) -> None:
    """The crawl's calls are timed from the caller's side: a lease queued behind something
    slow on the frontier's thread (a WAL checkpoint, a long scan; here a call that holds the
    thread until the test lets it go, 0.3 s after the lease was asked for) shows that wait,
    which is what the fetchers waiting for it feel."""
    service = FrontierService(path=tmp_path, lease_timeout_s=60.0)
    await service.open()
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(10)

    try:
        await service.add([entry("a.test", 1)])
        assert service._thread is not None
        held = asyncio.ensure_future(service._thread.call(hold))
        assert await asyncio.to_thread(entered.wait, 10), "the frontier's thread is held"
        lease = asyncio.ensure_future(service.lease_many([("a.test", 1)]))
        await asyncio.sleep(0.3)
        release.set()
        [(leases, _)] = await lease
        await held
        await service.apply(FrontierBatch(done=[leased.id for leased in leases]))
        calls = service.call_snapshot()
        buckets = dict((bound, count) for bound, count in calls["lease_many"]["buckets"])
        assert calls["lease_many"]["count"] == 1 and buckets[0.1] == 0, calls["lease_many"]
        assert calls["lease_many"]["sum"] >= 0.25
        assert calls["apply"]["count"] == 1 and calls["take_in"]["count"] == 0
    finally:
        release.set()
        await service.close()


async def test_close_before_open_and_twice_is_harmless(tmp_path: Path) -> None:
    service = FrontierService(path=tmp_path, lease_timeout_s=60.0)
    await service.close()
    await service.open()
    with pytest.raises(RuntimeError):
        await service.open()
    await service.close()
    await service.close()


def test_rejects_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        FrontierService(path=tmp_path, lease_timeout_s=0)
