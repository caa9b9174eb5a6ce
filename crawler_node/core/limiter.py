"""AIMD concurrency limiter (pure: no clocks, no asyncio), per host and for a fetch-through API.

The window behaves like TCP congestion avoidance: each success adds ``increase / window``
(about +1 per round of successes), a throttle or timeout multiplies it by ``decrease``.
A round is identified by its *decrease epoch*: :meth:`AimdLimiter.acquire` hands out a
generation number as a ticket, so responses to requests sent before the last decrease are
recognised as news about a window that no longer exists.

Plain AIMD sawtooths around the server's tolerance: it climbs until it is throttled, halves,
and climbs into the same wall again, so a host that tolerates 4 sees a 429 every few rounds.
So the limiter remembers the limit at which it was last throttled (the *throttle point*, much
like CUBIC's W_max). After a decrease it climbs back quickly (+1 per success) to the
*plateau* just below that point, stays there, and probes the point again only after
``probe_rounds`` clean rounds; each probe that is throttled again doubles that wait (up to
``max_probe_rounds``), and a clean round at the point means the host's capacity grew, so the
point is forgotten and plain AIMD resumes. Halving on a throttle is unchanged.
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

    # One per host in memory: slots keep it at a fifth of the size of an instance dict.
    __slots__ = ("floor", "ceiling", "increase", "decrease", "probe_rounds", "max_probe_rounds", "_window", "_limit",
                 "_in_flight", "_generation", "_epoch", "_probe_generation", "_window_filled", "_throttle_point",
                 "_rounds_before_probe", "_clean", "increases", "decreases")

    def __init__(
        self,
        *,
        start: int = 2,
        floor: int = 1,
        ceiling: int = 16,
        increase: float = 1.0,
        decrease: float = 0.5,
        probe_rounds: int = 8,
        max_probe_rounds: int = 256,
    ) -> None:
        if floor < 1:
            raise ValueError(f"floor must be >= 1, got {floor}")
        if not floor <= start <= ceiling:
            raise ValueError(f"need floor <= start <= ceiling, got {floor}, {start}, {ceiling}")
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease}")
        if increase <= 0:
            raise ValueError(f"increase must be > 0, got {increase}")
        if not 1 <= probe_rounds <= max_probe_rounds:
            raise ValueError(f"need 1 <= probe_rounds <= max_probe_rounds, got {probe_rounds}, {max_probe_rounds}")
        self.floor = floor
        self.ceiling = ceiling
        self.increase = increase
        self.decrease = decrease
        self.probe_rounds = probe_rounds
        self.max_probe_rounds = max_probe_rounds
        self._set_window(float(start))
        self._in_flight = 0
        # Tickets are generation numbers. A new generation starts at every decrease (the
        # epoch: older tickets describe a window that no longer exists) and at every probe
        # (only requests sent into the probed window may prove it clean).
        self._generation = 0
        self._epoch = 0
        self._probe_generation = 0
        # Set when an acquire fills the window, cleared when the host goes idle. The window
        # grows only while it is being used (RFC 7661's idea): a host fetched one URL at a
        # time would otherwise climb to the ceiling untested, then get a ceiling-sized burst.
        self._window_filled = False
        self._throttle_point: int | None = None  # the limit at which we were last throttled
        self._rounds_before_probe = probe_rounds
        self._clean = 0  # successes of the current epoch at (or probing above) the plateau
        self.increases = 0  # times the integer limit went up
        self.decreases = 0  # multiplicative decreases (at most one per round)

    @property
    def limit(self) -> int:
        return self._limit

    def _set_window(self, window: float) -> None:
        # The limit is read several times per request (scheduling, acquire, lease sizing)
        # and changes only here: kept, not recomputed on every read.
        self._window = window
        self._limit = min(self.ceiling, max(self.floor, int(window)))

    @property
    def window(self) -> float:
        return self._window

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def throttle_point(self) -> int | None:
        """The limit at which the other side last pushed back, while it is remembered."""
        return self._throttle_point

    @property
    def plateau(self) -> int | None:
        """Where the window settles below the throttle point (None: no point remembered)."""
        if self._throttle_point is None:
            return None
        return min(self.ceiling, max(self.floor, self._throttle_point - 1))

    def is_current(self, ticket: int) -> bool:
        """The request holding ``ticket`` was sent into the current window: a throttle or a
        timeout reported for it (release) cuts the limit; an older one is already accounted for."""
        return ticket >= self._epoch

    def has_capacity(self) -> bool:
        return self._in_flight < self.limit

    def acquire(self) -> int:
        """Take one slot; the returned ticket must be passed back to :meth:`release`."""
        if not self.has_capacity():
            raise RuntimeError(f"no capacity: {self._in_flight} in flight, limit {self.limit}")
        self._in_flight += 1
        if self._in_flight >= self.limit:
            self._window_filled = True
        return self._generation

    def release(self, ticket: int, outcome: Outcome) -> None:
        """Return a slot and learn from how the request went."""
        if self._in_flight <= 0:
            raise RuntimeError("release() without a matching acquire()")
        self._in_flight -= 1
        current_round = ticket >= self._epoch
        if outcome is Outcome.SUCCESS and current_round:
            # A success from before the last decrease describes the old, larger window;
            # counting it would undo the decrease at once.
            self._grow(ticket)
        elif outcome in _DECREASING and current_round:
            # Older tickets were sent into the window we already cut: a burst of 429s from
            # one window halves it once, not once per 429.
            self._shrink()
        if self._in_flight == 0:
            self._window_filled = False

    def snapshot(self) -> dict[str, int | float | None]:
        return {
            "limit": self.limit,
            "in_flight": self._in_flight,
            "window": round(self._window, 3),
            "decreases": self.decreases,
            "increases": self.increases,
            "throttle_point": self._throttle_point,
        }

    def _grow(self, ticket: int) -> None:
        if not self._window_filled or self._window >= self.ceiling:
            return
        before = self.limit
        plateau = self.plateau
        if plateau is None:
            self._set_window(min(float(self.ceiling), self._window + self.increase / self._window))
        elif self._window < plateau:
            # The plateau was fine until the last probe: come back to it quickly.
            self._set_window(min(float(plateau), self._window + self.increase))
        elif self.limit <= plateau:
            self._clean += 1
            if self._clean >= self._rounds_before_probe * plateau and plateau < self.ceiling:
                self._set_window(float(plateau + 1))  # probe the throttle point again
                self._clean = 0
                self._generation += 1
                self._probe_generation = self._generation
        elif ticket >= self._probe_generation:
            self._clean += 1
            if self._clean >= self.limit:
                # A whole clean round at the old throttle point: the capacity has grown.
                self._throttle_point = None
                self._rounds_before_probe = self.probe_rounds
                self._clean = 0
        if self.limit > before:
            self.increases += 1

    def _shrink(self) -> None:
        limit = self.limit
        if limit == self._throttle_point:
            # Throttled at the same point again: it is real, so probe it less often.
            self._rounds_before_probe = min(self.max_probe_rounds, 2 * self._rounds_before_probe)
        else:
            self._throttle_point = limit
            self._rounds_before_probe = self.probe_rounds
        self._clean = 0
        self._set_window(max(float(self.floor), self._window * self.decrease))
        self._generation += 1
        self._epoch = self._generation
        self.decreases += 1

    def __repr__(self) -> str:
        return f"AimdLimiter(limit={self.limit}, in_flight={self._in_flight}, window={self._window:.2f})"
