"""Which host fetches next: the in-memory, O(hosts) half of the frontier.

The durable frontier (SQLite) holds the URLs; this module holds one small record per host and
decides, without I/O, which host may send its next request: it has work, its politeness time
has come, and its adaptive limiter has a free slot. Hosts rotate round-robin, so a slow host
waits on its own limiter and never blocks the others (rule 3: no head-of-line blocking).
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crawler_node.core.limiter import AimdLimiter


class Place(enum.Enum):
    IDLE = "idle"  # no known work
    READY = "ready"  # in the round-robin deque
    WAITING = "waiting"  # has work, politeness or backoff time not yet reached
    BLOCKED = "blocked"  # has work, limiter full: woken by a release
    BUSY = "busy"  # taken by the dispatcher (leasing, robots fetch); it settles it after


class Robots(enum.Enum):
    UNKNOWN = "unknown"
    FETCHING = "fetching"
    READY = "ready"


@dataclass(slots=True, eq=False)
class HostState:
    host: str
    limiter: AimdLimiter
    queued: int = 0  # URLs the frontier holds for the host (corrected on every lease)
    buffer: deque = field(default_factory=deque)  # leased, not yet dispatched
    next_eligible: float = 0.0
    crawl_delay: float = 0.0
    robots: Any = None  # a parsed robots.txt (protego) or None meaning "allow all"
    robots_state: Robots = Robots.UNKNOWN
    refilling: bool = False  # a lease request for this host is on its way to the frontier
    place: Place = Place.IDLE
    ip_gate: Any = None  # admission.IpGate shared with hosts on the same address (direct fetches)
    backoff: Any = None  # backoff.HostBackoff, made at the first 429 without Retry-After
    throttle_streak: int = 0  # limit cuts from 429s without Retry-After, no success between
    latency: Any = None  # signals.LatencyBaseline of this host's response times
    # counters for status and metrics
    fetched: int = 0
    throttled: int = 0
    errors: int = 0
    retries: int = 0
    backoffs: int = 0  # host-level pauses for 429s without Retry-After
    latency_rises: int = 0  # limit cuts for latency far above the host's baseline
    api_refused: int = 0  # attempts the fetch-through API refused (never reached the host)

    def has_work(self) -> bool:
        return self.queued > 0 or bool(self.buffer)

    def can_send(self) -> bool:
        # A Crawl-delay means one request at a time, spaced by the delay.
        if self.crawl_delay > 0 and self.limiter.in_flight > 0:
            return False
        if self.robots_state is Robots.FETCHING or (self.refilling and not self.buffer):
            return False
        # The IP gate last: a host it turns away is parked on it, and woken by its next release.
        return self.limiter.has_capacity() and (self.ip_gate is None or self.ip_gate.admits(self))


class HostScheduler:
    def __init__(self, limiter_factory: Callable[[], AimdLimiter]) -> None:
        self._limiter_factory = limiter_factory
        self._hosts: dict[str, HostState] = {}
        self._ready: deque[HostState] = deque()
        self._waiting: list[tuple[float, int, HostState]] = []  # heap; stale entries skipped
        self._seq = 0

    def __len__(self) -> int:
        return len(self._hosts)

    def __iter__(self) -> Iterator[HostState]:
        return iter(self._hosts.values())

    def get(self, host: str) -> HostState | None:
        return self._hosts.get(host)

    def host(self, host: str) -> HostState:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = HostState(host=host, limiter=self._limiter_factory())
        return state

    def add_work(self, host: str, count: int, now: float) -> HostState:
        state = self.host(host)
        state.queued += count
        if state.place in (Place.IDLE, Place.BLOCKED):
            self.settle(state, now)
        return state

    def next_host(self, now: float) -> HostState | None:
        """Take the next host that may fetch now; the caller must ``settle`` it afterwards."""
        while self._waiting and self._waiting[0][0] <= now:
            _, _, state = heapq.heappop(self._waiting)
            if state.place is Place.WAITING:
                self.settle(state, now)
        for _ in range(len(self._ready)):
            state = self._ready.popleft()
            if state.place is not Place.READY:
                continue  # stale entry
            if not state.has_work():
                state.place = Place.IDLE
                continue
            if state.next_eligible > now or not state.can_send():
                state.place = Place.IDLE  # it left the deque; settle re-places it
                self.settle(state, now)
                continue
            state.place = Place.BUSY
            return state
        return None

    def settle(self, state: HostState, now: float) -> None:
        """Put a host where its current state says it belongs."""
        if not state.has_work():
            state.place = Place.IDLE
        elif state.next_eligible > now:
            state.place = Place.WAITING
            self._seq += 1
            heapq.heappush(self._waiting, (state.next_eligible, self._seq, state))
        elif not state.can_send():
            # Both end with a request of this host finishing, which calls on_release.
            state.place = Place.BLOCKED
        else:
            if state.place is not Place.READY:
                self._ready.append(state)
            state.place = Place.READY

    def on_release(self, state: HostState, now: float) -> None:
        """A request of this host finished: a blocked host may go again."""
        if state.place is Place.BLOCKED:
            self.settle(state, now)

    def refilled(self, state: HostState, now: float) -> None:
        """A lease request came back: a host parked for it may go again."""
        if state.place in (Place.BLOCKED, Place.IDLE):
            self.settle(state, now)

    def delay(self, state: HostState, until: float, now: float) -> None:
        """Push a host's next-eligible time out (Retry-After, host backoff)."""
        if until > state.next_eligible:
            state.next_eligible = until
            if state.place in (Place.READY, Place.BLOCKED):
                state.place = Place.IDLE  # drop it from the deque lazily, then re-place
                self.settle(state, now)

    def next_wakeup(self) -> float | None:
        while self._waiting and self._waiting[0][2].place is not Place.WAITING:
            heapq.heappop(self._waiting)
        return self._waiting[0][0] if self._waiting else None

    def queued_total(self) -> int:
        return sum(s.queued + len(s.buffer) for s in self._hosts.values())

    def busiest(self, n: int) -> list[HostState]:
        return heapq.nlargest(n, self._hosts.values(), key=lambda s: (s.limiter.in_flight, s.queued))
