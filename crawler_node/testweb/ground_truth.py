"""Ground truth: what testweb itself observed, so tests assert on the server's view.

Counters are plain attributes touched only from the event loop thread (no locks needed).
The in-flight counters are never reset: a reset must not forget requests still being served,
or the next peak would be wrong.

Times are testweb's own monotonic clock (seconds); every snapshot carries `clock`, the time it
was taken, so a test can relate them to "now". Besides the counters, each host keeps the last
`history_limit` requests it saw as `[started, status, path]` (status 0 while the request is
being served, or when the client went away before the response was written); a request is
appended when it starts, so the history is in start order.

The totals are kept as running counts, so a summary costs the same at 200,000 hosts as at 5.
`body_bytes` counts the response body bytes written to clients, as on the wire (the compressed
length of a gzip answer; nothing for HEAD or a 304; a dripped body as far as it got), and
`not_modified` the 304 answers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

DEFAULT_HISTORY = 64

# One entry of a host's history: [started (testweb clock), status (0 = unfinished), path].
HistoryEntry = list[Any]


@dataclass(slots=True)
class HostStats:
    """One synthetic host as the server saw it (robots.txt and rejected requests included)."""

    requests: int = 0
    in_flight: int = 0
    peak_concurrency: int = 0
    throttled: int = 0
    errors: int = 0
    not_modified: int = 0
    body_bytes: int = 0
    last_start: float | None = None
    min_gap_s: float | None = None
    # Made on the first request: most hosts of a huge web are never asked for theirs.
    history: list[HistoryEntry] | None = None
    refused: Counter[str] | None = None  # refusals served by kind (testweb.refusals.KINDS)

    def clear(self) -> None:
        self.requests = self.throttled = self.errors = self.not_modified = self.body_bytes = 0
        self.peak_concurrency = self.in_flight
        self.last_start = self.min_gap_s = None
        self.history = None
        self.refused = None

    def to_json(self, *, history_limit: int | None = None) -> dict[str, Any]:
        document: dict[str, Any] = {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "peak_concurrency": self.peak_concurrency,
            "throttled": self.throttled,
            "errors": self.errors,
            "not_modified": self.not_modified,
            "body_bytes": self.body_bytes,
            "min_gap_s": self.min_gap_s,
        }
        if self.refused:
            document["refused"] = dict(self.refused)
        if history_limit is not None:
            recent = (self.history or [])[-history_limit:] if history_limit else []
            document["history"] = [list(entry) for entry in recent]
        return document


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


@dataclass(slots=True)
class Totals:
    """Running sums over all hosts and URLs (what `?summary=1` returns)."""

    requests: int = 0  # requests that reached a host
    in_flight: int = 0
    hosts_requested: int = 0  # hosts with at least one request
    urls: int = 0  # distinct URLs requested (robots.txt included)
    robots_urls: int = 0  # of which /robots.txt: urls - robots_urls = distinct content URLs
    repeated_urls: int = 0  # distinct URLs requested more than once
    throttled: int = 0  # the hosts' own 429s
    errors: int = 0  # the hosts' synthetic 5xx
    not_modified: int = 0  # 304 answers to conditional requests
    body_bytes: int = 0  # response body bytes written, as on the wire
    peak_concurrency: int = 0  # the highest peak of any one host
    refused: int = 0  # refusals served instead of pages (testweb.refusals)

    def clear(self, in_flight: int, peak: int) -> None:
        self.requests = self.hosts_requested = self.urls = self.robots_urls = self.repeated_urls = 0
        self.throttled = self.errors = self.not_modified = self.body_bytes = self.refused = 0
        self.in_flight = in_flight
        self.peak_concurrency = peak

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "hosts_requested": self.hosts_requested,
            "urls": self.urls,
            "robots_urls": self.robots_urls,
            "repeated_urls": self.repeated_urls,
            "throttled": self.throttled,
            "errors": self.errors,
            "not_modified": self.not_modified,
            "body_bytes": self.body_bytes,
            "peak_concurrency": self.peak_concurrency,
            "refused": self.refused,
        }


@dataclass(slots=True)
class Visit:
    """One request being served: returned by `begin`, handed back to `end`."""

    host: str
    stats: HostStats
    entry: HistoryEntry | None


class GroundTruth:
    """Per-host and per-URL counters, per-host request history, totals and the API ledger."""

    def __init__(
        self,
        hosts: Iterable[str],
        *,
        quota: int | None = None,
        history_limit: int = DEFAULT_HISTORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if history_limit < 0:
            raise ValueError(f"history_limit must be >= 0, got {history_limit}")
        self.hosts: dict[str, HostStats] = {host: HostStats() for host in hosts}
        self.urls: Counter[str] = Counter()
        self.api = ApiStats(quota_left=quota)
        self.totals = Totals()
        self.misdirected = 0
        self.history_limit = history_limit
        self._clock = clock

    def now(self) -> float:
        """testweb's clock, as the history and snapshots read it."""
        return self._clock()

    def begin(self, host: str, url: str, path: str) -> Visit:
        """A request to a known host starts being handled; pair with `end(visit, status)`."""
        stats = self.hosts[host]
        totals = self.totals
        now = self._clock()
        if stats.last_start is not None:
            gap = now - stats.last_start
            if stats.min_gap_s is None or gap < stats.min_gap_s:
                stats.min_gap_s = gap
        stats.last_start = now
        if stats.requests == 0:
            totals.hosts_requested += 1
        stats.requests += 1
        totals.requests += 1
        stats.in_flight += 1
        totals.in_flight += 1
        if stats.in_flight > stats.peak_concurrency:
            stats.peak_concurrency = stats.in_flight
            totals.peak_concurrency = max(totals.peak_concurrency, stats.in_flight)
        seen = self.urls[url] = self.urls[url] + 1
        if seen == 1:
            totals.urls += 1
            totals.robots_urls += path == "/robots.txt"
        elif seen == 2:
            totals.repeated_urls += 1
        return Visit(host, stats, self._remember(stats, now, path))

    def _remember(self, stats: HostStats, now: float, path: str) -> HistoryEntry | None:
        limit = self.history_limit
        if not limit:
            return None
        if stats.history is None:
            stats.history = []
        history = stats.history
        entry: HistoryEntry = [now, 0, path]
        history.append(entry)
        if len(history) >= 2 * limit:  # trimmed in batches: amortised O(1) per request
            del history[:-limit]
        return entry

    def throttled(self, visit: Visit) -> None:
        """The host answered this request with its own 429."""
        visit.stats.throttled += 1
        self.totals.throttled += 1

    def errored(self, visit: Visit) -> None:
        """The host answered this request with a synthetic server error."""
        visit.stats.errors += 1
        self.totals.errors += 1

    def refused(self, visit: Visit, kind: str) -> None:
        """The host answered this request with a refusal of that kind instead of its page."""
        if visit.stats.refused is None:
            visit.stats.refused = Counter()
        visit.stats.refused[kind] += 1
        self.totals.refused += 1

    def not_modified(self, visit: Visit) -> None:
        """The host answered this conditional request with a 304."""
        visit.stats.not_modified += 1
        self.totals.not_modified += 1

    def end(self, visit: Visit, status: int = 0, *, body_bytes: int = 0) -> None:
        """The response was written (status), or the request ended without one (0);
        `body_bytes` of body reached the transport either way."""
        visit.stats.in_flight -= 1
        self.totals.in_flight -= 1
        visit.stats.body_bytes += body_bytes
        self.totals.body_bytes += body_bytes
        if visit.entry is not None:
            visit.entry[1] = status

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
        self.totals.clear(
            in_flight=sum(stats.in_flight for stats in self.hosts.values()),
            peak=max((stats.peak_concurrency for stats in self.hosts.values()), default=0),
        )
        self.misdirected = 0

    def snapshot(
        self,
        *,
        summary: bool = False,
        hosts: Collection[str] | None = None,
        history: bool = False,
    ) -> dict[str, Any]:
        """The ground truth as JSON. `summary`: totals only (O(1)); `hosts`: only these hosts and
        their URLs; `history`: each host's recent requests too."""
        document: dict[str, Any] = {
            "clock": self._clock(),
            "totals": self.totals.to_json(),
            "api": self.api.to_json(),
            "misdirected": self.misdirected,
        }
        if summary:
            return document
        history_limit = self.history_limit if history else None
        chosen: list[tuple[str, HostStats]]
        if hosts is None:
            chosen = list(self.hosts.items())
            urls = sorted(self.urls.items())
        else:
            chosen = [(host, self.hosts[host]) for host in hosts if host in self.hosts]
            prefixes = tuple(f"http://{host}/" for host, _ in chosen)
            urls = sorted(item for item in self.urls.items() if item[0].startswith(prefixes)) if prefixes else []
        document["hosts"] = {host: stats.to_json(history_limit=history_limit) for host, stats in chosen}
        document["urls"] = dict(urls)
        return document
