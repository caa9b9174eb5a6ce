"""Global fetch admission: may the node start one more request at all? (DESIGN.md rule 5)

Each host's own limit lives with the host (node.hosts.HostTable). What is shared by many
hosts lives here, and each signal reaches only the gate it describes:

- own pipeline pressure: *pressure sources*, each a component that answers
  ``needs_backout()`` about itself (the parse stage's queue is full, the store is lagging,
  response bodies held in memory are over budget, a peer's outbox is full). While one of them
  says so no new fetch starts, and the node stops leasing, so the slow-down travels up to the
  frontier instead of piling up in memory. They notify the shared ``Wakeup`` when their answer
  may have changed, and the dispatcher waits on it instead of polling;
- a fetch-through API (``--proxy`` pointed at a paid scraping API): its 429s cut a global
  AIMD limiter on requests in flight through it, never a host's limit; its 509 (quota spent)
  pauses all fetching until the plan resets or an operator resumes it;
- per-IP gates for direct fetches (node.ip_gates): hosts that resolve to one address share
  its limit, and in a cluster each node takes its share of it (cluster.ipshare);
- an operator's pause (``crawler-node pause``, :class:`OperatorPause`): no new fetch starts
  and nothing is leased until it is resumed. Asked first, so nothing else can let one through.

A :class:`Permit` bundles the slots one request holds (host, API, IP), taken together when
the request is dispatched and released together when it ends; the host's slot is taken and
given back through the host table, the others here.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.signals import ApiSignal, Signal
from crawler_node.core.stats import Indexed, counter, gauge, stat
from crawler_node.node.ip_gates import NO_IP_GATES, IpGate, IpGates, IpSnapshot

__all__ = ["API_LIMIT", "API_QUOTA", "PAUSED", "AdmissionStats", "ApiGate", "FetchAdmission", "IpGate", "IpGates",
           "OperatorPause", "Permit", "PressureSource"]

log = logging.getLogger("crawler_node.admission")


class PressureSource(Protocol):
    """A stage that can say it is too full for new fetches. ``needs_backout()`` is asked on
    every dispatch: keep it cheap."""

    name: str

    def needs_backout(self) -> bool: ...

API_QUOTA = "api_quota"  # blocked reason: the API's quota is spent
API_LIMIT = "api_limit"  # blocked reason: the API limiter has no free slot
PAUSED = "paused"  # blocked reason: an operator paused the crawl


@dataclass(slots=True)
class OperatorPause:
    """The crawl paused by an operator: why, by whom, since when (wall clock)."""

    reason: str
    by: str
    since: float

    def snapshot(self, now: float) -> PauseSnapshot:
        return PauseSnapshot(paused=True, reason=self.reason, by=self.by, since=self.since,
                             paused_for_s=round(max(0.0, now - self.since), 3))


@dataclass(frozen=True, slots=True)
class PauseSnapshot:
    """An operator's pause: the status's ``pause`` (and ``admission.pause``)."""

    paused: bool
    reason: str | None = field(metadata=stat(when="paused"))
    by: str | None = field(metadata=stat(when="paused"))
    since: float | None = field(metadata=stat(when="paused"))
    paused_for_s: float | None = field(metadata=stat(when="paused"))


NOT_PAUSED = PauseSnapshot(paused=False, reason=None, by=None, since=None, paused_for_s=None)


class ApiGate:
    """The fetch-through API's own limits: a global AIMD window, and a pause when the quota is
    spent. Time is passed in (wall clock), so this stays testable without sleeping."""

    def __init__(self, *, limiter: AimdLimiter, quota_reset_s: float) -> None:
        self.limiter = limiter
        self.quota_reset_s = quota_reset_s
        self.paused_reason: str | None = None
        self.paused_at: float | None = None
        self.resume_at: float | None = None
        self.throttled = 0  # 429s from the API itself
        self.quota_hits = 0  # 509s
        self.pauses = 0
        self.resumes = 0

    def paused(self, now: float) -> bool:
        if self.paused_reason is not None and self.resume_at is not None and now >= self.resume_at:
            self.resume(now, by="reset time")
        return self.paused_reason is not None

    def release(self, ticket: int, signal: Signal, now: float) -> bool:
        """Return the request's API slot and learn from it; True when this answer paused the API."""
        if signal.api is ApiSignal.THROTTLED:
            self.throttled += 1
            outcome = Outcome.THROTTLED
        elif signal.api is ApiSignal.QUOTA:
            self.quota_hits += 1
            outcome = Outcome.NEUTRAL
        elif signal.error is None or signal.outcome is FetchOutcome.TOO_LARGE:
            outcome = Outcome.SUCCESS  # the API delivered the site's answer, whatever it was
        else:
            outcome = Outcome.NEUTRAL  # a timeout or connection error: the site's news, or nobody's
        self.limiter.release(ticket, outcome)
        if signal.api is ApiSignal.QUOTA and self.paused_reason is None:
            self.pause(now, reason="quota", resume_in_s=signal.retry_after_s or self.quota_reset_s)
            return True
        return False

    def pause(self, now: float, *, reason: str, resume_in_s: float) -> None:
        self.paused_reason = reason
        self.paused_at = now
        self.resume_at = now + resume_in_s
        self.pauses += 1
        log.warning("fetch-through API: %s exhausted; fetching paused for %.0f s "
                    "(until the reset time, or POST /v1/resume)", reason, resume_in_s)

    def resume(self, now: float, *, by: str) -> bool:
        if self.paused_reason is None:
            return False
        log.warning("fetch-through API: fetching resumed (%s) after %.1f s paused for %s",
                    by, now - (self.paused_at or now), self.paused_reason)
        self.paused_reason = self.paused_at = self.resume_at = None
        self.resumes += 1
        return True

    def snapshot(self, now: float) -> ApiSnapshot:
        limiter = self.limiter
        return ApiSnapshot(
            enabled=True, paused=self.paused(now), reason=self.paused_reason, resume_at=self.resume_at,
            resume_in_s=None if self.resume_at is None else round(max(0.0, self.resume_at - now), 3),
            limit=limiter.limit, in_flight=limiter.in_flight, throttle_point=limiter.throttle_point,
            decreases=limiter.decreases, throttled=self.throttled, quota_hits=self.quota_hits, pauses=self.pauses,
            resumes=self.resumes)


@dataclass(frozen=True, slots=True)
class ApiSnapshot(Indexed):
    """The fetch-through API's gate (the status's ``api``); with no API only ``enabled`` and
    ``paused`` are shown."""

    enabled: bool = field(metadata=gauge("crawler_api_enabled", "1 when fetching through a proxy/API"))
    paused: bool = field(metadata=gauge("crawler_api_paused", "1 while the API's quota is exhausted"))
    reason: str | None = field(metadata=stat(when="enabled"))
    resume_at: float | None = field(metadata=stat(when="enabled"))
    resume_in_s: float | None = field(metadata=gauge("crawler_api_resume_in_seconds",
                                                     "Time until a paused API resumes by itself", when="enabled",
                                                     none=0.0))
    limit: int = field(metadata=gauge("crawler_api_limit", "The API limiter's current concurrency limit",
                                      when="enabled"))
    in_flight: int = field(metadata=gauge("crawler_api_in_flight", "Requests in flight through the API",
                                          when="enabled"))
    throttle_point: int | None = field(metadata=stat(when="enabled"))
    decreases: int = field(metadata=counter("crawler_api_limit_decreases", "Cuts of the API limiter", when="enabled"))
    throttled: int = field(metadata=counter("crawler_api_throttled", "429s from the API itself", when="enabled"))
    quota_hits: int = field(metadata=counter("crawler_api_quota_exhausted", "509s (quota spent) from the API",
                                             when="enabled"))
    pauses: int = field(metadata=counter("crawler_api_pauses", "Times fetching was paused for the quota",
                                         when="enabled"))
    resumes: int = field(metadata=stat(when="enabled"))


NO_API = ApiSnapshot(enabled=False, paused=False, reason=None, resume_at=None, resume_in_s=None, limit=0, in_flight=0,
                     throttle_point=None, decreases=0, throttled=0, quota_hits=0, pauses=0, resumes=0)


@dataclass(slots=True)
class Permit:
    """The slots one request holds until it ends."""

    host_ticket: int
    api_ticket: int | None = None
    ip_gate: IpGate[Any] | None = None


@dataclass(slots=True)
class AdmissionStats:
    rejections: Counter[str] = field(default_factory=Counter)  # waits for admission, by reason
    blocked_s: dict[str, float] = field(default_factory=dict)  # seconds spent refusing, by reason


class FetchAdmission:
    def __init__(self, *, api: ApiGate | None, ip_gates: IpGates | None,
                 pressure: Sequence[PressureSource] = ()) -> None:
        names = [source.name for source in pressure]
        if len(set(names)) != len(names):
            raise ValueError(f"pressure sources need distinct names, got {names}")
        self.api = api
        self.ip_gates = ip_gates
        self._sources = tuple(pressure)
        self.stats = AdmissionStats()
        self.operator_pause: OperatorPause | None = None

    def pause(self, pause: OperatorPause) -> bool:
        """Start no new fetch until :meth:`resume`; False if it was paused already (the first
        pause's reason stays)."""
        if self.operator_pause is not None:
            return False
        self.operator_pause = pause
        return True

    def resume(self) -> OperatorPause | None:
        """End the operator's pause; returns it (None: it was not paused)."""
        pause, self.operator_pause = self.operator_pause, None
        return pause

    def pressure(self) -> str | None:
        """The first pipeline stage that is too full, if any."""
        for source in self._sources:
            if source.needs_backout():
                return source.name
        return None

    def blocked(self, now: float) -> str | None:
        """Why no new fetch may start now (None: it may)."""
        if self.operator_pause is not None:
            return PAUSED
        api = self.api
        if api is not None and api.paused(now):
            return API_QUOTA
        for source in self._sources:
            if source.needs_backout():
                return source.name
        if api is not None and not api.limiter.has_capacity():
            return API_LIMIT
        return None

    def hold_leasing(self, now: float) -> str | None:
        """Why the frontier should not hand out more leases now: pressure or a paused API,
        not a momentarily full API window (that frees up within one response time)."""
        if self.operator_pause is not None:
            return PAUSED
        if self.api is not None and self.api.paused(now):
            return API_QUOTA
        return self.pressure()

    def resume_at(self) -> float | None:
        """When a quota pause ends by itself (None: no pause, or none with a time)."""
        return self.api.resume_at if self.api is not None else None

    def acquire(self, host_ticket: int, ip_gate: IpGate[Any] | None) -> Permit:
        """Take the global slots for one request whose host slot is ``host_ticket`` and whose
        host is behind ``ip_gate``; call only right after ``blocked()`` said None (no await in
        between)."""
        permit = Permit(host_ticket=host_ticket)
        if self.api is not None:
            permit.api_ticket = self.api.limiter.acquire()
        gate = ip_gate
        if gate is not None:
            gate.acquire()
            permit.ip_gate = gate
        return permit

    def release(self, permit: Permit, signal: Signal | None, now: float) -> tuple[set[Any], bool]:
        """Return a request's global slots. Returns (hosts that waited for its IP gate, whether
        the API has just been paused by this answer)."""
        paused = False
        if permit.api_ticket is not None and self.api is not None:
            if signal is None:
                self.api.limiter.release(permit.api_ticket, Outcome.NEUTRAL)
            else:
                paused = self.api.release(permit.api_ticket, signal, now)
            permit.api_ticket = None
        woken: set[Any] = set()
        if permit.ip_gate is not None:
            woken = permit.ip_gate.release()
            permit.ip_gate = None
        return woken, paused

    def snapshot(self, now: float) -> AdmissionSnapshot:
        reason = self.blocked(now)
        sources = tuple(sorted(source.name for source in self._sources))
        return AdmissionSnapshot(
            gate=AdmissionGate(
                open=reason is None, blocked_by=reason,
                pause=self.operator_pause.snapshot(now) if self.operator_pause is not None else NOT_PAUSED,
                pressure_sources=sources, rejections=dict(self.stats.rejections),
                blocked_s={name: round(seconds, 3) for name, seconds in self.stats.blocked_s.items()}),
            api=self.api.snapshot(now) if self.api is not None else NO_API,
            ip=self.ip_gates.snapshot() if self.ip_gates is not None else NO_IP_GATES)


@dataclass(frozen=True, slots=True)
class AdmissionGate:
    """Whether a new fetch may start, and what held them back (rule 5): the status's ``admission``."""

    open: bool = field(metadata=gauge("crawler_admission_open", "1 while new fetches may start"))
    blocked_by: str | None
    pause: PauseSnapshot
    pressure_sources: tuple[str, ...]
    # Every pressure source has its series from the start (at 0), so rate() has one to read.
    rejections: Mapping[str, int] = field(metadata=counter(
        "crawler_admission_rejections", "Times a fetch was ready but admission refused it, by reason (stage)",
        labels=("reason",), zeros_from="pressure_sources"))
    blocked_s: Mapping[str, float] = field(metadata=counter(
        "crawler_admission_blocked_seconds", "Time new fetches were held back, by reason (stage)",
        labels=("reason",), zeros_from="pressure_sources"))


@dataclass(frozen=True, slots=True)
class AdmissionSnapshot:
    gate: AdmissionGate
    api: ApiSnapshot
    ip: IpSnapshot
