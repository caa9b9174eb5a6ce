"""Dispatch: which host sends its next request, and the leases that feed it.

The dispatcher takes a global slot, asks the scheduler for a host that may send now, and
starts one fetch task; it never waits on the disk, because a refill task keeps per-host lease
buffers topped up in batched frontier calls. Part of the Node (see node.py), split out so the
pipeline reads stage by stage.
"""

from __future__ import annotations

import asyncio
import logging

from crawler_node.frontier.frontier import FrontierBatch
from crawler_node.node.pipeline import REFILL_HOSTS
from crawler_node.node.hosts import HostState, Robots

log = logging.getLogger("crawler_node.node.node")

LEASE_AHEAD = 2  # a host's lease buffer is topped up below this many windows (limit) of URLs


class DispatchStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    async def _dispatch_loop(self) -> None:
        # The dispatcher never waits on the disk: leases come from per-host buffers that the
        # refill task keeps topped up in batched frontier calls.
        while not self._stopping:
            await self._global_slots.acquire()
            handed_off = False
            try:
                state = await self._next_host()
                if state is not None:
                    handed_off = self._dispatch(state)
            finally:
                if not handed_off:
                    self._global_slots.release()

    async def _next_host(self) -> HostState | None:
        while not self._stopping:
            now = self._clock()
            if now < self._hold_until:
                await asyncio.sleep(min(0.1, self._hold_until - now))
                continue
            blocked = self.admission.blocked(now)
            if blocked is not None:
                await self._wait_admission(blocked)
                continue
            # No await from here to the dispatch: what admission allowed still holds.
            state = self.scheduler.next_host(now)
            if state is not None:
                return state
            wake = self.scheduler.next_wakeup()
            timeout = 1.0 if wake is None else min(max(wake - now, 0.001), 1.0)
            self._work.clear()
            try:
                await asyncio.wait_for(self._work.wait(), timeout)
            except TimeoutError:
                pass
        return None

    def _dispatch(self, state: HostState) -> bool:
        """Start one request for the host; True when a task now owns the global slot."""
        now = self._clock()
        try:
            if not self.cluster.serves(state.host):
                self._release_host(state)
                return False
            if state.robots_state is Robots.UNKNOWN:
                state.robots_state = Robots.FETCHING
                permit = self.admission.acquire(state)
                self._start_task(self._fetch_robots(state, permit), f"robots:{state.host}")
                return True
            if not state.buffer:
                self._request_refill(state)
                return False
            lease = state.buffer.popleft()
            if state.robots is not None and not state.robots.allowed(lease.url):
                # Never fetched, so no crawl.log line: finished in the frontier with the next
                # refill round (a list bounded by the leases handed out, never a waiting task).
                self.counters["robots_disallowed"] += 1
                self._disallowed_now.append(lease.id)
                self._refill_event.set()
                return False
            permit = self.admission.acquire(state)
            state.next_eligible = now + state.crawl_delay
            self._start_task(self._fetch_page(state, lease, permit), f"fetch:{state.host}")
            if len(state.buffer) < LEASE_AHEAD * state.limiter.limit and state.queued > 0:
                self._request_refill(state)
            return True
        finally:
            self.scheduler.settle(state, now)

    def _release_host(self, state: HostState) -> None:
        """Stop crawling a host this node no longer owns: buffered leases go back (unattempted)
        and the cluster's sweep hands the host's queue to its owner."""
        if state.buffer:
            self._returned_now.extend(lease.id for lease in state.buffer)
            state.buffer.clear()
            self._refill_event.set()
        state.queued = 0

    def _membership_changed(self) -> None:
        now = self._clock()
        for state in self.scheduler:
            if not self.cluster.serves(state.host):
                self._release_host(state)
                self.scheduler.settle(state, now)
        self._resync_needed.set()
        self._work.set()

    async def _resync_loop(self) -> None:
        """Re-read per-host queue counts from the frontier. The scheduler's counts are
        estimates kept in step with what passes through it; rows can reappear behind its back
        (a host given back to this node after a member left, expired leases), and a host
        whose count says zero would never be looked at again."""
        while True:
            try:
                await asyncio.wait_for(self._resync_needed.wait(), timeout=5.0)
            except TimeoutError:
                pass
            self._resync_needed.clear()
            records = await self._frontier_thread.call(lambda: list(self.frontier.hosts_with_work()))
            now = self._clock()
            for record in records:
                if not self.cluster.serves(record.host):
                    continue
                state = self.scheduler.host(record.host)
                missing = record.queued - state.queued
                if missing > 0 and not state.refilling:
                    self.scheduler.add_work(record.host, missing, now)
                    self._work.set()

    def _request_refill(self, state: HostState) -> None:
        if not state.refilling and state.queued > 0:
            state.refilling = True
            self._refill_wanted[state.host] = state
            self._refill_event.set()
        elif not state.refilling:
            state.queued = 0  # nothing left: settle() will mark the host idle

    async def _refill_loop(self) -> None:
        """Lease URLs for many hosts in one frontier round trip."""
        while True:
            await self._refill_event.wait()
            self._refill_event.clear()
            if self._disallowed_now:
                disallowed, self._disallowed_now = self._disallowed_now, []
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(failed=disallowed))
            if self._returned_now:
                returned, self._returned_now = self._returned_now, []
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(returned=returned))
                self.cluster.request_sweep()
                self._resync_needed.set()
            await self._hold_leasing()
            wanted = list(self._refill_wanted.values())[:REFILL_HOSTS]
            for state in wanted:
                del self._refill_wanted[state.host]
            if not wanted:
                continue
            requests = [(state.host, self._lease_size(state)) for state in wanted]
            results = await self._frontier_thread.call(self.frontier.lease_many, requests)
            now = self._clock()
            for state, (leases, next_ready) in zip(wanted, results):
                state.refilling = False
                state.queued = max(0, state.queued - len(leases))
                state.buffer.extend(leases)
                if not leases:
                    if next_ready is not None:
                        self.scheduler.delay(state, next_ready, now)
                    elif not state.buffer:
                        state.queued = 0
                self.scheduler.refilled(state, now)
            if self._refill_wanted:
                self._refill_event.set()
            self._work.set()

    @staticmethod
    def _lease_size(state: HostState) -> int:
        if state.crawl_delay > 0:
            return 1 if not state.buffer else 0
        # Enough for the next rounds of the host's window, so its requests never wait for a
        # frontier round trip (which may queue behind a store commit); never more than a few
        # windows: a leased URL sitting in memory is a URL another node cannot take over.
        return max(1, 2 * LEASE_AHEAD * state.limiter.limit - len(state.buffer))

    def _start_task(self, coro, name: str) -> None:
        self.in_flight += 1
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._fetch_tasks.add(task)
        task.add_done_callback(self._fetch_task_done)

    def _fetch_task_done(self, task: asyncio.Task) -> None:
        self._fetch_tasks.discard(task)
        self.in_flight -= 1
        self._global_slots.release()
        self._work.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("fetch task %s failed", task.get_name(), exc_info=task.exception())
            self.fatal_error = task.exception()
            self.request_stop()

