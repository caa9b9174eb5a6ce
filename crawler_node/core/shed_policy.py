"""Load shedding (DESIGN.md rule 7): when work keeps exceeding capacity, defer deliberately.

Pure policy, no I/O: the node reports the frontier's queued and deferred counts with the
time, and :meth:`ShedPolicy.observe` answers what to do. The frontier does the moving:

- when the queue has stayed above ``high_water`` for ``after_s``, the lowest-priority URLs
  (discovered links, deepest first, newest first) are *deferred* until the queue is down to
  halfway between the marks (not just to the high mark, which the next few arrivals would
  cross again): kept on disk, in the
  seen-set, but not leased, so they cost no fetch while the node is behind. Seeds and
  submitted URLs are never deferred. While shedding is active, new URLs at or below the
  deferred priority are parked on arrival instead of growing the queue again;
- once the queue has drained to ``low_water`` shedding stops, and deferred URLs come back,
  highest priority first, in steps that refill the queue to halfway between the marks. The
  gap between the marks is the hysteresis that keeps the two from chasing each other.

Nothing is dropped: every deferred URL is crawled later, and each one is counted by reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler_node.core.stats import gauge

# Deferral reasons, as counted in status and metrics.
QUEUE_OVER_HIGH_WATER = "queue_over_high_water"  # was queued, moved aside
ARRIVED_WHILE_SHEDDING = "arrived_while_shedding"  # parked on arrival

RESTORE_STEP_MAX = 50_000  # URLs per restore step: one frontier transaction stays short
# URLs per deferral step, for the same reason: a step rewrites each row and three index entries.
# The queue of a node restarted with 10M URLs over the high-water mark was deferred in one
# statement of ~9M rows, and the frontier's thread answered nothing for minutes (no lease, no
# status). Over the cap, the next rounds (every second at most) go on to the middle of the marks.
DEFER_STEP_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ShedAction:
    active: bool  # new low-priority URLs are parked on arrival
    defer: int = 0  # defer this many of the lowest-priority queued URLs
    restore: int = 0  # bring back this many of the highest-priority deferred URLs


class ShedPolicy:
    def __init__(self, *, high_water: int, low_water: int, after_s: float) -> None:
        if high_water < 0:
            raise ValueError(f"high_water must be >= 0 (0 = never shed), got {high_water}")
        if high_water and not 0 <= low_water < high_water:
            raise ValueError(f"need 0 <= low_water < high_water, got {low_water}, {high_water}")
        if after_s < 0:
            raise ValueError(f"after_s must be >= 0, got {after_s}")
        self.high_water = high_water
        self.low_water = low_water
        self.after_s = after_s
        self.active = False
        self._over_since: float | None = None
        self._deferring = False  # the last deferral step was capped: the next goes on
        self.activations = 0

    @property
    def enabled(self) -> bool:
        return self.high_water > 0

    @property
    def midpoint(self) -> int:
        """Where both deferring and restoring leave the queue."""
        return (self.high_water + self.low_water) // 2

    def observe(self, *, queued: int, deferred: int, now: float) -> ShedAction:
        if not self.enabled:
            # Shedding was turned off (a restart with other settings): give everything back.
            return ShedAction(active=False, restore=min(deferred, RESTORE_STEP_MAX))
        if queued > self.high_water:
            if self._over_since is None:
                self._over_since = now
            if now - self._over_since >= self.after_s:
                if not self.active:
                    self.activations += 1
                self.active = self._deferring = True
        else:
            self._over_since = None
        if self._deferring:
            wanted = queued - self.midpoint
            self._deferring = wanted > DEFER_STEP_MAX
            if wanted > 0:
                return ShedAction(active=True, defer=min(wanted, DEFER_STEP_MAX))
        if queued > self.high_water:
            return ShedAction(active=self.active)
        if self.active and queued > self.low_water:
            return ShedAction(active=True)
        self.active = False
        if deferred and queued <= self.low_water:
            return ShedAction(active=False, restore=min(deferred, max(1, self.midpoint - queued), RESTORE_STEP_MAX))
        return ShedAction(active=False)

    def snapshot(self) -> ShedPolicySnapshot:
        return ShedPolicySnapshot(enabled=self.enabled, active=self.active, high_water=self.high_water,
                                  low_water=self.low_water, after_s=self.after_s, over_since=self._over_since,
                                  activations=self.activations)


@dataclass(frozen=True, slots=True)
class ShedPolicySnapshot:
    """The policy's part of the status's ``shedding``."""

    enabled: bool
    active: bool = field(metadata=gauge("crawler_shed_active", "1 while low-priority URLs are being deferred"))
    high_water: int = field(metadata=gauge("crawler_shed_high_water", "Queued URLs above which shedding starts"))
    low_water: int
    after_s: float
    over_since: float | None
    activations: int
