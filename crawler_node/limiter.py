"""Per-host AIMD concurrency limiter (pure: no clocks, no asyncio).

The window behaves like TCP congestion avoidance: each success adds ``increase / window``
(about +1 per round of successes), a throttle or timeout multiplies it by ``decrease``.
A round is identified by its *decrease epoch*: :meth:`AimdLimiter.acquire` hands out the
current epoch as a ticket, so responses to requests sent before the last decrease are
recognised as news about a window that no longer exists.
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    SUCCESS = "success"
    THROTTLED = "throttled"  # 429 / 503 with Retry-After / a challenge page
    TIMEOUT = "timeout"
    ERROR = "error"  # says nothing about the host's capacity (DNS, TLS, 404...)
    NEUTRAL = "neutral"  # cancelled, robots-denied after acquire, ...


_DECREASING = frozenset({Outcome.THROTTLED, Outcome.TIMEOUT})


class AimdLimiter:
    """How many requests one host may have in flight, adapted from its responses."""

    def __init__(
        self,
        *,
        start: int = 2,
        floor: int = 1,
        ceiling: int = 16,
        increase: float = 1.0,
        decrease: float = 0.5,
    ) -> None:
        if floor < 1:
            raise ValueError(f"floor must be >= 1, got {floor}")
        if not floor <= start <= ceiling:
            raise ValueError(f"need floor <= start <= ceiling, got {floor}, {start}, {ceiling}")
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease}")
        if increase <= 0:
            raise ValueError(f"increase must be > 0, got {increase}")
        self.floor = floor
        self.ceiling = ceiling
        self.increase = increase
        self.decrease = decrease
        self._window = float(start)
        self._in_flight = 0
        self._epoch = 0
        # Set when an acquire fills the window, cleared when the host goes idle. The window
        # grows only while it is being used (RFC 7661's idea): a host fetched one URL at a
        # time would otherwise climb to the ceiling untested, then get a ceiling-sized burst.
        self._window_filled = False
        self.increases = 0  # times the integer limit went up
        self.decreases = 0  # multiplicative decreases (at most one per round)

    @property
    def limit(self) -> int:
        return min(self.ceiling, max(self.floor, int(self._window)))

    @property
    def window(self) -> float:
        return self._window

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def has_capacity(self) -> bool:
        return self._in_flight < self.limit

    def acquire(self) -> int:
        """Take one slot; the returned ticket must be passed back to :meth:`release`."""
        if not self.has_capacity():
            raise RuntimeError(f"no capacity: {self._in_flight} in flight, limit {self.limit}")
        self._in_flight += 1
        if self._in_flight >= self.limit:
            self._window_filled = True
        return self._epoch

    def release(self, ticket: int, outcome: Outcome) -> None:
        """Return a slot and learn from how the request went."""
        if self._in_flight <= 0:
            raise RuntimeError("release() without a matching acquire()")
        self._in_flight -= 1
        current_round = ticket >= self._epoch
        if outcome is Outcome.SUCCESS and current_round:
            # A success from before the last decrease describes the old, larger window;
            # counting it would undo the decrease at once.
            self._grow()
        elif outcome in _DECREASING and current_round:
            # Older tickets were sent into the window we already cut: a burst of 429s from
            # one window halves it once, not once per 429.
            self._shrink()
        if self._in_flight == 0:
            self._window_filled = False

    def snapshot(self) -> dict[str, int | float]:
        return {
            "limit": self.limit,
            "in_flight": self._in_flight,
            "window": round(self._window, 3),
            "decreases": self.decreases,
            "increases": self.increases,
        }

    def _grow(self) -> None:
        if not self._window_filled or self._window >= self.ceiling:
            return
        before = self.limit
        self._window = min(float(self.ceiling), self._window + self.increase / self._window)
        if self.limit > before:
            self.increases += 1

    def _shrink(self) -> None:
        self._window = max(float(self.floor), self._window * self.decrease)
        self._epoch += 1
        self.decreases += 1

    def __repr__(self) -> str:
        return f"AimdLimiter(limit={self.limit}, in_flight={self._in_flight}, window={self._window:.2f})"
