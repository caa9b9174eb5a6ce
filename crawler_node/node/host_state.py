"""One host's state, as the host table keeps it (node.hosts): its queue estimate and lease
buffer, its politeness times, its robots.txt, its limiter, and its counters.

Only the host table writes these fields; everyone else reads them, or asks the table.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crawler_node.core.backoff import NO_BACKOFF, BackoffState
from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.refusals import Refusal, SoftBlockHistory
from crawler_node.core.robots import AuthorityRobots, RobotsStatus
from crawler_node.core.signals import LatencyLevel
from crawler_node.core.site_health import HEALTHY, Health, HealthState, HealthWindow, judge_health
from crawler_node.core.site_health import Signal as HealthSignal
from crawler_node.core.verdict import Pause, RetryAction, Verdict
from crawler_node.frontier import HostPoliteness, Lease
from crawler_node.node.host_snapshot import AuthorityRobotsSnapshot, HostSnapshot

if TYPE_CHECKING:
    from crawler_node.node.admission import IpGate


# URLs whose refusals a host remembers (their per-URL budget); past it a URL's count starts at 0.
_REFUSED_URLS_KEPT = 4096


_FAILED = {FetchOutcome.THROTTLED: HealthSignal.THROTTLED, FetchOutcome.TIMEOUT: HealthSignal.TIMEOUT,
           FetchOutcome.SERVER_ERROR: HealthSignal.FAILED, FetchOutcome.CONNECTION: HealthSignal.FAILED,
           FetchOutcome.DNS: HealthSignal.FAILED, FetchOutcome.TLS: HealthSignal.FAILED}


class Place(enum.Enum):
    IDLE = "idle"
    READY = "ready"
    WAITING = "waiting"
    BLOCKED = "blocked"
    BUSY = "busy"


class Step(enum.Enum):
    """What the dispatcher does with a host the table offered (:meth:`HostTable.next_step`)."""

    ROBOTS = "robots"  # fetch the robots.txt of this lease's authority first (the lease stays buffered)
    FETCH = "fetch"  # fetch this lease
    DISALLOWED = "disallowed"  # robots.txt forbids this lease: finish it unfetched
    UNAVAILABLE = "unavailable"  # its authority's robots.txt could not be had: finish it unfetched
    DROPPED = "dropped"  # an operator dropped the host: finish the lease unfetched
    REFILL = "refill"  # nothing leased for it yet: a lease request is on its way (or none is left)


@dataclass(slots=True, eq=False)
class HostState:
    host: str
    limiter: AimdLimiter
    queued: int = 0  # URLs the frontier holds for the host (an estimate, corrected on every lease)
    buffer: list[Lease] = field(default_factory=list)  # leased, not yet dispatched, in lease order
    next_eligible: float = 0.0
    dropped: bool = False  # by an operator (HostTable.drop): its leases end unfetched
    crawl_delay: float = 0.0
    # robots.txt per scheme ("http", "https"): the host key carries the port, so a scheme and
    # this host make one authority (RFC 9309 2.3). None until the first lease asks.
    robots: dict[str, AuthorityRobots] | None = None
    robots_fetching: bool = False  # a robots.txt request of this host is on its way
    refilling: bool = False  # a lease request for this host is on its way to the frontier
    place: Place = Place.IDLE
    idle_since: float = 0.0  # when it last became IDLE (the collector's clock)
    active_since: float = 0.0  # when it last got work after having none (its turn: node.host_memory)
    turn_over: bool = False  # its turn is over: it sends nothing more, and leaves memory once quiet
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
    # Refusals (core.refusals): the pause lives in paused_until, durable with the politeness
    refusal_backoff: BackoffState = NO_BACKOFF  # challenge/captcha/soft-block incidents not yet forgiven
    soft_block: SoftBlockHistory | None = None  # made on the host's first small page
    refused_urls: dict[str, int] | None = None  # URL -> refusals it met here (bounded)
    last_refusal: Refusal | None = None
    refusals: int = 0  # answers that were a refusal of any kind
    refusal_pauses: int = 0  # new pauses for a challenge, captcha or soft block
    health_window: HealthWindow | None = None  # what its answers said lately (core.site_health)

    def url_refusals(self, url: str) -> int:
        return self.refused_urls.get(url, 0) if self.refused_urls else 0

    def learn(self, verdict: Verdict, url: str | None = None) -> bool:
        """Count a page's verdict and take its backoff and pause; True when what is kept on
        disk of the host (its politeness) changed. The next-eligible time is the table's."""
        if not verdict.reached_host:
            self.api_refused += 1
            return False
        self.fetched += 1
        if verdict.signal.host is Outcome.THROTTLED:
            self.throttled += 1
        elif not verdict.signal.outcome.success:
            self.errors += 1
        if verdict.retry is RetryAction.RETRY:
            self.retries += 1
        if verdict.latency_rise:
            self.latency_rises += 1
        self.latency = verdict.latency
        self.throttle_streak = verdict.throttle_streak
        durable = False
        if verdict.refusal is not None:
            self._learn_refusal(verdict, url)
        if verdict.backoff is not self.backoff:
            self.backoff = verdict.backoff
            durable = True
        if verdict.pause is not Pause.NONE:
            if verdict.pause is Pause.BACKOFF:
                self.backoffs += 1
            self.paused_until = max(self.paused_until, verdict.next_eligible)
            durable = True
        return durable

    def _learn_refusal(self, verdict: Verdict, url: str | None) -> None:
        refusal = verdict.refusal
        assert refusal is not None
        self.refusals += 1
        self.last_refusal = refusal
        if verdict.refusal_backoff is not None:
            self.refusal_backoff = verdict.refusal_backoff
        if verdict.refusal_incident:
            self.refusal_pauses += 1
        if not refusal.kind.pauses or url is None:
            return
        if self.refused_urls is None:
            self.refused_urls = {}
        if verdict.retry is RetryAction.GIVE_UP:
            self.refused_urls.pop(url, None)
        elif url in self.refused_urls or len(self.refused_urls) < _REFUSED_URLS_KEPT:
            self.refused_urls[url] = self.refused_urls.get(url, 0) + 1

    def observe_health(self, verdict: Verdict, now: float, *, halved: bool) -> None:
        """Count one answer in the host's health window."""
        if not verdict.reached_host:
            return
        if self.health_window is None:
            self.health_window = HealthWindow()
        signals = [HealthSignal.ANSWER]
        outcome = verdict.signal.outcome
        if verdict.refusal is not None:
            signals.append(HealthSignal.BLOCKED if verdict.refusal.kind.pauses else HealthSignal.FORBIDDEN)
        elif outcome in _FAILED:
            signals.append(_FAILED[outcome])
        if verdict.latency_rise:
            signals.append(HealthSignal.LATENCY_RISE)
        if halved:
            signals.append(HealthSignal.HALVED)
        self.health_window.add(now, *signals)

    def health(self, now: float) -> Health:
        """The host's one judgment now (``now``: the clock its pauses are kept in)."""
        paused_for, refusal_pause = None, False
        if now < self.paused_until:
            refusal = self.last_refusal
            if refusal is not None and self.refusal_backoff.eligible_at >= self.paused_until:
                paused_for = f"{refusal.kind} for {self.paused_until - now:.0f} s more ({refusal.evidence})"
                refusal_pause = True
            else:
                paused_for = f"throttled (Retry-After or 429 backoff) for {self.paused_until - now:.0f} s more"
        if self.health_window is None and paused_for is None:
            return HEALTHY
        counts = self.health_window.counts(now) if self.health_window is not None else [0] * len(HealthSignal)
        return judge_health(counts, paused_for=paused_for, refusal_pause=refusal_pause,
                            last_refusal=self.last_refusal.evidence if self.last_refusal else None)

    def has_work(self) -> bool:
        return self.queued > 0 or bool(self.buffer)

    def can_send(self) -> bool:
        if self.turn_over:
            return False
        # A Crawl-delay means one request at a time, spaced by the delay.
        if self.crawl_delay > 0 and self.limiter.in_flight > 0:
            return False
        if self.robots_fetching or (self.refilling and not self.buffer):
            return False
        # The IP gate last: a host it turns away is parked on it, and woken by its next release.
        return self.limiter.has_capacity() and (self.ip_gate is None or self.ip_gate.admits(self))

    def politeness(self) -> HostPoliteness:
        return HostPoliteness(host=self.host, next_eligible=self.paused_until, crawl_delay=self.crawl_delay,
                              backoff_level=self.backoff.level, last_throttle=self.backoff.last_throttle)

    def snapshot(self, now: float = 0.0) -> HostSnapshot:
        limiter, health = self.limiter, self.health(now)
        return HostSnapshot(
            host=self.host, in_flight=limiter.in_flight, limit=limiter.limit, limit_decreases=limiter.decreases,
            queued=self.queued + len(self.buffer), fetched=self.fetched, throttled=self.throttled, errors=self.errors,
            retries=self.retries, retry_ratio=round(self.retries / self.fetched, 4) if self.fetched else 0.0,
            crawl_delay_s=self.crawl_delay, throttle_point=limiter.throttle_point,
            latency_baseline_ms=round(self.latency.baseline_s * 1000, 1) if self.latency else None,
            latency_rises=self.latency_rises, backoffs=self.backoffs, backoff_level=self.backoff.level,
            api_refused=self.api_refused, ip=self.ip_gate.address if self.ip_gate else None, place=self.place.value,
            next_eligible=self.next_eligible,
            robots={scheme: robots_snapshot(robots) for scheme, robots in self.robots.items()} if self.robots else {},
            held=self.held_reason(), health=health.state.value, health_score=health.score,
            health_reasons=health.reasons, refusals=self.refusals, refusal_pauses=self.refusal_pauses)

    def held_reason(self) -> str | None:
        """Why the host's URLs wait or end unfetched, when robots.txt is the reason (DNS and TLS
        failures of robots.txt show up here too: they are why it could not be had)."""
        if not self.robots:
            return None
        for scheme, robots in self.robots.items():
            if robots.status is RobotsStatus.UNAVAILABLE:
                return f"{scheme} robots.txt unavailable ({robots.last_error}): URLs end as robots_unavailable"
            if robots.failures and robots.status is not RobotsStatus.READY:
                return f"{scheme} robots.txt unavailable ({robots.last_error}), attempt {robots.failures}: waiting"
        return None


def tally(states: Iterable[HostState], now: float,
          worst: int = 10) -> tuple[dict[str, int], dict[str, int], tuple[HostSnapshot, ...]]:
    """Hosts by scheduling place and by health state (every state named, for steady series),
    and the ``worst`` unhealthy hosts, lowest score first."""
    places: dict[str, int] = {}
    health = dict.fromkeys(HealthState, 0)
    unhealthy: list[tuple[int, str, HostState]] = []
    for state in states:
        places[state.place.value] = places.get(state.place.value, 0) + 1
        judged = state.health(now) if state.health_window is not None or state.paused_until > now else HEALTHY
        health[judged.state] += 1
        if judged.state is not HealthState.HEALTHY:
            unhealthy.append((judged.score, state.host, state))
    lowest = heapq.nsmallest(worst, unhealthy, key=lambda item: item[:2])
    return (places, {str(name): count for name, count in health.items()},
            tuple(state.snapshot(now) for _, _, state in lowest))


def robots_snapshot(robots: AuthorityRobots) -> AuthorityRobotsSnapshot:
    return AuthorityRobotsSnapshot(status=robots.status.value, failures=robots.failures, error=robots.last_error,
                                   crawl_delay_s=robots.crawl_delay, since=robots.since)
