"""Sitemaps (sitemaps.org): what a urlset and an index list, gzip, the spec's limits, and a
parser that refuses entity bombs and external entities cheaply; then the parse worker and
stage, which turn a sitemap's URLs into scoped links one level deeper."""

from __future__ import annotations

import gzip
import random
import tracemalloc
import zlib

import pytest

from crawler_node.config import ParseConfig
from crawler_node.core.backoff import NO_BACKOFF, HostBackoffPolicy, RetryPolicy
from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.core.verdict import ResponseRules, judge_page
from crawler_node.frontier import Lease
from crawler_node.node.parse_stage import ParseStage
from crawler_node.node.stage_items import PageResult
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages
from crawler_node.parse.sitemap import SITEMAP_NAMESPACE, Sitemap, read_sitemap
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

LIMITS = {"max_urls": 50_000, "max_bytes": 52_428_800}
SITEMAP_URL = "http://s.test/sitemap.xml"


def urlset(*locs: str, namespace: str = SITEMAP_NAMESPACE) -> bytes:
    entries = "".join(f"<url>\n  <loc> {loc} </loc>\n  <lastmod>2026-01-01</lastmod>\n</url>" for loc in locs)
    xmlns = f' xmlns="{namespace}"' if namespace else ""
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset{xmlns}>{entries}</urlset>'.encode()


def index(*locs: str) -> bytes:
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<sitemapindex xmlns="{SITEMAP_NAMESPACE}">{entries}</sitemapindex>'.encode()


def peak_bytes(body: bytes, **limits: int) -> tuple[Sitemap, int]:
    tracemalloc.start()
    try:
        sitemap = read_sitemap(body, **{**LIMITS, **limits})
        return sitemap, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------ what it lists
def test_a_urlset_lists_its_pages_in_order_with_entities_decoded_and_whitespace_trimmed() -> None:
    body = urlset("http://s.test/a", "http://s.test/b?x=1&amp;y=2")
    assert read_sitemap(body, **LIMITS) == Sitemap(kind="urlset", urls=["http://s.test/a", "http://s.test/b?x=1&y=2"])


def test_an_index_lists_its_sitemaps() -> None:
    body = index("http://s.test/sitemap-a.xml", "http://s.test/sitemap-b.xml.gz")
    assert read_sitemap(body, **LIMITS) == Sitemap(
        kind="sitemapindex", urls=["http://s.test/sitemap-a.xml", "http://s.test/sitemap-b.xml.gz"])


def test_a_sitemap_without_namespace_or_in_googles_old_one_is_read() -> None:
    assert read_sitemap(urlset("http://s.test/a", namespace=""), **LIMITS).urls == ["http://s.test/a"]
    old = urlset("http://s.test/a", namespace="http://www.google.com/schemas/sitemap/0.84")
    assert read_sitemap(old, **LIMITS).urls == ["http://s.test/a"]


def test_extension_locs_and_locs_outside_an_entry_are_not_urls_of_the_sitemap() -> None:
    body = (f'<urlset xmlns="{SITEMAP_NAMESPACE}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
            "<loc>http://s.test/stray</loc>"
            "<url><loc>http://s.test/page</loc><image:image><image:loc>http://s.test/i.png</image:loc></image:image>"
            "</url><sitemap><loc>http://s.test/wrong-entry.xml</loc></sitemap></urlset>").encode()
    assert read_sitemap(body, **LIMITS).urls == ["http://s.test/page"]


@pytest.mark.parametrize("body", [
    # (An RSS 2.0 feed was here: sitemaps.org lists RSS 2.0 and Atom as sitemaps; see test_sitemap_formats.py.)
    b'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body><a href="/x">x</a></body></html>',
    b'<urlset xmlns="http://example.com/not-sitemaps"><url><loc>http://s.test/a</loc></url></urlset>',
    b"<html><body><a href='/x'>x</a>",  # a page that is not XML, but its first tag says enough
])
def test_other_xml_is_not_a_sitemap_and_yields_nothing(body: bytes) -> None:
    assert read_sitemap(body, **LIMITS) == Sitemap(kind=None)


def test_a_sitemap_in_another_declared_encoding_is_read() -> None:
    body = ('<?xml version="1.0" encoding="ISO-8859-1"?><urlset><url><loc>http://s.test/café</loc></url>'
            "</urlset>").encode("latin-1")
    assert read_sitemap(body, **LIMITS).urls == ["http://s.test/café"]


# ------------------------------------------------------------------------------ gzip
def test_gzip_is_told_by_its_magic_bytes_and_may_have_several_members() -> None:
    body = urlset("http://s.test/a", "http://s.test/b")
    assert read_sitemap(gzip.compress(body), **LIMITS).urls == ["http://s.test/a", "http://s.test/b"]
    two_members = gzip.compress(body[:50]) + gzip.compress(body[50:]) + b"\0\0\0\0"  # padding is ignored
    assert read_sitemap(two_members, **LIMITS).urls == ["http://s.test/a", "http://s.test/b"]


def test_a_gzip_file_cut_short_or_corrupt_is_an_error_and_keeps_the_urls_read_before() -> None:
    locs = [f"http://s.test/p{i}" for i in range(5_000)]
    packed = gzip.compress(urlset(*locs))
    cut = read_sitemap(packed[: len(packed) // 2], **LIMITS)
    assert cut.kind == "urlset" and cut.error is not None and "ends" in cut.error
    assert 0 < len(cut.urls) < 5_000 and cut.urls == locs[: len(cut.urls)]
    corrupt = read_sitemap(packed[:10] + bytes(200) + packed[210:], **LIMITS)
    assert corrupt.error is not None and corrupt.error.startswith("error:")


def gzip_bomb(size: int) -> bytes:
    """``size`` bytes of a urlset that never ends, gzipped (to about a thousandth of that)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    spaces = b" " * 1_000_000
    parts = [packer.compress(b"<urlset>")] + [packer.compress(spaces) for _ in range(size // len(spaces))]
    return b"".join([*parts, packer.flush()])


def test_a_gzip_bomb_is_inflated_only_up_to_max_bytes() -> None:
    bomb = gzip_bomb(256_000_000)
    assert len(bomb) < 2_000_000
    sitemap, peak = peak_bytes(bomb, max_bytes=2_000_000)
    assert sitemap == Sitemap(kind="urlset", truncated="bytes")
    assert peak < 20_000_000


# ------------------------------------------------------------------------------ limits
def test_reading_stops_after_max_urls_and_says_the_file_listed_more() -> None:
    body = urlset(*(f"http://s.test/p{i}" for i in range(10)))
    assert read_sitemap(body, max_urls=4, max_bytes=10**6) == Sitemap(
        kind="urlset", urls=[f"http://s.test/p{i}" for i in range(4)], truncated="urls")
    assert read_sitemap(body, max_urls=10, max_bytes=10**6).truncated is None  # exactly at the limit


def test_a_file_over_max_bytes_keeps_the_urls_before_the_cut() -> None:
    body = urlset(*(f"http://s.test/p{i}" for i in range(100)))
    sitemap = read_sitemap(body, max_urls=1000, max_bytes=len(body) // 2)
    assert sitemap.truncated == "bytes" and sitemap.error is None
    assert 10 < len(sitemap.urls) < 100
    assert read_sitemap(body, max_urls=1000, max_bytes=len(body)).truncated is None


def test_a_spec_sized_sitemap_is_read_whole_without_building_a_tree() -> None:
    locs = [f"http://s.test/section-{i % 97}/page-{i}.html" for i in range(50_000)]
    body = urlset(*locs)
    sitemap, peak = peak_bytes(body)
    assert sitemap.urls == locs and sitemap.truncated is None
    # The URL strings themselves are ~5 MB; 50,000 elements with their text and tails would be far more.
    assert peak < 3 * sum(map(len, locs)) + 2_000_000


# ------------------------------------------------------------------------------ hostile XML
BILLION_LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                             for i in range(1, 10))
                  + b"]><urlset><url><loc>http://s.test/&lol9;</loc></url></urlset>")
QUADRATIC = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY a "' + b"x" * 100_000 + b'">]><urlset><url><loc>'
             + b"&a;" * 100_000 + b"</loc></url></urlset>")


@pytest.mark.parametrize("body", [BILLION_LAUGHS, QUADRATIC], ids=["billion-laughs", "quadratic"])
def test_an_entity_bomb_is_refused_at_its_doctype_before_any_expansion(body: bytes) -> None:
    sitemap, peak = peak_bytes(body)
    assert sitemap.kind is None and sitemap.urls == []
    assert sitemap.error is not None and sitemap.error.startswith("DTDForbidden")
    assert peak < 5 * len(body) + 1_000_000  # nothing expanded: a copy or two of the input at most


@pytest.mark.parametrize("declaration", [
    b'<!DOCTYPE urlset [<!ENTITY e SYSTEM "file:///etc/passwd">]>',
    b'<!DOCTYPE urlset [<!ENTITY % p SYSTEM "http://127.0.0.1:9/evil.dtd"> %p;]>',
    b'<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/sitemap.dtd">',
])
def test_external_entities_and_dtds_are_refused(declaration: bytes) -> None:
    body = b'<?xml version="1.0"?>' + declaration + b"<urlset><url><loc>http://s.test/&e;</loc></url></urlset>"
    sitemap = read_sitemap(body, **LIMITS)
    assert sitemap.urls == [] and sitemap.error is not None and "Forbidden" in sitemap.error


def test_an_undeclared_entity_is_an_error_not_an_expansion() -> None:
    sitemap = read_sitemap(b"<urlset><url><loc>http://s.test/&e;</loc></url></urlset>", **LIMITS)
    assert sitemap.kind == "urlset" and sitemap.urls == [] and "undefined entity" in (sitemap.error or "")


@pytest.mark.parametrize("body", [
    b"",
    b"not xml at all",
    b'<?xml version="1.0" encoding="x-no-such"?><urlset/>',
    b"\x1f\x8bnot really gzip",
])
def test_what_cannot_be_read_is_an_error_result_never_an_exception(body: bytes) -> None:
    sitemap = read_sitemap(body, **LIMITS)
    assert sitemap.urls == [] and sitemap.error


def test_malformed_xml_keeps_the_urls_before_the_error() -> None:
    body = urlset("http://s.test/a", "http://s.test/b").replace(b"</urlset>", b"<url><loc>x</lo></url>")
    sitemap = read_sitemap(body, **LIMITS)
    assert sitemap.urls == ["http://s.test/a", "http://s.test/b"]
    assert sitemap.error is not None and "mismatched tag" in sitemap.error


# ------------------------------------------------------------------------------ the parse worker
def test_a_sitemaps_urls_are_links_one_level_deeper_scoped_like_links() -> None:
    context = ParseContext(scope=Scope(allow_hosts=["s.test"], max_depth=3), max_links=1)  # max_links: pages only
    body = urlset("http://s.test/a", "/relative", "http://elsewhere.test/x", "mailto:me@s.test", "http://s.test/a")
    [report] = parse_pages(context, [(body, SITEMAP_URL, 2, None, False)])
    assert isinstance(report, PageReport) and report.kind == "sitemap" and report.found == 5
    assert report.links == [("http://s.test/a", "s.test"), ("http://s.test/relative", "s.test")]
    [too_deep] = parse_pages(context, [(urlset("http://s.test/deep"), SITEMAP_URL, 3, None, False)])
    assert isinstance(too_deep, PageReport) and too_deep.links == [] and too_deep.found == 1


def test_a_gzip_index_and_a_non_sitemap_candidate_in_the_worker() -> None:
    context = ParseContext(scope=Scope(), max_links=100, sitemap_max_urls=1)
    jobs = [(gzip.compress(index("http://s.test/1.xml", "http://s.test/2.xml")), SITEMAP_URL + ".gz", 0, None, False),
            (b"<feed xmlns='http://example.com/not-atom'/>", "http://s.test/feed.xml", 0, None, False),
            (b"<feed xmlns='http://www.w3.org/2005/Atom'/>", "http://s.test/feed.xml", 0, None, False)]
    [sitemap, other, feed] = parse_pages(context, jobs)
    assert isinstance(sitemap, PageReport) and sitemap.truncated == "urls"
    assert sitemap.links == [("http://s.test/1.xml", "s.test")]
    assert other == ([], 0, None)
    # An Atom feed is a sitemap by sitemaps.org ("Other Sitemap formats"), if one of no entries.
    assert isinstance(feed, PageReport) and (feed.kind, feed.found, feed.links) == ("sitemap", 0, [])


# ------------------------------------------------------------------------------ the parse stage
class Recorder:
    def __init__(self) -> None:
        self.pages: list[PageResult] = []
        self.arrived = Wakeup()

    async def put(self, page: PageResult) -> None:
        self.pages.append(page)
        self.arrived.notify()


class _Host:
    """A host that has never been throttled, as the verdict reads it."""

    crawl_delay = 0.0
    throttle_streak = 0
    backoff = NO_BACKOFF
    latency = None


RULES = ResponseRules(retry=RetryPolicy(rng=random.Random(1)), host_backoff=HostBackoffPolicy(),
                      host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False)


def fetched(url: str, body: bytes, content_type: str, depth: int = 0) -> PageResult:
    lease = Lease(1, url, "s.test", depth, 0, 1, 0)
    result = FetchResult(url=url, status=200, body=body, headers=[("Content-Type", content_type)])
    verdict = judge_page(_Host(), result, attempt=1, in_current_round=True, now=0.0, rules=RULES)
    return PageResult(lease=lease, fetch=result, verdict=verdict)


@pytest.mark.parametrize("workers", [0, 1], ids=["thread", "process"])
async def test_the_parse_stage_marks_a_sitemap_and_counts_what_it_listed(workers: int) -> None:
    store, taken = Recorder(), Wakeup()
    stage = ParseStage(config=ParseConfig(max_links_per_page=100, parse_workers=workers, worker_nice=0, parse_queue=4,
                                          sitemap_max_urls=2, warc_metadata=False),
                       scope=Scope(allow_hosts=["s.test"]), store=store, ring_generation=lambda: 0, taken=taken)
    supervisor = Supervisor(on_fatal=pytest.fail)
    await stage.start(supervisor)
    try:
        await stage.put(fetched(SITEMAP_URL, urlset("http://s.test/a", "http://s.test/b", "http://s.test/c"),
                                "application/xml", depth=1))
        await stage.put(fetched("http://s.test/other.xml", b"<rss/>", "text/xml"))
        assert await store.arrived.wait_until(lambda: len(store.pages) == 2, 10)
        by_url = {page.lease.url: page for page in store.pages}
        sitemap = by_url[SITEMAP_URL]
        assert (sitemap.kind, sitemap.parse_truncated) == ("sitemap", True)
        assert [(link.url, link.depth, link.priority) for link in sitemap.links] == [
            ("http://s.test/a", 2, -2), ("http://s.test/b", 2, -2)]
        other = by_url["http://s.test/other.xml"]
        assert (other.kind, other.links, other.parse_truncated) == ("page", [], False)
        assert await taken.wait_until(stage.idle, 5)
        snapshot = stage.snapshot()
        assert (snapshot["sitemaps"], snapshot["sitemap_urls"], snapshot["sitemaps_truncated"]) == (1, 2, 1)
        assert snapshot["sitemap_errors"] == 0 and snapshot["parse_errors"] == 0
    finally:
        await supervisor.stop()
        await stage.close()


async def test_with_sitemaps_off_an_xml_response_goes_to_the_store_unread() -> None:
    store = Recorder()
    stage = ParseStage(config=ParseConfig(max_links_per_page=100, parse_workers=0, worker_nice=0, parse_queue=4,
                                          read_sitemaps=False, warc_metadata=False),
                       scope=Scope(), store=store, ring_generation=lambda: 0, taken=Wakeup())
    try:
        await stage.put(fetched(SITEMAP_URL, urlset("http://s.test/a"), "application/xml"))
        assert [(page.kind, page.links) for page in store.pages] == [("page", [])]  # no parser loop ran
        assert stage.queue.empty()
    finally:
        await stage.close()


def test_the_fetch_result_says_which_responses_may_be_sitemaps() -> None:
    def may_be(url: str, content_type: str) -> bool:
        return FetchResult(url=url, headers=[("Content-Type", content_type)]).may_be_sitemap

    assert may_be("http://s.test/x", "application/xml; charset=utf-8")
    assert may_be("http://s.test/x", "text/xml")
    assert may_be("http://s.test/x", "application/x-gzip")
    assert may_be("http://s.test/sitemap-b.XML.gz?v=2#top", "application/octet-stream")
    assert may_be("http://s.test/sitemap.xml", "text/plain")
    assert not may_be("http://s.test/page.html", "text/html")
    assert not may_be("http://s.test/x.xml.html", "application/octet-stream")
