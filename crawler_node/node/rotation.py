"""Which host sends next: the host table's round robin (node.hosts owns it, nobody else).

READY hosts wait in a deque, taken in turn; WAITING hosts in a heap on their next-eligible
time; hosts that become IDLE are noted, in order, for the host table's collector. Entries go
stale when a host moves on (its ``place`` says where it really is) and are skipped lazily,
which keeps every move O(1) or O(log n) without searching a queue.
"""

from __future__ import annotations

import heapq
from collections import deque

from crawler_node.node.host_state import HostState, Place
from crawler_node.runtime.wakeup import Wakeup


class Rotation:
    def __init__(self, *, work: Wakeup, went_idle: Wakeup | None = None) -> None:
        """``work`` is notified when a host may have become ready (or ready sooner);
        ``went_idle`` when a host ran out of work."""
        self._work = work
        self._went_idle = went_idle
        self._ready: deque[HostState] = deque()
        self._waiting: list[tuple[float, int, HostState]] = []  # heap; stale entries skipped
        self._seq = 0
        self.idle: deque[tuple[float, HostState]] = deque()  # (idle since, host), oldest first

    def next_host(self, now: float) -> HostState | None:
        while self._waiting and self._waiting[0][0] <= now:
            _, _, state = heapq.heappop(self._waiting)
            if state.place is Place.WAITING:
                self.settle(state, now)
        for _ in range(len(self._ready)):
            state = self._ready.popleft()
            if state.place is not Place.READY:
                continue  # stale entry
            if not state.has_work():
                self._to_idle(state, now)
                continue
            if state.next_eligible > now or not state.can_send():
                state.place = Place.IDLE  # it left the deque; settle re-places it
                self.settle(state, now)
                continue
            state.place = Place.BUSY
            return state
        return None

    def next_wakeup(self) -> float | None:
        while self._waiting and self._waiting[0][2].place is not Place.WAITING:
            heapq.heappop(self._waiting)
        return self._waiting[0][0] if self._waiting else None

    def settle(self, state: HostState, now: float) -> None:
        if not state.has_work():
            self._to_idle(state, now)
        elif state.next_eligible > now:
            state.place = Place.WAITING
            self._seq += 1
            heapq.heappush(self._waiting, (state.next_eligible, self._seq, state))
            self._work.notify()  # the dispatcher's wait may have to end sooner
        elif not state.can_send():
            # Each way out of BLOCKED ends with a release, a refill or a robots answer.
            state.place = Place.BLOCKED
        else:
            if state.place is not Place.READY:
                self._ready.append(state)
                self._work.notify()
            state.place = Place.READY

    def delay(self, state: HostState, until: float, now: float) -> None:
        """Push a host's next-eligible time out (Crawl-delay, Retry-After, backoff)."""
        if until > state.next_eligible:
            state.next_eligible = until
            if state.place is Place.READY or state.place is Place.BLOCKED:
                state.place = Place.IDLE  # drops out of the deque lazily, then re-placed
                self.settle(state, now)

    def _to_idle(self, state: HostState, now: float) -> None:
        if state.place is not Place.IDLE:
            state.place = Place.IDLE
            state.idle_since = now
            self.idle.append((now, state))
            if self._went_idle is not None:
                self._went_idle.notify()
