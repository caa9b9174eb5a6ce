"""What the store is handed per fetch attempt (`FetchRecord`), and what it says of the crawl
(`CrawlInfo`): plain data, pickled to the store process as tuples of the fields in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata


def _software() -> str:
    # From the installed metadata rather than `crawler_node.__version__`: same number, and it
    # does not depend on how the package was imported (editable installs may skip __init__).
    try:
        return f"crawler-node/{metadata.version('crawler-node')}"
    except metadata.PackageNotFoundError:
        return "crawler-node/unknown"


SOFTWARE = _software()


@dataclass(slots=True)
class FetchRecord:
    """What happened on one fetch attempt. `status` is None when no HTTP response came."""

    url: str
    host: str
    node_id: str
    attempt: int
    fetched_at: float  # epoch seconds
    outcome: str  # a core.outcomes.FetchOutcome's value: "ok", "redirect", "timeout", ...
    status: int | None = None
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""  # as received: de-chunked by the HTTP client, still content-encoded
    content_type: str | None = None
    error: str | None = None
    remote_addr: str | None = None
    elapsed_s: float = 0.0
    location: str | None = None  # a redirect's target, as the Location header gave it
    truncated: str | None = None  # the body was cut: "length", "time" or "disconnect" (WARC-Truncated)
    parse_truncated: bool = False  # links were extracted from the first max_parse_bytes only
    kind: str = "page"  # "page", "robots" or "sitemap"
    status_line: str | None = None  # as received ("HTTP/1.0 200 OK"); None: rebuilt from the status
    depth: int = 0
    via: str | None = None  # the page the URL was found on
    outlinks: str | None = None  # a parsed page's links, one per line: its metadata record (None: none)
    items: list[str] = field(default_factory=list)  # a pipeline's items of this page, JSON lines
    visit: int = 0  # 0: the URL's first fetch; n: its n-th recrawl
    # The site refused the crawler (core.refusals): "kind: evidence". The answer is archived as
    # evidence with a metadata record saying so, and left out of the CDXJ index (not the page).
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class CrawlInfo:
    """What the warcinfo record at the head of each WARC file says about the crawl."""

    crawl_name: str = "crawl"  # isPartOf
    operator: str | None = None
    user_agent: str | None = None
    robots: str = "obey"  # the robots policy: RFC 9309, always obeyed
    description: str | None = None
