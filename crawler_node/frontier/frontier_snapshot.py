"""What the frontier shows of itself: its counts and what memory holds (the status's
``frontier``), and the shedding state. Made on the frontier's thread (Frontier.snapshot)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crawler_node.core.stats import Indexed, Kind, Metric, Stat, gauge, stat

FRONTIER_URLS = Metric("crawler_frontier_urls", "URLs in the durable frontier by state", Kind.GAUGE, ("state",))


def _urls(state: str) -> Mapping[str, Stat]:
    return stat(FRONTIER_URLS, at={"state": state})


@dataclass(frozen=True, slots=True)
class FrontierTotals:
    queued: int = field(metadata=_urls("queued"))
    leased: int = field(metadata=_urls("leased"))
    done: int = field(metadata=_urls("done"))
    failed: int = field(metadata=_urls("failed"))
    deferred: int = field(metadata=_urls("deferred"))
    hosts: int
    hosts_with_work: int
    # queued rows of hosts waiting on disk
    parked_queued: int = field(metadata=gauge(
        "crawler_frontier_parked_urls", "Queued URLs of hosts waiting on disk for their turn (past --active-hosts)"))
    oldest_queued_age_s: float
    # done, with a due time
    recrawl_scheduled: int = field(metadata=gauge("crawler_recrawl_scheduled", "Fetched URLs with a recrawl scheduled"))
    recrawl_due: int = field(metadata=gauge("crawler_recrawl_due", "Fetched URLs due for their recrawl now"))
    hosts_in_memory: int = field(metadata=gauge("crawler_frontier_active_hosts",
                                                "Hosts with work the frontier keeps in memory"))
    recent_urls: int
    # URLs deleted by an operator's drop-host, ever (durable): known and finished count them
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class ShedState:
    cut: int | None  # while set, new URLs at or below this priority are parked on arrival
    counts: Mapping[str, int]  # deferred URLs by reason, and "restored", since the frontier opened


@dataclass(frozen=True, slots=True)
class FrontierSnapshot(Indexed):
    totals: FrontierTotals
    shedding: ShedState
