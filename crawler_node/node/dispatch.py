"""The dispatcher: which host sends its next request, and the fetch tasks it starts.

It takes a global slot, waits until admission allows a new fetch, asks the host table for a
host that may send now, and starts one fetch task for it. Every wait is on a notification
(new work, a released slot, a drained stage), never a poll. Full stages block fetch tasks,
blocked tasks hold their global slots, and with no free slot nothing is dispatched (rule 1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler_node.core.robots import scheme_of
from crawler_node.core.stats import Kind, Metric, stat
from crawler_node.node.admission import FetchAdmission
from crawler_node.node.fetch_stage import FetchStage
from crawler_node.node.hosts import HostState, HostTable, Step
from crawler_node.node.leases import LeaseKeeper
from crawler_node.node.queues import BLOCKED_ENQUEUES, QUEUE_AGE, QUEUE_CAPACITY, QUEUE_DEPTH
from crawler_node.node.robots_txt import unfetched_page
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.dispatch")

IDLE_WAIT_S = 1.0  # with no host ready and none waiting on a time: look again this often anyway

IN_FLIGHT = Metric("crawler_in_flight", "Requests in flight on this node", Kind.GAUGE)


class HoldGate(Protocol):
    """What a hold waits for (cluster.readiness.StartupHold): said when its time runs out."""

    def waiting_for(self) -> str: ...


@dataclass(slots=True)
class Hold:
    """The start-up hold (cluster.readiness): no request before ``until`` or its release."""

    since: float
    until: float
    released_at: float | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class HoldSnapshot:
    since: float
    until: float
    released_at: float | None
    reason: str | None
    holding: bool = field(metadata=stat(json=False))
    released: bool = field(metadata=stat(json=False))
    waiting_for: str | None = field(metadata=stat(when="holding"))  # while it holds: what it waits for
    held_s: float | None = field(metadata=stat(when="released"))  # once released: how long it held


@dataclass(frozen=True, slots=True)
class DispatchSnapshot:
    """The status's ``queues.fetch``: requests in flight, bounded by the global limit."""

    depth: int = field(metadata=stat(QUEUE_DEPTH, IN_FLIGHT))
    capacity: int = field(metadata=stat(QUEUE_CAPACITY))
    oldest_age_s: float = field(metadata=stat(QUEUE_AGE))
    held_until: float | None
    hold: HoldSnapshot | None
    blocked_puts: int = field(default=0, metadata=stat(BLOCKED_ENQUEUES, json=False))  # a fetch never waits to start


class Dispatcher:
    def __init__(self, *, hosts: HostTable, admission: FetchAdmission, leases: LeaseKeeper, fetch: FetchStage,
                 serves: Callable[[str], bool], global_inflight: int, work: Wakeup, pressure: Wakeup,
                 on_fatal: Callable[[BaseException], None], clock: Callable[[], float],
                 fence: Callable[[float], float | None] | None = None) -> None:
        """``work`` is notified when a host may have become ready, ``pressure`` when a stage
        may have drained; ``serves(host)``: this node crawls the host (the cluster's ring);
        ``fence(now)``: None while this node may start requests, else when to ask again
        (cluster.fencing: it may no longer own its hosts)."""
        if global_inflight < 1:
            raise ValueError(f"global_inflight must be >= 1, got {global_inflight}")
        self._hosts = hosts
        self._admission = admission
        self._leases = leases
        self._fetch = fetch
        self._serves = serves
        self._capacity = global_inflight
        self._slots = asyncio.Semaphore(global_inflight)
        self._work = work
        self._pressure = pressure
        self._on_fatal = on_fatal
        self._clock = clock
        self._fence = fence
        self._tasks: set[asyncio.Task[None]] = set()
        self._hold_until = 0.0
        self._hold: Hold | None = None  # the start-up hold, for the status
        self._hold_gate: HoldGate | None = None
        self._stopping = False

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def idle(self) -> bool:
        return not self._tasks

    def hold(self, until: float, gate: HoldGate | None = None) -> None:
        """Start nothing before ``until``, or before :meth:`release_hold` (a starting member
        first hears its peers: cluster.readiness); ``gate`` says what the hold waits for."""
        self._hold_until = until
        self._hold_gate = gate
        self._hold = Hold(since=self._clock(), until=until)

    def release_hold(self, reason: str) -> None:
        """End the hold now, for ``reason``; a hold already over stays as it ended."""
        hold = self._hold
        if hold is None or hold.released_at is not None:
            return
        self._hold_until = 0.0
        hold.released_at, hold.reason = self._clock(), reason
        log.info("leasing after %.2f s: %s", hold.released_at - hold.since, reason)
        self._work.notify()

    def snapshot(self) -> DispatchSnapshot:
        hold, held = self._hold, None
        if hold is not None:
            holding = hold.released_at is None
            held = HoldSnapshot(
                since=hold.since, until=hold.until, released_at=hold.released_at, reason=hold.reason, holding=holding,
                released=not holding,
                waiting_for=self._hold_gate.waiting_for() if holding and self._hold_gate is not None else None,
                held_s=None if hold.released_at is None else round(hold.released_at - hold.since, 3))
        return DispatchSnapshot(depth=len(self._tasks), capacity=self._capacity, oldest_age_s=0.0,
                                held_until=self._hold_until if self._hold_until > self._clock() else None, hold=held)

    # ----------------------------------------------------------------- lifecycle
    def start(self, supervisor: Supervisor) -> None:
        supervisor.stage("dispatcher", self._dispatch_loop())

    def stop(self) -> None:
        """Lease and start nothing more; fetches under way go on (see :meth:`drain`)."""
        self._stopping = True
        self._work.notify()
        self._pressure.notify()

    async def drain(self, grace_s: float) -> None:
        """Let the fetches under way end, and cancel those still running after ``grace_s``."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)

    # ----------------------------------------------------------------- the loop
    async def _dispatch_loop(self) -> None:
        while not self._stopping:
            await self._slots.acquire()
            handed_off = False
            try:
                state = await self._next_host()
                if state is not None:
                    handed_off = self._dispatch(state)
            finally:
                if not handed_off:
                    self._slots.release()

    async def _next_host(self) -> HostState | None:
        while not self._stopping:
            now = self._clock()
            if now < self._hold_until:
                await self._work.wait(self._hold_until - now)
                continue
            if self._hold is not None and self._hold.released_at is None:
                gate = self._hold_gate
                self.release_hold("the hold ran out" if gate is None else
                                  f"the startup grace ran out while waiting for {gate.waiting_for()}")
            blocked = self._admission.blocked(now)
            if blocked is not None:
                await self._wait_admission(blocked)
                continue
            # No await from here to the dispatch: what admission and the fence allowed still holds.
            fenced_until = self._fence(now) if self._fence is not None else None
            if fenced_until is not None:
                await self._work.wait(max(fenced_until - now, 0.001))
                continue
            state = self._hosts.next_host(now)
            if state is not None:
                return state
            wake = self._hosts.next_wakeup()
            await self._work.wait(IDLE_WAIT_S if wake is None else min(max(wake - now, 0.001), IDLE_WAIT_S))
        return None

    async def _wait_admission(self, reason: str) -> None:
        """No new fetch may start, because of ``reason``: wait until that changes. One
        rejection is counted per wait however long it lasts, and its time is added up."""
        admission = self._admission
        admission.stats.rejections[reason] += 1
        started = time.monotonic()
        try:
            while not self._stopping and admission.blocked(self._clock()) == reason:
                resume_at = admission.resume_at()
                await self._pressure.wait(None if resume_at is None else max(0.001, resume_at - self._clock()))
        finally:
            blocked_s = admission.stats.blocked_s
            blocked_s[reason] = blocked_s.get(reason, 0.0) + time.monotonic() - started

    def _dispatch(self, state: HostState) -> bool:
        """Start one request for the host; True when a task now owns the global slot."""
        hosts = self._hosts
        now = self._clock()
        try:
            if not self._serves(state.host):
                self._leases.give_back(hosts.release_host(state, now))
                return False
            step, lease = hosts.next_step(state, now)
            if step is Step.REFILL:
                self._leases.want_refill(state)
                return False
            assert lease is not None
            if step is Step.DISALLOWED or step is Step.UNAVAILABLE or step is Step.DROPPED:
                robots = (state.robots or {}).get(scheme_of(lease.url))
                self._leases.unfetched(unfetched_page(lease, robots, disallowed=step is Step.DISALLOWED,
                                                      dropped=step is Step.DROPPED, now=time.time()))
                if hosts.wants_refill(state):
                    self._leases.want_refill(state)
                return False
            permit = self._admission.acquire(hosts.start_request(state, now), state.ip_gate)
            if step is Step.ROBOTS:
                self._start(self._fetch.fetch_robots(state, permit, lease), f"robots:{state.host}")
                return True
            self._start(self._fetch.fetch_page(state, lease, permit), f"fetch:{state.host}")
            if hosts.wants_refill(state):
                self._leases.want_refill(state)
            return True
        finally:
            hosts.settle(state, now)

    def _start(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._fetch_done)

    def _fetch_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()
        self._work.notify()
        self._pressure.notify()  # an API slot may be free again
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            assert exc is not None
            log.error("fetch task %s failed; stopping the node", task.get_name(), exc_info=exc)
            self._on_fatal(exc)

