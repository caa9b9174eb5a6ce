"""What a robots.txt exchange leaves behind besides its rules: the pages the store archives and
logs (every hop of its redirects, as Heritrix archives them), the sitemaps it names (and
which fetched URLs they are), and the URLs of an authority that end unfetched. Pure: no I/O,
nothing of the host table.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import AuthorityRobots, RobotsRules, robots_url
from crawler_node.core.scope import Scope
from crawler_node.core.signals import classify
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.core.verdict import record_only, unfetched
from crawler_node.frontier import Lease, UrlEntry
from crawler_node.node.stage_items import PageResult

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
SITEMAP_PRIORITY = 0  # the URLs a sitemap names queue like discovered links


def redirect_target(result: FetchResult, url: str) -> str | None:
    """Where a robots.txt redirect points, normalised, or None (not a redirect, or no usable
    Location: then the answer stands as it is)."""
    if result.error is not None or result.status not in REDIRECT_STATUSES:
        return None
    location = result.header("Location")
    if not location:
        return None
    try:
        return normalize_url(location, base=url)
    except InvalidURL:
        return None


def robots_pages(hops: list[FetchResult], *, for_lease: Lease, attempt: int, through_api: bool) -> list[PageResult]:
    """The store's pages of one robots.txt fetch, one per request of its redirect chain. They
    finish no lease: ``kind`` "robots" tells the store stage so."""
    pages = []
    for result in hops:
        signal = classify(result, now=0.0, through_api=through_api)
        lease = Lease(id=-1, url=result.url, host=host_of(result.url), depth=for_lease.depth, priority=0,
                      attempts=attempt, hops=0)
        pages.append(PageResult(lease=lease, fetch=result, verdict=record_only(signal), kind="robots"))
    return pages


def sitemap_entries(rules: RobotsRules | None, *, lease: Lease, mode: str, scope: Scope) -> list[UrlEntry]:
    """The sitemaps an authority names in its robots.txt (``mode`` "robots"), and its
    /sitemap.xml as well when ``mode`` is "probe". They are fetched like pages, through the
    frontier, at the depth of the URL that asked for robots.txt; scoped like links."""
    if mode == "off":
        return []
    listed = rules.sitemaps() if rules is not None else []
    if mode == "probe":
        listed = [*listed, robots_url(lease.url).removesuffix("robots.txt") + "sitemap.xml"]
    entries: list[UrlEntry] = []
    seen: set[str] = set()
    via = robots_url(lease.url)  # where the crawl learnt of them (a probed /sitemap.xml too)
    for raw in listed[:100]:  # a robots.txt that lists thousands of sitemaps gets the first 100
        try:
            url = normalize_url(raw, base=lease.url)
        except InvalidURL:
            continue
        # No source host: a sitemap robots.txt names may be on another host (core.scope).
        if url in seen or scope.check(url, lease.depth, source_host=None) is not None:
            continue
        seen.add(url)
        entries.append(UrlEntry(url=url, host=host_of(url), depth=lease.depth, priority=SITEMAP_PRIORITY, via=via))
    return entries


def named_by_robots(lease: Lease) -> bool:
    """Whether robots.txt named the lease's URL as a sitemap (or probe mode made it up): it
    was queued with that robots.txt as its via (sitemap_entries), and came with no redirect."""
    via = lease.via
    return (via is not None and not lease.redirects and via.endswith("/robots.txt")
            and urlsplit(via).path == "/robots.txt")


def may_be_text_sitemap(lease: Lease, result: FetchResult) -> bool:
    """Whether a response is read as a text sitemap if it looks like one (parse.sitemap): a
    URL robots.txt names as a sitemap, of a type a text sitemap may come as. Any other text
    is not, whatever it holds (a page of URLs is not a sitemap because it looks like one)."""
    return result.may_be_text_sitemap and named_by_robots(lease)


def unfetched_page(lease: Lease, robots: AuthorityRobots | None, *, disallowed: bool, now: float,
                   dropped: bool = False) -> PageResult:
    """A leased URL that ends without a request: an operator dropped its host (done), its
    authority's robots.txt (``robots``) forbids it (done), or could not be had (given up;
    outcome tls when its certificate failed). One crawl.log line with the reason, no WARC
    record (no exchange happened)."""
    if dropped:
        outcome, reason = FetchOutcome.HOST_DROPPED, "an operator dropped its host"
        disallowed = True  # done, not given up
    elif disallowed:
        outcome, reason = FetchOutcome.ROBOTS_DISALLOWED, "robots.txt disallows it"
    elif robots is not None and robots.certificate_failed:
        outcome, reason = FetchOutcome.TLS, f"{robots.last_error} (found fetching robots.txt; not retried)"
    else:
        error = robots.last_error if robots is not None else None
        outcome, reason = FetchOutcome.ROBOTS_UNAVAILABLE, f"robots.txt could not be had: {error}"
    result = FetchResult(url=lease.url, started_at=now, error_detail=reason)
    return PageResult(lease=lease, fetch=result, verdict=unfetched(outcome, gave_up=not disallowed))
