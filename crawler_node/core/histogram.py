"""A counting histogram: fixed upper bounds, one count per bucket, a sum and a count.

Hand-rolled rather than a prometheus_client ``Histogram`` because the stage that observes
must not own exposition objects (no globals, one registry per node, rendered at scrape time
from a snapshot): an observation here is one ``bisect`` and two additions, and the snapshot is
plain data that ``/v1/status`` and ``/metrics`` (HistogramMetricFamily) both read.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from crawler_node.core.stats import Indexed

# Web fetches: from a fast local answer to a slow-drip body near the fetch timeout.
FETCH_SECONDS_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Calls on the frontier's thread, waiting for it included: a lease of a few rows in a
# millisecond, a store batch in ~10, a WAL checkpoint in 100-300 at 10M URLs (bench/scale.py).
FRONTIER_SECONDS_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Response bodies as received: 1 KB .. 50 MB (the default body cap is below the last).
BODY_BYTES_BOUNDS = (1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000,
                     50_000_000)


@dataclass(frozen=True, slots=True)
class HistogramSnapshot(Indexed):
    """``buckets``: (upper bound, cumulative count) pairs, +Inf last (as ``None`` for JSON)."""

    buckets: tuple[tuple[float | None, int], ...]
    sum: float
    count: int


class CountingHistogram:
    """Invariants: ``bounds`` strictly increase; ``counts[i]`` is the number of observations
    ``v`` with ``bounds[i-1] < v <= bounds[i]`` (Prometheus' ``le``), and ``counts[-1]`` those
    above the last bound (+Inf); ``count == sum(counts)``."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        if not bounds:
            raise ValueError("a histogram needs at least one bound")
        if any(later <= earlier for earlier, later in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"bounds must strictly increase, got {list(bounds)}")
        self.bounds = tuple(float(bound) for bound in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le is <=).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        buckets: list[tuple[float | None, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, None), self.counts, strict=True):
            running += count
            buckets.append((bound, running))
        return HistogramSnapshot(buckets=tuple(buckets), sum=self.sum, count=self.count)


class HistogramJson(Protocol):
    """A histogram as /v1/status shows it (a status read back, or a ``HistogramSnapshot``)."""

    def __getitem__(self, key: str, /) -> Any: ...


def quantile_bound(snapshot: HistogramJson, q: float) -> float | None:
    """The upper bound of the bucket that holds the ``q`` quantile of a ``snapshot`` (at most
    that much), or None when it lies past the last bound (+Inf) or nothing was observed."""
    count = snapshot["count"]
    if not count:
        return None
    rank = q * count
    for bound, cumulative in snapshot["buckets"]:
        if cumulative >= rank:
            return bound
    return None
