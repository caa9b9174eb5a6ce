"""One host's state, as the host table keeps it (node.hosts): its queue estimate and lease
buffer, its politeness times, its robots.txt, its limiter, and its counters.

Only the host table writes these fields; everyone else reads them, or asks the table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawler_node.core.backoff import NO_BACKOFF, BackoffState
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.robots import RobotsRules
from crawler_node.core.signals import LatencyLevel
from crawler_node.frontier import HostPoliteness, Lease

if TYPE_CHECKING:
    from crawler_node.node.admission import IpGate


class Place(enum.Enum):
    IDLE = "idle"
    READY = "ready"
    WAITING = "waiting"
    BLOCKED = "blocked"
    BUSY = "busy"


class Robots(enum.Enum):
    UNKNOWN = "unknown"
    FETCHING = "fetching"
    READY = "ready"


class Step(enum.Enum):
    """What the dispatcher does with a host the table offered (:meth:`HostTable.next_step`)."""

    ROBOTS = "robots"  # fetch its robots.txt first
    FETCH = "fetch"  # fetch this lease
    DISALLOWED = "disallowed"  # robots.txt forbids this lease: finish it unfetched
    REFILL = "refill"  # nothing leased for it yet: a lease request is on its way (or none is left)


@dataclass(slots=True, eq=False)
class HostState:
    host: str
    limiter: AimdLimiter
    queued: int = 0  # URLs the frontier holds for the host (an estimate, corrected on every lease)
    buffer: list[Lease] = field(default_factory=list)  # leased, not yet dispatched, in lease order
    next_eligible: float = 0.0
    crawl_delay: float = 0.0
    robots: RobotsRules | None = None  # None: no restrictions
    robots_state: Robots = Robots.UNKNOWN
    refilling: bool = False  # a lease request for this host is on its way to the frontier
    place: Place = Place.IDLE
    idle_since: float = 0.0  # when it last became IDLE (the collector's clock)
    ip_gate: IpGate[HostState] | None = None  # shared with the hosts on the same address (direct fetches)
    backoff: BackoffState = NO_BACKOFF  # for 429s without Retry-After
    throttle_streak: int = 0  # limit cuts from 429s without Retry-After, no success between
    latency: LatencyLevel | None = None
    paused_until: float = 0.0  # Retry-After or backoff: durable, unlike Crawl-delay spacing
    dirty: bool = False  # its durable politeness changed and is not saved yet
    # counters for status and metrics
    fetched: int = 0  # requests that reached the host
    throttled: int = 0
    errors: int = 0
    retries: int = 0
    backoffs: int = 0
    latency_rises: int = 0
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

    def politeness(self) -> HostPoliteness:
        return HostPoliteness(host=self.host, next_eligible=self.paused_until, crawl_delay=self.crawl_delay,
                              backoff_level=self.backoff.level, last_throttle=self.backoff.last_throttle)

    def snapshot(self) -> dict:
        limiter = self.limiter
        return {
            "host": self.host,
            "in_flight": limiter.in_flight,
            "limit": limiter.limit,
            "limit_decreases": limiter.decreases,
            "queued": self.queued + len(self.buffer),
            "fetched": self.fetched,
            "throttled": self.throttled,
            "errors": self.errors,
            "retries": self.retries,
            "retry_ratio": round(self.retries / self.fetched, 4) if self.fetched else 0.0,
            "crawl_delay_s": self.crawl_delay,
            "throttle_point": limiter.throttle_point,
            "latency_baseline_ms": round(self.latency.baseline_s * 1000, 1) if self.latency else None,
            "latency_rises": self.latency_rises,
            "backoffs": self.backoffs,
            "backoff_level": self.backoff.level,
            "api_refused": self.api_refused,
            "ip": self.ip_gate.address if self.ip_gate else None,
            "place": self.place.value,
            "next_eligible": self.next_eligible,
        }
