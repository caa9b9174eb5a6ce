"""The frontier's async shell: the only holder of the `Frontier` and of its thread.

Every operation is one call on that thread, so the event loop never waits on the disk and the
frontier never sees two threads. There is no generic `call(fn)`: callers name the operation,
and so the frontier's state is never read from the event loop's thread (`snapshot()` is the
way to see it). A write the disk has no room for is a DiskFull (runtime.datadir), whatever
the call: the node stops on it, and the transaction it was in is rolled back.

The calls on the crawl's path (`lease_many`, `apply`, `take_in`) are timed from the caller's
side, the wait for the thread included: a checkpoint or a long scan ahead of a lease is what
the fetchers feel (`call_seconds`, `/metrics` crawler_frontier_call_duration_seconds).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from crawler_node.core.histogram import FRONTIER_SECONDS_BOUNDS, CountingHistogram, HistogramSnapshot
from crawler_node.frontier import checkpointer
from crawler_node.frontier.frontier import Frontier
from crawler_node.frontier.frontier_snapshot import FrontierSnapshot
from crawler_node.frontier.operator_queries import FrontierControl, HostCounts, QueuedUrl
from crawler_node.frontier.outbox import OutboxRow
from crawler_node.frontier.records import (
    AddResult,
    FrontierBatch,
    HostPoliteness,
    HostQueue,
    InboundBatch,
    Lease,
    UrlEntry,
)
from crawler_node.frontier.replica import Cursor
from crawler_node.runtime.datadir import writing
from crawler_node.runtime.workers import SyncWorker

_P = ParamSpec("_P")
_T = TypeVar("_T")


class _FrontierThread(SyncWorker):
    """The frontier's thread: its calls say a full disk as a DiskFull naming the frontier."""

    def __init__(self, path: Path) -> None:
        super().__init__("frontier")
        self._path = path

    async def call(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with writing(lambda: self._path, "the frontier"):
            return await super().call(fn, *args, **kwargs)


class FrontierService:
    def __init__(self, *, path: Path, lease_timeout_s: float, clock: Callable[[], float] = time.time,
                 max_pages_per_host: int = 0, resident_hosts: int = 0, urgent_priority: int | None = None) -> None:
        if lease_timeout_s <= 0:
            raise ValueError(f"lease_timeout_s must be > 0, got {lease_timeout_s}")
        self._path = Path(path)
        self._lease_timeout_s = lease_timeout_s
        self._max_pages_per_host = max_pages_per_host  # see Frontier
        self._resident_hosts = resident_hosts
        self._urgent_priority = urgent_priority
        self._clock = clock
        self._thread: _FrontierThread | None = None
        self._frontier: Frontier | None = None
        self._control: FrontierControl | None = None
        self.incarnation: str | None = None  # the open database's (frontier.replica), once open
        # The totals as the last totals() or snapshot() read them, kept on the event loop's
        # thread for what may not wait on the frontier's (a heartbeat answer, api.status).
        self.last_totals: dict[str, Any] | None = None
        # The crawl's calls, each timed from the event loop: its wait for the thread included.
        self.call_seconds = {name: CountingHistogram(FRONTIER_SECONDS_BOUNDS)
                             for name in ("lease_many", "apply", "take_in")}

    async def open(self) -> None:
        """Open the frontier on its own thread (recovering leases, counting rows: a scan)."""
        if self._thread is not None:
            raise RuntimeError("the frontier service is already open")
        self._thread = _FrontierThread(self._path)
        try:
            self._frontier = await self._thread.call(
                Frontier, self._path, lease_timeout_s=self._lease_timeout_s, clock=self._clock,
                max_pages_per_host=self._max_pages_per_host, resident_hosts=self._resident_hosts,
                urgent_priority=self._urgent_priority, background_checkpoints_from=checkpointer.FROM_BYTES)
        except BaseException:
            self._thread.shutdown()
            self._thread = None
            raise
        self._control = FrontierControl.of(self._frontier)
        self.incarnation = self._frontier.replica.incarnation  # fixed for the database's life

    async def close(self) -> None:
        """Close the frontier, then stop its thread. Calls made after this fail."""
        thread, frontier = self._thread, self._frontier
        if thread is None:
            return
        self._thread = self._frontier = self._control = None
        try:
            if frontier is not None:
                await thread.call(frontier.close)
        finally:
            thread.shutdown()  # idle by now: returns at once

    def _opened(self) -> tuple[_FrontierThread, Frontier]:
        if self._thread is None or self._frontier is None:
            raise RuntimeError("the frontier service is not open")
        return self._thread, self._frontier

    # -- queue and leases ------------------------------------------------------------------

    async def add(self, entries: Sequence[UrlEntry], *, not_before: float = 0.0) -> AddResult:
        thread, frontier = self._opened()
        return await thread.call(frontier.add, entries, not_before=not_before)

    async def take_in(self, batch: InboundBatch) -> AddResult:
        thread, frontier = self._opened()
        return await self._timed("take_in", thread, frontier.take_in, batch)

    async def lease_many(self, requests: Sequence[tuple[str, int]]) -> list[tuple[list[Lease], float | None]]:
        thread, frontier = self._opened()
        return await self._timed("lease_many", thread, frontier.lease_many, requests)

    async def expire_leases(self) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.expire_leases)

    async def apply(self, batch: FrontierBatch) -> AddResult:
        thread, frontier = self._opened()
        return await self._timed("apply", thread, frontier.apply, batch)

    async def _timed(self, name: str, thread: _FrontierThread, fn: Callable[_P, _T], /,
                     *args: _P.args, **kwargs: _P.kwargs) -> _T:
        started = time.monotonic()
        try:
            return await thread.call(fn, *args, **kwargs)
        finally:  # a call that failed took its time too
            self.call_seconds[name].observe(time.monotonic() - started)

    def call_snapshot(self) -> dict[str, HistogramSnapshot]:
        """The timed calls' histograms (core.histogram snapshots), by call."""
        return {name: histogram.snapshot() for name, histogram in self.call_seconds.items()}

    # -- recrawling ------------------------------------------------------------------------

    async def requeue_due(self, now: float, limit: int, priority: int) -> Counter[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.requeue_due, now, limit, priority)

    async def due_count(self, now: float) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.due_count, now)

    # -- hosts and totals ------------------------------------------------------------------

    async def park(self, hosts: Sequence[str], returned: Sequence[int] = ()) -> list[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.park, hosts, returned)

    async def unpark(self, limit: int) -> list[HostQueue]:
        thread, frontier = self._opened()
        return await thread.call(frontier.unpark, limit)

    async def hosts_with_work(self) -> list[HostQueue]:
        thread, frontier = self._opened()
        return await thread.call(frontier.hosts_with_work)

    async def save_hosts(self, records: Sequence[HostPoliteness],
                         successors: Sequence[tuple[str, HostPoliteness]] = ()) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.save_hosts, records, successors)

    async def totals(self) -> dict[str, int | float]:
        thread, frontier = self._opened()
        totals = await thread.call(frontier.totals)
        self.last_totals = dict(totals)  # a copy: callers may change theirs
        return totals

    async def snapshot(self) -> FrontierSnapshot:
        thread, frontier = self._opened()
        snapshot = await thread.call(frontier.snapshot)
        self.last_totals = dataclasses.asdict(snapshot.totals)
        return snapshot

    # -- shedding --------------------------------------------------------------------------

    async def defer_lowest(self, n: int, *, below_priority: int) -> Counter[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.shedding.defer_lowest, n, below_priority=below_priority)

    async def stop_shedding(self) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.shedding.stop)

    async def restore_deferred(self, n: int) -> Counter[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.shedding.restore, n)

    # -- outbox ----------------------------------------------------------------------------

    async def outbox_put(self, items: Sequence[tuple[str, UrlEntry]], *, seen: bool = False) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.outbox.put, items, seen=seen)

    async def outbox_peek(self, peer: str, n: int) -> list[OutboxRow]:
        thread, frontier = self._opened()
        return await thread.call(frontier.outbox.peek_rows, peer, n)

    async def outbox_ack(self, peer: str, sent: Sequence[tuple[int, str]]) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.outbox.ack, peer, sent)

    async def outbox_counts(self) -> dict[str, int]:
        thread, frontier = self._opened()
        return await thread.call(frontier.outbox.counts)

    async def outbox_last_ids(self) -> dict[str, int]:
        """The id of the last row owed to each peer that is owed any."""
        thread, frontier = self._opened()
        return await thread.call(frontier.outbox.last_ids)

    async def outbox_reroute(self, peer: str, route: Callable[[str], str | None], limit: int = 5000,
                             successor_of: Callable[[str], str | None] | None = None) -> AddResult:
        """The callables run on the frontier's thread: they must only read what they were given."""
        thread, frontier = self._opened()
        return await thread.call(frontier.outbox.reroute, peer, route, limit, successor_of)

    # -- hand-off --------------------------------------------------------------------------

    async def handoff_host(self, host: str, peer: str, limit: int = 5000,
                           politeness: HostPoliteness | None = None) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.handoff.handoff_host, host, peer, limit, politeness)

    async def in_flight(self, hosts: Sequence[str]) -> dict[str, int]:
        thread, frontier = self._opened()
        return await thread.call(frontier.handoff.in_flight, hosts)

    async def mark_seen(self, entries: Sequence[UrlEntry]) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.handoff.mark_seen, entries)

    async def replica_add(self, urls: Sequence[str]) -> int:
        thread, frontier = self._opened()
        return await thread.call(frontier.handoff.replica_add, urls)

    async def hosts_after(self, after: str, limit: int) -> list[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.handoff.hosts_after, after, limit)

    # -- the neighbours' replica (frontier.replica) ----------------------------------------

    async def replica_promote(self, serves: Callable[[str], bool], after: str, limit: int,
                              successor_of: Callable[[str], str | None] | None = None) -> tuple[AddResult, str | None]:
        """The callables run on the frontier's thread: they must only read what they were given."""
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.promote, serves, after, limit, successor_of)

    async def replica_heard(self, peer: str, incarnation: str) -> bool:
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.heard, peer, incarnation)

    async def replica_record(self, peer: str, incarnation: str) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.replica.record, peer, incarnation)

    async def replica_give_back(self, peer: str, route: Callable[[str], str | None], after: Cursor,
                                limit: int) -> tuple[int, Cursor | None]:
        """`route` runs on the frontier's thread: it must only read what it was given."""
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.give_back, peer, route, after, limit)

    async def replica_resend(self, peer: str, successor_of: Callable[[str], str | None], after: str,
                             limit: int, refresh: str | None = None) -> tuple[int, str | None]:
        """`successor_of` runs on the frontier's thread: it must only read what it was given."""
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.resend, peer, successor_of, after, limit, refresh)

    async def replica_resend_finished(self, peer: str, successor_of: Callable[[str], str | None], after: int,
                                      limit: int) -> tuple[int, int | None]:
        """`successor_of` runs on the frontier's thread: it must only read what it was given."""
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.resend_finished, peer, successor_of, after, limit)

    async def replica_owe(self, peers: Sequence[str]) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.replica.owe, peers)

    async def replica_owed(self) -> set[str]:
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.owed)

    async def replica_refreshed(self, peer: str) -> None:
        thread, frontier = self._opened()
        await thread.call(frontier.replica.refreshed, peer)

    async def replica_counts(self) -> dict[str, int]:
        thread, frontier = self._opened()
        return await thread.call(frontier.replica.counts)

    # -- operator control (frontier.operator_queries) -----------------------------------------------

    async def host_counts(self) -> list[HostCounts]:
        thread, _ = self._opened()
        assert self._control is not None
        return await thread.call(self._control.host_counts)

    async def host_queue(self, host: str, limit: int) -> tuple[HostCounts | None, list[QueuedUrl]]:
        thread, _ = self._opened()
        assert self._control is not None
        return await thread.call(self._control.host_queue, host, limit)

    async def drop_host(self, host: str, lease_ids: Sequence[int] = ()) -> Counter[str]:
        thread, _ = self._opened()
        assert self._control is not None
        return await thread.call(self._control.drop_host, host, lease_ids)
