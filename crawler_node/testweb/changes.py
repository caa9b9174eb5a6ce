"""Pages that change as Poisson processes of known rates, and how fresh a crawler kept them.

A host whose profile sets ``change_rate`` (changes per second) has each of its ``/p/N`` pages
change at that rate times a log-normal factor of spread ``change_spread`` (0: every page at
the rate; the factor's median is 1), drawn from the testweb seed, the host and the path. A
page's change times are the points of its Poisson process counted from testweb's start, drawn
from the same seed, so two runs with one seed change the same pages at the same times. A
page's version is the number of its changes so far; its bytes carry that number (and its
Last-Modified the time of its last change).

Every served fetch of such a page (a 200 or a 304) leaves the fetcher holding the current
version, until the page's next change. `freshness` integrates that: per page, from its first
fetch, the time its fetcher's copy was current, against the time it was tracked
(Cho & Garcia-Molina's freshness, averaged over time), over the whole run and in time buckets.
"""

from __future__ import annotations

import hashlib
import math
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any


def page_rate(seed: int, host: str, path: str, rate: float, spread: float) -> float:
    """Changes per second of one page of a host with ``change_rate`` ``rate``."""
    if rate <= 0 or spread <= 0:
        return max(rate, 0.0)
    return rate * math.exp(spread * random.Random(_key(seed, host, path, "rate")).gauss(0.0, 1.0))


def _key(seed: int, host: str, path: str, what: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}|{host}|{path}|{what}".encode(), digest_size=8).digest(), "big")


@dataclass(slots=True)
class ChangingPage:
    rate: float
    rng: random.Random
    changes: list[float] = field(default_factory=list)  # times of its changes so far, from the start
    next_change: float = math.inf
    fetches: list[float] = field(default_factory=list)  # times it was served
    useful: int = 0  # fetches that found a version the previous fetch had not

    def advance(self, now: float) -> int:
        """The page's version at ``now`` (seconds from the start), its changes drawn so far."""
        while self.next_change <= now:
            self.changes.append(self.next_change)
            self.next_change += self.rng.expovariate(self.rate)
        return len(self.changes)

    def fresh_s(self, start: float, end: float) -> tuple[float, float]:
        """(fresh, tracked) seconds within [start, end): tracked from the first fetch on."""
        fresh = tracked = 0.0
        fetches = self.fetches
        for index, at in enumerate(fetches):
            until = min(fetches[index + 1] if index + 1 < len(fetches) else end, end)
            low = max(at, start)
            if until <= low:
                continue
            tracked += until - low
            after = bisect_right(self.changes, at)  # the first change after this fetch
            stale_from = self.changes[after] if after < len(self.changes) else self.next_change
            fresh += max(0.0, min(stale_from, until) - low)
        return fresh, tracked


class ChangeClock:
    """The changing pages of a testweb, their versions, and what was served of them."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._pages: dict[tuple[str, str], ChangingPage] = {}

    def version(self, host: str, path: str, rate: float, spread: float, now: float) -> tuple[int, float]:
        """(version, time of its last change from the start; 0 for version 0) of the page at ``now``."""
        page = self._page(host, path, rate, spread)
        version = page.advance(now)
        return version, (page.changes[-1] if version else 0.0)

    def served(self, host: str, path: str, now: float) -> None:
        """A fetch of the page was answered (200 or 304): its fetcher holds the current version."""
        page = self._pages.get((host, path))
        if page is None:
            return
        previous = page.fetches[-1] if page.fetches else None
        if previous is None or bisect_right(page.changes, previous) < len(page.changes):
            page.useful += 1
        page.fetches.append(now)

    def _page(self, host: str, path: str, rate: float, spread: float) -> ChangingPage:
        key = (host, path)
        page = self._pages.get(key)
        if page is None:
            rng = random.Random(_key(self._seed, host, path, "changes"))
            page_change_rate = page_rate(self._seed, host, path, rate, spread)
            page = ChangingPage(page_change_rate, rng)
            page.next_change = rng.expovariate(page_change_rate) if page_change_rate > 0 else math.inf
            self._pages[key] = page
        return page

    def report(self, now: float, *, since: float = 0.0, buckets: int = 0, pages: bool = False) -> dict[str, Any]:
        """/_testweb/freshness: see the module docstring, over [since, now) (seconds from the
        start). ``buckets``: freshness in that many equal slices of [0, now); ``pages``: each
        page's figures too."""
        fresh = tracked = 0.0
        fetches = useful = 0
        stale_ages = []
        per_page: dict[str, Any] = {}
        for (host, path), page in self._pages.items():
            if not page.fetches:
                continue
            page.advance(now)
            page_fresh, page_tracked = page.fresh_s(since, now)
            fresh += page_fresh
            tracked += page_tracked
            fetches += len(page.fetches)
            useful += page.useful
            after = bisect_right(page.changes, page.fetches[-1])
            if after < len(page.changes):
                stale_ages.append(now - page.changes[after])
            if pages:
                per_page[f"http://{host}{path}"] = {
                    "rate": page.rate, "changes": len(page.changes), "fetches": len(page.fetches),
                    "useful_fetches": page.useful, "fresh_s": page_fresh, "tracked_s": page_tracked}
        report: dict[str, Any] = {
            "now_s": now, "since_s": since, "pages": sum(1 for page in self._pages.values() if page.fetches),
            "fetches": fetches, "useful_fetches": useful,
            "freshness": fresh / tracked if tracked else None,
            "stale_pages": len(stale_ages),
            "stale_age_s": sum(stale_ages) / len(stale_ages) if stale_ages else 0.0,
        }
        if buckets > 0:
            width = now / buckets
            timeline = []
            for index in range(buckets):
                start, end = index * width, (index + 1) * width
                sums = [page.fresh_s(start, end) for page in self._pages.values() if page.fetches]
                slice_tracked = sum(t for _, t in sums)
                timeline.append([start, sum(f for f, _ in sums) / slice_tracked if slice_tracked else None])
            report["timeline"] = timeline
        if pages:
            report["per_page"] = per_page
        return report
