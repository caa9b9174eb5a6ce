"""What a fetch result means, and to which limiter the news goes (DESIGN.md rule 5).

Pure: a FetchResult in, a Signal out. ``host`` goes to that host's AIMD limiter and
next-eligible time, ``api`` to the fetch-through API's limiter, never both.
:class:`LatencyModel` adds the one signal a single response cannot carry: a host whose
responses have become much slower than its own normal.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from crawler_node.core.backoff import parse_retry_after
from crawler_node.core.limiter import Outcome
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.response import FetchResult


class ApiSignal(enum.Enum):
    NONE = "none"
    THROTTLED = "throttled"  # the proxy/API says: too many concurrent requests through me
    QUOTA = "quota"  # the API plan is spent: stop fetching through it until reset


@dataclass(frozen=True, slots=True)
class Signal:
    outcome: FetchOutcome  # the crawl.log outcome
    host: Outcome  # what the host's limiter learns
    api: ApiSignal = ApiSignal.NONE
    retry_after_s: float | None = None
    error: ErrorKind | None = None  # the error kind the retry policy looks at

    @property
    def success(self) -> bool:
        return self.outcome.success


# The answers to most requests, made once (a Signal is immutable).
_OK = Signal(FetchOutcome.OK, Outcome.SUCCESS)
_REDIRECT = Signal(FetchOutcome.REDIRECT, Outcome.SUCCESS)
_NOT_MODIFIED = Signal(FetchOutcome.NOT_MODIFIED, Outcome.SUCCESS)
_OUTCOME_OF_ERROR = {
    ErrorKind.CONNECTION: FetchOutcome.CONNECTION,
    ErrorKind.PROXY: FetchOutcome.PROXY,
    ErrorKind.NOT_ALLOWED: FetchOutcome.NOT_ALLOWED,
    # Neither says anything about the server's capacity (Outcome.ERROR): a name that does not
    # resolve, a certificate that does not verify.
    ErrorKind.TLS: FetchOutcome.TLS,
    ErrorKind.DNS: FetchOutcome.DNS,
}


def classify(
    result: FetchResult, *, now: float, api_limit_header: str = "X-Api-Limit", through_api: bool = True
) -> Signal:
    """``through_api``: the request went through a proxy/API, so a 509 or a 429 naming the
    API limit is the API's. Fetching directly there is no API, and those are the site's."""
    error = result.error
    if error is not None:
        if error == ErrorKind.TIMEOUT:
            return Signal(FetchOutcome.TIMEOUT, Outcome.TIMEOUT, error=ErrorKind.TIMEOUT)
        if error == ErrorKind.TOO_LARGE:
            return Signal(FetchOutcome.TOO_LARGE, Outcome.SUCCESS, error=ErrorKind.TOO_LARGE)
        kind = ErrorKind(error)
        return Signal(_OUTCOME_OF_ERROR[kind], Outcome.ERROR, error=kind)
    status = result.status or 0
    if 200 <= status < 400:  # most answers: their Retry-After or API header means nothing
        return _OK if status < 300 else _NOT_MODIFIED if status == 304 else _REDIRECT
    retry_after = parse_retry_after(result.header("Retry-After"), now=now) if result.status else None
    api_header = result.header(api_limit_header)
    if through_api and api_header is not None and status in (429, 509):
        # The API's own limit, not the site's: the host limiter must not be cut for it.
        if status == 509 or api_header.strip().lower() == "quota":
            return Signal(FetchOutcome.API_QUOTA, Outcome.NEUTRAL, ApiSignal.QUOTA, retry_after)
        return Signal(FetchOutcome.API_THROTTLED, Outcome.NEUTRAL, ApiSignal.THROTTLED, retry_after)
    if through_api and status == 509:
        return Signal(FetchOutcome.API_QUOTA, Outcome.NEUTRAL, ApiSignal.QUOTA, retry_after)
    if status in (429, 503, 509):  # 509 here: a site's own "bandwidth limit exceeded"
        return Signal(FetchOutcome.THROTTLED, Outcome.THROTTLED, retry_after_s=retry_after)
    if status >= 500:
        return Signal(FetchOutcome.SERVER_ERROR, Outcome.ERROR, retry_after_s=retry_after)
    if status == 408:
        return Signal(FetchOutcome.HTTP_ERROR, Outcome.TIMEOUT)
    return Signal(FetchOutcome.HTTP_ERROR, Outcome.NEUTRAL)


class LatencyLevel(NamedTuple):
    """One host's latency as :class:`LatencyModel` has learnt it (a value: the model
    returns a new one per response, so the verdict that uses it stays a pure function)."""

    samples: int
    baseline_s: float
    recent_s: float


class LatencyModel:
    """Whether a host's recent responses rose far above its own normal response time.

    Two exponentially weighted averages of the time to the response headers (the body's size
    says nothing about the server's load): a slow one, the baseline, and a fast one, the
    recent level. A rise is reported when the recent level is both ``factor`` times the
    baseline and ``min_rise_s`` above it, so neither a fast host's jitter nor one slow
    answer from a slow host counts. The baseline keeps learning, also during a rise: a host
    that got slower for good stops being cut once its new latency has become its normal.
    """

    __slots__ = ("factor", "min_rise_s", "warmup", "slow_alpha", "fast_alpha")

    def __init__(
        self,
        *,
        factor: float = 3.0,
        min_rise_s: float = 0.5,
        warmup: int = 8,
        slow_alpha: float = 0.05,
        fast_alpha: float = 0.3,
    ) -> None:
        if factor <= 1:
            raise ValueError(f"factor must be > 1, got {factor}")
        if min_rise_s < 0 or warmup < 1:
            raise ValueError(f"need min_rise_s >= 0 and warmup >= 1, got {min_rise_s}, {warmup}")
        if not (0 < slow_alpha < fast_alpha <= 1):
            raise ValueError(f"need 0 < slow_alpha < fast_alpha <= 1, got {slow_alpha}, {fast_alpha}")
        self.factor = factor
        self.min_rise_s = min_rise_s
        self.warmup = warmup
        self.slow_alpha = slow_alpha
        self.fast_alpha = fast_alpha

    def observe(self, level: LatencyLevel | None, latency_s: float) -> tuple[LatencyLevel, bool]:
        """Learn one response's latency: the host's new level, and True when its latency has
        risen well above normal."""
        latency_s = max(0.0, latency_s)
        samples = 1 if level is None else level.samples + 1
        baseline = 0.0 if level is None else level.baseline_s
        if samples <= self.warmup:
            # A plain mean first, so one odd early response does not set the baseline.
            baseline += (latency_s - baseline) / samples
            return LatencyLevel(samples, baseline, baseline), False
        assert level is not None
        recent = level.recent_s + self.fast_alpha * (latency_s - level.recent_s)
        rising = recent > self.factor * baseline and recent - baseline > self.min_rise_s
        return LatencyLevel(samples, baseline + self.slow_alpha * (latency_s - baseline), recent), rising
