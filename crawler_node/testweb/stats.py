"""Ground truth: what testweb itself observed, so tests assert on the server's view.

Counters are plain attributes touched only from the event loop thread (no locks needed).
The in-flight counters are never reset: a reset must not forget requests still being served,
or the next peak would be wrong.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class HostStats:
    """One synthetic host as the server saw it (robots.txt and rejected requests included)."""

    requests: int = 0
    in_flight: int = 0
    peak_concurrency: int = 0
    throttled: int = 0
    errors: int = 0
    last_start: float | None = None
    min_gap_s: float | None = None

    def clear(self) -> None:
        self.requests = self.throttled = self.errors = 0
        self.peak_concurrency = self.in_flight
        self.last_start = self.min_gap_s = None

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_concurrency": self.peak_concurrency,
            "throttled": self.throttled,
            "errors": self.errors,
            "min_gap_s": self.min_gap_s,
        }


@dataclass(slots=True)
class ApiStats:
    """The pretend paid-API layer in front of all hosts. quota_left None = unlimited."""

    in_flight: int = 0
    peak_concurrency: int = 0
    requests: int = 0
    throttled: int = 0
    quota_rejected: int = 0
    quota_left: int | None = None

    def clear(self) -> None:
        self.requests = self.throttled = self.quota_rejected = 0
        self.peak_concurrency = self.in_flight

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_concurrency": self.peak_concurrency,
            "throttled": self.throttled,
            "quota_rejected": self.quota_rejected,
            "quota_left": self.quota_left,
        }


class GroundTruth:
    """Per-host and per-URL counters plus the API ledger."""

    def __init__(
        self,
        hosts: Iterable[str],
        *,
        quota: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hosts: dict[str, HostStats] = {host: HostStats() for host in hosts}
        self.urls: Counter[str] = Counter()
        self.api = ApiStats(quota_left=quota)
        self.misdirected = 0
        self._clock = clock

    def begin(self, host: str, url: str) -> HostStats:
        """A request to a known host starts being handled; pair with `end(host)`."""
        stats = self.hosts[host]
        now = self._clock()
        if stats.last_start is not None:
            gap = now - stats.last_start
            if stats.min_gap_s is None or gap < stats.min_gap_s:
                stats.min_gap_s = gap
        stats.last_start = now
        stats.requests += 1
        stats.in_flight += 1
        if stats.in_flight > stats.peak_concurrency:
            stats.peak_concurrency = stats.in_flight
        self.urls[url] += 1
        return stats

    def end(self, host: str) -> None:
        self.hosts[host].in_flight -= 1

    def api_admit(self, concurrency: int | None) -> str | None:
        """Admit a request through the API layer, or say why not: 'concurrency' or 'quota'.
        An admitted request takes one unit of quota and must be paired with `api_end()`."""
        api = self.api
        if concurrency is not None and api.in_flight >= concurrency:
            api.throttled += 1
            return "concurrency"
        if api.quota_left is not None:
            if api.quota_left <= 0:
                api.quota_rejected += 1
                return "quota"
            api.quota_left -= 1
        api.requests += 1
        api.in_flight += 1
        if api.in_flight > api.peak_concurrency:
            api.peak_concurrency = api.in_flight
        return None

    def api_end(self) -> None:
        self.api.in_flight -= 1

    def set_quota(self, quota: int | None) -> None:
        self.api.quota_left = quota

    def reset(self) -> None:
        for stats in self.hosts.values():
            stats.clear()
        self.api.clear()
        self.urls.clear()
        self.misdirected = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "hosts": {host: stats.to_json() for host, stats in self.hosts.items()},
            "urls": dict(sorted(self.urls.items())),
            "api": self.api.to_json(),
            "misdirected": self.misdirected,
        }
