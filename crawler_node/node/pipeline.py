"""What travels between the node's stages, and the small pieces they share."""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler_node.fetch.fetcher import FetchResult
from crawler_node.frontier.frontier import AddResult, Frontier, Lease, UrlEntry
from crawler_node.core.signals import Signal

SEED_PRIORITY = 100  # seeds and submitted URLs go before anything discovered
# Pages per round trip to a parser process. 32 rather than 16: half the pipe writes and answers
# for the event loop, about +5% pages/s in bench/throughput.py (3 alternating rounds).
PARSE_BATCH = 32
PARSE_BATCH_BYTES = 4_000_000  # ... unless they are big: then fewer
REFILL_HOSTS = 256  # hosts per batched lease round trip


def take_in(frontier: Frontier, mine: list[UrlEntry], forward: list[tuple[str, UrlEntry]],
             seen: bool, replicas: list[str]) -> AddResult:
    """Runs on the frontier thread: outbox first, then the frontier, both committed before
    the caller acknowledges (a crash in between re-sends, and receivers deduplicate)."""
    if forward:
        frontier.outbox_put(forward, seen=seen)
    if replicas:
        frontier.replica_add(replicas)
    if seen:
        return AddResult(accepted=[], duplicates=len(mine) - frontier.mark_seen(mine))
    return frontier.add(mine)


@dataclass(slots=True)
class PageResult:
    """One fetch attempt on its way from a fetch task to the store worker."""

    lease: Lease
    fetch: FetchResult
    signal: Signal
    retry_at: float | None = None  # set: back to the frontier, eligible then
    postponed: bool = False  # with retry_at: refused before the site (API limit), budget kept
    final_failure: bool = False
    links: list[UrlEntry] = field(default_factory=list)


class InboundFull(Exception):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__("inbound queue is full")
        self.retry_after_s = retry_after_s
