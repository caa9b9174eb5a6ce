"""What travels between the node's stages, and the small pieces they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from crawler_node.core.outcomes import Rejection
from crawler_node.core.response import FetchResult
from crawler_node.core.stats import Kind, Metric
from crawler_node.core.verdict import Verdict
from crawler_node.frontier import Lease, UrlEntry

SEED_PRIORITY = 100  # seeds and submitted URLs go before anything discovered

# URLs that end without a request because the scope or a trap guard turned them away (the store
# stage counts them) or an operator dropped their host (the lease keeper): one series a reason.
URLS_TURNED_AWAY = Metric("crawler_urls_turned_away", "URLs never fetched: out of scope or stopped by a trap guard, "
                          "by reason (each a crawl.log line with that outcome)", Kind.COUNTER, ("reason",))


@dataclass(slots=True)
class PageResult:
    """One fetch attempt on its way from a fetch task to the store stage."""

    lease: Lease
    fetch: FetchResult
    verdict: Verdict
    links: list[UrlEntry] = field(default_factory=list)
    kind: str = "page"  # "page", "robots" (no lease of its own: nothing to finish) or "sitemap"
    parse_truncated: bool = False  # links came from the first max_parse_bytes of the body only
    outlinks: str | None = None  # all the page's links, one per line, for its WARC metadata record
    items: list[str] = field(default_factory=list)  # the pipelines' items of the page, as JSON lines
    # its links (or redirect target) out of scope, as (url, why, depth): a crawl.log line each
    rejected: list[tuple[str, Rejection, int]] = field(default_factory=list)
    # a redirect back into its own chain after the site may have set a cookie: this URL (the
    # page's own, or the page it was redirected from) is fetched once more (fetch_stage)
    refetch: str | None = None


class InboundFull(Exception):
    """The inbound queue is full: the caller is told to come back (429 + Retry-After)."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("inbound queue is full")
        self.retry_after_s = retry_after_s


class Routes(Protocol):
    """Where a host's URLs go, asked by the stages that route them (cluster.routing.Router)."""

    @property
    def is_single(self) -> bool: ...
    def route(self, host: str) -> str | None: ...
    def serves(self, host: str) -> bool: ...
    def successor_for(self, host: str) -> str | None: ...
