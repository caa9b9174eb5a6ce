"""One judgment per site (issue 47): a host's health state, a 0-100 score and the reasons behind
them, from what its answers said over a sliding window. Pure: the host table feeds each verdict
in with the time (node.host_state), status and metrics read :func:`judge_health`.

The states are the first that holds:

    refusing    paused for a refusal, challenges, captchas or soft blocks in the window, or
                mostly 401/403/login walls
    paused      the host sends nothing until a pause ends (Retry-After, 429 backoff)
    throttling  429/503 answers (or a Retry-After) above a small share
    failing     timeouts, 5xx, connection, DNS or TLS failures above a share
    slow        its latency rose well above its own baseline (core.signals.LatencyModel)
    healthy     none of these

The score starts at 100 and loses points for the refusal ratio, the 429/5xx ratio, the timeout
and failure ratio, latency rises and limit halvings in the window: a limit that keeps halving
while refusals climb is a site fighting the crawler, not a slow one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class HealthState(enum.StrEnum):
    HEALTHY = "healthy"
    SLOW = "slow"
    THROTTLING = "throttling"
    REFUSING = "refusing"
    FAILING = "failing"
    PAUSED = "paused"


class Signal(enum.IntEnum):
    """What one answer counts as in the window (an index into the bucket counts)."""

    ANSWER = 0  # every answer that reached the host
    THROTTLED = 1  # 429 / 503 / 509
    BLOCKED = 2  # challenge, captcha, soft block
    FORBIDDEN = 3  # login wall, plain 401/403
    TIMEOUT = 4
    FAILED = 5  # 5xx, connection, DNS, TLS
    LATENCY_RISE = 6
    HALVED = 7  # the limiter cut the host's limit


_SIGNALS = len(Signal)


@dataclass(slots=True)
class HealthWindow:
    """Counts per signal over the last ``window_s`` seconds, in ``buckets`` slices (a slice
    leaves the window whole: the window is ``window_s`` to ``window_s + window_s/buckets``)."""

    window_s: float = 300.0
    buckets: int = 10
    _slices: list[tuple[int, list[int]]] = field(default_factory=list)  # (slice number, counts)

    def add(self, now: float, *signals: Signal) -> None:
        number = int(now // (self.window_s / self.buckets))
        slices = self._slices
        if not slices or slices[-1][0] != number:
            slices.append((number, [0] * _SIGNALS))
            while slices and slices[0][0] <= number - self.buckets:
                del slices[0]
        counts = slices[-1][1]
        for signal in signals:
            counts[signal] += 1

    def counts(self, now: float) -> list[int]:
        oldest = int(now // (self.window_s / self.buckets)) - self.buckets
        total = [0] * _SIGNALS
        for number, counts in self._slices:
            if number > oldest:
                for index, count in enumerate(counts):
                    total[index] += count
        return total

    @property
    def empty(self) -> bool:
        return not self._slices


@dataclass(frozen=True, slots=True)
class Health:
    state: HealthState
    score: int  # 0 (fighting us / down) .. 100 (nothing wrong)
    reasons: tuple[str, ...]


HEALTHY = Health(HealthState.HEALTHY, 100, ())


def judge_health(counts: list[int], *, paused_for: str | None = None, last_refusal: str | None = None,
                 refusal_pause: bool = False) -> Health:
    """``counts``: :meth:`HealthWindow.counts`; ``paused_for``: why the host is paused now (None:
    it is not); ``refusal_pause``: the pause is for a refusal, so the host is ``refusing`` (the
    pause first among its reasons: what the operator must know is who fights us, not that a
    pause runs); ``last_refusal``: the evidence of its last refusal, for the reasons."""
    answers = counts[Signal.ANSWER]
    blocked, forbidden = counts[Signal.BLOCKED], counts[Signal.FORBIDDEN]
    throttled, timeouts, failed = counts[Signal.THROTTLED], counts[Signal.TIMEOUT], counts[Signal.FAILED]
    rises, halved = counts[Signal.LATENCY_RISE], counts[Signal.HALVED]

    def ratio(count: int) -> float:
        return count / answers if answers else 0.0

    refused_ratio = ratio(blocked + forbidden)
    penalty = 60 * min(1.0, 2 * ratio(blocked) + refused_ratio) + 40 * min(1.0, 2 * ratio(throttled))
    penalty += 40 * min(1.0, 2 * ratio(timeouts + failed)) + 20 * min(1.0, 4 * ratio(rises)) + min(20, 5 * halved)
    score = max(0, min(100, round(100 - penalty)))
    reasons = []
    if paused_for:
        reasons.append(f"paused: {paused_for}")
    if blocked:
        reasons.append(f"{blocked} challenge/captcha/soft-block answers of {answers}"
                       + (f" (last: {last_refusal})" if last_refusal else ""))
    if forbidden:
        reasons.append(f"{forbidden} login-wall/401/403 answers of {answers}")
    if throttled:
        reasons.append(f"{throttled} throttled (429/503) of {answers}")
    if timeouts or failed:
        reasons.append(f"{timeouts} timeouts and {failed} failures of {answers}")
    if rises:
        reasons.append(f"latency above its baseline {rises} times")
    if halved:
        reasons.append(f"limit halved {halved} times")
    if paused_for and not refusal_pause:
        state = HealthState.PAUSED
    elif refusal_pause or blocked or (forbidden >= 3 and refused_ratio >= 0.5):
        state = HealthState.REFUSING
    elif throttled >= 2 and ratio(throttled) >= 0.05:
        state = HealthState.THROTTLING
    elif timeouts + failed >= 3 and ratio(timeouts + failed) >= 0.2:
        state = HealthState.FAILING
    elif rises:
        state = HealthState.SLOW
    else:
        state = HealthState.HEALTHY
    return Health(state, score, tuple(reasons))
