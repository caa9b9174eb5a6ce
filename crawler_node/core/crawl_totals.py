"""The crawl's durable, cumulative totals: what crawl.log says, counted.

crawl.log is the crawl's record (one line per fetch attempt, one per URL ended without one),
and it survives a kill and a restart; these totals are its counts, so they survive too and
never go backwards: a node rebuilds them from its crawl.log files at start (store.crawl_totals)
and adds each batch it writes after. The counters the stages keep (``counters.fetched``...)
count since the process started; these count since the data directory's first line.

Pure: counting only. ``CrawlTotals`` is the running tally; ``TotalsSnapshot`` the frozen value
the status shows (``totals``) and a stats.json adds up over the members (``merge_json``).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.stats import counter

# The outcomes of URLs the crawler refused to fetch (a setting or robots.txt said no): the
# "refusals" of a summary. A crawl whose every line is one of these fetched nothing on purpose.
REFUSALS = frozenset({
    FetchOutcome.NOT_ALLOWED, FetchOutcome.ROBOTS_DISALLOWED, FetchOutcome.ROBOTS_UNAVAILABLE,
    FetchOutcome.OUT_OF_SCOPE, FetchOutcome.REPEATED_SEGMENTS, FetchOutcome.PATH_TOO_DEEP,
    FetchOutcome.TOO_MANY_QUERY_PARAMS, FetchOutcome.DENIED_URL, FetchOutcome.HOST_PAGE_CAP,
    FetchOutcome.CALENDAR_TRAP, FetchOutcome.HOST_DROPPED})
# Outcomes of lines that are no request at all (never fetched): the rest are attempts.
_UNFETCHED = frozenset(REFUSALS - {FetchOutcome.NOT_ALLOWED})
ROBOTS_OUTCOMES = frozenset({FetchOutcome.ROBOTS_DISALLOWED, FetchOutcome.ROBOTS_UNAVAILABLE})
HOSTS_TRACKED = 50_000  # hosts with their own timings and refusals; past it, counted in hosts_untracked
TOP = 10  # the slowest and the most refused hosts a summary names
_REASON_CHARS = 200  # of a refusal's reason kept per outcome


@dataclass(slots=True)
class _Host:
    attempts: int = 0
    elapsed_ms: float = 0.0
    refused: int = 0


@dataclass(frozen=True, slots=True)
class HostTiming:
    host: str
    attempts: int
    mean_ms: float


@dataclass(frozen=True, slots=True)
class HostRefusals:
    host: str
    refused: int


@dataclass(frozen=True, slots=True)
class TotalsSnapshot:
    """The status's ``totals``: counts of every crawl.log line this data directory holds."""

    lines: int = field(metadata=counter("crawler_crawl_log_lines", "crawl.log lines written, since the data "
                                        "directory's first (durable: rebuilt from crawl.log at start)"))
    attempts: int  # lines that are a request sent (or tried): not the URLs ended unfetched
    pages: int  # attempts answered 200 ok (pages, robots.txt and sitemaps)
    answered: int  # attempts of pages and sitemaps (not robots.txt) that got an HTTP answer, any status
    bytes: int  # body bytes received, as crawl.log's "bytes" adds up
    retries: int  # attempts past a URL's first (attempt > 1)
    robots_fetches: int  # robots.txt requests
    robots_refused: int  # URLs robots.txt forbade, or whose robots.txt could not be had
    refused: int  # lines whose outcome is a refusal (REFUSALS)
    outcomes: Mapping[str, int]
    status_codes: Mapping[str, int]
    kinds: Mapping[str, int]
    refusal_reasons: Mapping[str, str]  # one reason per refusing outcome (crawl.log's error, or the outcome)
    slowest_hosts: tuple[HostTiming, ...]
    most_refused_hosts: tuple[HostRefusals, ...]
    hosts_untracked: int  # hosts past HOSTS_TRACKED: in the counts, not in the per-host lists
    first_at: str | None  # fetched_at of the earliest and the latest line (ISO 8601 UTC)
    last_at: str | None


class CrawlTotals:
    """The running tally of crawl.log lines, fed the lines' fields (``add``) or parsed lines
    (``add_line``). Per-host entries are bounded by ``hosts_tracked``."""

    def __init__(self, *, hosts_tracked: int = HOSTS_TRACKED) -> None:
        self._hosts_tracked = hosts_tracked
        self.lines = self.attempts = self.pages = self.answered = self.bytes = self.retries = 0
        self.robots_fetches = self.robots_refused = self.refused = 0
        self.outcomes: Counter[str] = Counter()
        self.status_codes: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.reasons: dict[str, str] = {}
        self.hosts: dict[str, _Host] = {}
        self.hosts_untracked = 0
        self._untracked: set[str] = set()  # bounded as hosts is: only their count is shown
        self.first_at: str | None = None
        self.last_at: str | None = None

    def add(self, *, host: str, outcome: str, status: int | None, size: int, attempt: int, kind: str,
            elapsed_ms: float, fetched_at: str | None, error: str | None) -> None:
        """One crawl.log line's fields."""
        self.lines += 1
        self.outcomes[outcome] += 1
        self.kinds[kind] += 1
        self.bytes += size
        if status is not None:
            self.status_codes[str(status)] += 1
        if fetched_at is not None:
            if self.first_at is None or fetched_at < self.first_at:
                self.first_at = fetched_at
            if self.last_at is None or fetched_at > self.last_at:
                self.last_at = fetched_at
        refused = outcome in REFUSALS
        attempted = outcome not in _UNFETCHED
        if refused:
            self.refused += 1
            if outcome not in self.reasons:
                self.reasons[outcome] = (error or outcome)[:_REASON_CHARS]
        if outcome in ROBOTS_OUTCOMES:
            self.robots_refused += 1
        if attempted:
            self.attempts += 1
            if attempt > 1:
                self.retries += 1
            if kind == "robots":
                self.robots_fetches += 1
            elif status is not None:
                self.answered += 1
            if outcome == FetchOutcome.OK:
                self.pages += 1
        entry = self.hosts.get(host)
        if entry is None:
            if len(self.hosts) >= self._hosts_tracked:
                if len(self._untracked) < self._hosts_tracked and host not in self._untracked:
                    self._untracked.add(host)
                    self.hosts_untracked += 1
                return
            entry = self.hosts[host] = _Host()
        if attempted:
            entry.attempts += 1
            entry.elapsed_ms += elapsed_ms
        if refused:
            entry.refused += 1

    def add_line(self, line: Mapping[str, Any]) -> None:
        """One parsed crawl.log line (a JSON object as store.crawl_log writes it)."""
        status = line.get("status")
        self.add(host=str(line.get("host") or ""), outcome=str(line.get("outcome") or ""),
                 status=status if isinstance(status, int) else None, size=int(line.get("bytes") or 0),
                 attempt=int(line.get("attempt") or 0), kind=str(line.get("kind") or "page"),
                 elapsed_ms=float(line.get("elapsed_ms") or 0.0), fetched_at=line.get("fetched_at"),
                 error=line.get("error"))

    # -- a tally kept on disk (store.crawl_totals keeps one per rotated crawl.log file) ---------

    def state(self) -> dict[str, Any]:
        """The tally as JSON values, for ``from_state``."""
        return {**{name: getattr(self, name) for name in _SCALAR_STATE},
                "outcomes": dict(self.outcomes), "status_codes": dict(self.status_codes), "kinds": dict(self.kinds),
                "reasons": dict(self.reasons),
                "hosts": {host: [e.attempts, e.elapsed_ms, e.refused] for host, e in self.hosts.items()}}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, hosts_tracked: int = HOSTS_TRACKED) -> CrawlTotals:
        """A tally from ``state()``'s values. ValueError (or KeyError, TypeError) when they are not."""
        totals = cls(hosts_tracked=hosts_tracked)
        for name in _SCALAR_STATE:
            value = state[name]
            if name in ("first_at", "last_at"):
                setattr(totals, name, None if value is None else str(value))
            else:
                setattr(totals, name, int(value))
        for name in ("outcomes", "status_codes", "kinds"):
            getattr(totals, name).update({str(key): int(count) for key, count in state[name].items()})
        totals.reasons = {str(key): str(reason) for key, reason in state["reasons"].items()}
        totals.hosts = {str(host): _Host(int(a), float(ms), int(r)) for host, (a, ms, r) in state["hosts"].items()}
        return totals

    def absorb(self, other: CrawlTotals) -> None:
        """Add ``other``'s counts to these (the lines of another file). A host past the bound is
        counted in ``hosts_untracked`` once per tally it comes from: at least the hosts left out."""
        for name in _SUMMED_STATE:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.outcomes.update(other.outcomes)
        self.status_codes.update(other.status_codes)
        self.kinds.update(other.kinds)
        for outcome, reason in other.reasons.items():
            self.reasons.setdefault(outcome, reason)
        for when in (other.first_at, other.last_at):
            if when is not None:
                self.first_at = when if self.first_at is None or when < self.first_at else self.first_at
                self.last_at = when if self.last_at is None or when > self.last_at else self.last_at
        for host, entry in other.hosts.items():
            mine = self.hosts.get(host)
            if mine is None:
                if len(self.hosts) >= self._hosts_tracked:
                    self.hosts_untracked += 1
                    continue
                mine = self.hosts[host] = _Host()
            mine.attempts += entry.attempts
            mine.elapsed_ms += entry.elapsed_ms
            mine.refused += entry.refused

    def snapshot(self, *, top: int = TOP) -> TotalsSnapshot:
        # the top few of many hosts: a heap, not a sort (the status is built often)
        timed = heapq.nsmallest(top, ((host, entry) for host, entry in self.hosts.items() if entry.attempts),
                                key=lambda item: (-item[1].elapsed_ms / item[1].attempts, item[0]))
        refusing = heapq.nsmallest(top, ((host, entry.refused) for host, entry in self.hosts.items()
                                         if entry.refused), key=lambda item: (-item[1], item[0]))
        return TotalsSnapshot(
            lines=self.lines, attempts=self.attempts, pages=self.pages, answered=self.answered, bytes=self.bytes,
            retries=self.retries,
            robots_fetches=self.robots_fetches, robots_refused=self.robots_refused, refused=self.refused,
            outcomes=dict(self.outcomes), status_codes=dict(self.status_codes), kinds=dict(self.kinds),
            refusal_reasons=dict(self.reasons),
            slowest_hosts=tuple(HostTiming(host, entry.attempts, round(entry.elapsed_ms / entry.attempts, 1))
                                for host, entry in timed[:top]),
            most_refused_hosts=tuple(HostRefusals(host, refused) for host, refused in refusing[:top]),
            hosts_untracked=self.hosts_untracked, first_at=self.first_at, last_at=self.last_at)


_SUMMED_STATE = ("lines", "attempts", "pages", "answered", "bytes", "retries", "robots_fetches", "robots_refused",
                 "refused", "hosts_untracked")
_SCALAR_STATE = (*_SUMMED_STATE, "first_at", "last_at")
_SUMMED = _SUMMED_STATE
_COUNTED = ("outcomes", "status_codes", "kinds")


def merge_json(parts: Iterable[Mapping[str, Any]], *, top: int = TOP) -> dict[str, Any]:
    """The members' ``totals`` (their status JSON) added up: one crawl's. Hosts live on one
    member each (the ring), so the per-host lists merge by rank, not by host."""
    merged: dict[str, Any] = {name: 0 for name in _SUMMED}
    counted: dict[str, Counter[str]] = {name: Counter() for name in _COUNTED}
    reasons: dict[str, str] = {}
    slowest: list[dict[str, Any]] = []
    refusing: list[dict[str, Any]] = []
    firsts: list[str] = []
    lasts: list[str] = []
    for part in parts:
        for name in _SUMMED:
            merged[name] += int(part.get(name) or 0)
        for name in _COUNTED:
            counted[name].update({str(key): int(value) for key, value in (part.get(name) or {}).items()})
        for outcome, reason in (part.get("refusal_reasons") or {}).items():
            reasons.setdefault(str(outcome), str(reason))
        slowest.extend(part.get("slowest_hosts") or ())
        refusing.extend(part.get("most_refused_hosts") or ())
        if part.get("first_at"):
            firsts.append(part["first_at"])
        if part.get("last_at"):
            lasts.append(part["last_at"])
    for name in _COUNTED:
        merged[name] = dict(sorted(counted[name].items()))
    merged["refusal_reasons"] = reasons
    merged["slowest_hosts"] = sorted(slowest, key=lambda h: (-float(h["mean_ms"]), h["host"]))[:top]
    merged["most_refused_hosts"] = sorted(refusing, key=lambda h: (-int(h["refused"]), h["host"]))[:top]
    merged["first_at"] = min(firsts) if firsts else None
    merged["last_at"] = max(lasts) if lasts else None
    return merged


def empty_json() -> dict[str, Any]:
    return merge_json(())


TOTALS_FIELDS = tuple(f.name for f in dataclasses.fields(TotalsSnapshot))
