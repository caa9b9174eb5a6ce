"""The sitemap formats besides the XML urlset and index (sitemaps.org, "Other Sitemap formats"):
RSS 2.0 and Atom feeds, and text sitemaps where one is expected, each gzip'd or not, read from
their content with the XML sitemaps' bounds; then the parse worker, which makes their URLs
links as it does a urlset's, and which responses the node shows it as text sitemaps."""

from __future__ import annotations

import gzip

import pytest

from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.frontier import Lease
from crawler_node.node.robots_txt import may_be_text_sitemap, named_by_robots
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages
from crawler_node.parse.sitemap import Sitemap, read_sitemap
from crawler_node.parse.sitemap_input import FEED_BYTES, MAX_LOC_CHARS

LIMITS = {"max_urls": 50_000, "max_bytes": 52_428_800}
TEXT = {**LIMITS, "text": True}
ATOM = "http://www.w3.org/2005/Atom"


def rss(*links: str, version: str = "2.0") -> bytes:
    items = "".join(f"<item><title>t</title><link>{link}</link><pubDate>Sat, 07 Sep 2002 00:00:01 GMT</pubDate>"
                    "<guid>http://s.test/guid-is-not-a-link</guid></item>" for link in links)
    return (f'<?xml version="1.0"?><rss version="{version}" xmlns:atom="{ATOM}"><channel>'
            f"<title>s</title><link>http://s.test/channel-link</link><description>d</description>"
            f'<atom:link href="http://s.test/feed.rss" rel="self"/>{items}</channel></rss>').encode()


def atom(*links: str, namespace: str = ATOM) -> bytes:
    entries = "".join(f'<entry><title>t</title><id>urn:x:{i}</id><updated>2026-01-01T00:00:00Z</updated>{link}</entry>'
                      for i, link in enumerate(links))
    return (f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{namespace}"><title>s</title>'
            f'<link href="http://s.test/feed-alternate"/><link rel="self" href="http://s.test/feed.atom"/>'
            f"<id>urn:x</id><updated>2026-01-01T00:00:00Z</updated>{entries}</feed>").encode()


# ------------------------------------------------------------------------------ RSS 2.0
def test_an_rss_feed_lists_the_link_of_each_item_and_nothing_else() -> None:
    body = rss("http://s.test/a", " http://s.test/b?x=1&amp;y=2 ")
    assert read_sitemap(body, **LIMITS) == Sitemap(kind="rss", urls=["http://s.test/a", "http://s.test/b?x=1&y=2"])
    assert read_sitemap(gzip.compress(body), **LIMITS).urls == ["http://s.test/a", "http://s.test/b?x=1&y=2"]


@pytest.mark.parametrize("version", ["2.0", "0.91", "0.92"])
def test_rss_2_and_the_versions_it_is_compatible_with_are_read(version: str) -> None:
    assert read_sitemap(rss("http://s.test/a", version=version), **LIMITS).urls == ["http://s.test/a"]


@pytest.mark.parametrize("body", [
    b"<rss><channel><item><link>http://s.test/a</link></item></channel></rss>",  # no version: not RSS 2.0
    b'<rss version="3.0"><channel><item><link>http://s.test/a</link></item></channel></rss>',
    b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/">'
    b"<item><link>http://s.test/a</link></item></rdf:RDF>",  # RSS 1.0: not a format sitemaps.org lists
    b'<feed xmlns="http://example.com/not-atom"><entry><link href="http://s.test/a"/></entry></feed>',
])
def test_other_feeds_are_not_sitemaps(body: bytes) -> None:
    assert read_sitemap(body, **LIMITS) == Sitemap(kind=None)


def test_an_item_link_outside_an_item_or_in_another_namespace_is_not_a_url_of_the_feed() -> None:
    body = (b'<rss version="2.0" xmlns:x="http://example.com/x"><link>http://s.test/root</link><channel>'
            b"<item><x:link>http://s.test/x</x:link><source><link>http://s.test/nested</link></source>"
            b"<link>http://s.test/item</link></item><link>http://s.test/channel</link></channel>"
            b"<item><link>http://s.test/stray-item</link></item></rss>")
    assert read_sitemap(body, **LIMITS).urls == ["http://s.test/item"]


# ------------------------------------------------------------------------------ Atom
def test_an_atom_feed_lists_the_alternate_link_of_each_entry() -> None:
    body = atom('<link href="http://s.test/a"/>',
                '<link rel="alternate" type="text/html" href="http://s.test/b"/>'
                '<link rel="enclosure" href="http://s.test/b.mp3"/><link rel="related" href="http://s.test/c"/>',
                '<link rel="http://www.iana.org/assignments/relation/alternate" href="http://s.test/d"/>'
                '<link rel="edit" href="http://s.test/edit"/>',
                '<content>no link</content>')
    expected = ["http://s.test/a", "http://s.test/b", "http://s.test/d"]
    assert read_sitemap(body, **LIMITS) == Sitemap(kind="atom", urls=expected)
    assert read_sitemap(gzip.compress(body), **LIMITS).urls == expected


def test_an_atom_0_3_feed_is_read_too() -> None:
    body = atom('<link rel="alternate" type="text/html" href="http://s.test/a"/>', namespace="http://purl.org/atom/ns#")
    assert read_sitemap(body, **LIMITS) == Sitemap(kind="atom", urls=["http://s.test/a"])


def test_an_atom_entry_with_two_alternates_lists_both() -> None:
    body = atom('<link href="http://s.test/en" hreflang="en"/><link href="http://s.test/fr" hreflang="fr"/>')
    assert read_sitemap(body, **LIMITS).urls == ["http://s.test/en", "http://s.test/fr"]


# ------------------------------------------------------------------------------ text
def test_a_text_sitemap_lists_one_url_a_line() -> None:
    body = b"\xef\xbb\xbf http://s.test/a\r\n\r\n\nhttps://s.test/b?x=1&y=2 \n\t\nhttp://s.test/caf\xc3\xa9\nhttp://s.test/last"
    expected = ["http://s.test/a", "https://s.test/b?x=1&y=2", "http://s.test/café", "http://s.test/last"]
    assert read_sitemap(body, **TEXT) == Sitemap(kind="text", urls=expected)
    assert read_sitemap(gzip.compress(body), **TEXT) == Sitemap(kind="text", urls=expected)


def test_a_line_that_is_no_url_is_skipped_as_a_useless_loc_is() -> None:
    body = (b"http://s.test/a\n# a comment\nnot a url\n/relative\nhttp://s.test/\xff\xfe-not-utf-8\n"
            b"mailto:me@s.test\nhttp://s.test/" + b"x" * MAX_LOC_CHARS + b"\nhttp://s.test/b\n")
    # mailto: has a scheme: the worker drops it, as it drops a <loc> that says mailto:
    assert read_sitemap(body, **TEXT).urls == ["http://s.test/a", "mailto:me@s.test", "http://s.test/b"]


def test_a_line_too_long_for_a_url_is_dropped_across_pieces_without_being_held() -> None:
    long_line = b"http://s.test/" + b"x" * (5 * FEED_BYTES)
    body = b"http://s.test/a\n" + long_line + b"\nhttp://s.test/b\n" + long_line
    assert read_sitemap(body, **TEXT) == Sitemap(kind="text", urls=["http://s.test/a", "http://s.test/b"])


@pytest.mark.parametrize("body", [
    b"", b"\n\n  \n",
    b"Not Found\nhttp://s.test/a\n",  # a text/plain error page
    b"User-agent: *\nDisallow: /\nSitemap: http://s.test/sitemap.xml\n",  # a robots.txt
    b"ftp://s.test/a\n",  # "You must fully specify URLs, including the http"
])
def test_text_whose_first_line_is_not_an_http_url_is_not_a_sitemap(body: bytes) -> None:
    assert read_sitemap(body, **TEXT) == Sitemap(kind=None)


def test_a_body_that_begins_as_xml_is_read_as_xml_even_where_text_is_expected() -> None:
    xml = b'\xef\xbb\xbf\n <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://s.test/a</loc></url></urlset>'
    assert read_sitemap(xml, **TEXT) == Sitemap(kind="urlset", urls=["http://s.test/a"])
    assert read_sitemap(rss("http://s.test/a").decode().encode("utf-16"), **TEXT).urls == ["http://s.test/a"]


def test_text_is_read_only_where_it_is_expected() -> None:
    sitemap = read_sitemap(b"http://s.test/a\n", **LIMITS)  # text=False: XML or nothing
    assert sitemap.kind is None and sitemap.urls == [] and sitemap.error


def test_a_text_sitemap_is_bounded_as_a_urlset_is() -> None:
    lines = [f"http://s.test/p{i}" for i in range(10_000)]
    body = "\n".join(lines).encode()
    assert read_sitemap(body, max_urls=4, max_bytes=10**6, text=True) == Sitemap(kind="text", urls=lines[:4],
                                                                                 truncated="urls")
    assert read_sitemap(body, max_urls=10_000, max_bytes=10**6, text=True).truncated is None  # exactly at the limit
    limit = len(body) // 2
    cut = read_sitemap(gzip.compress(body), max_urls=10**5, max_bytes=limit, text=True)
    assert cut.truncated == "bytes" and cut.error is None
    whole_lines = body[:limit].decode().split("\n")[:-1]  # the line cut at the limit is not read
    assert cut.urls == whole_lines and 0 < len(whole_lines) < len(lines)
    packed = gzip.compress(body)
    broken = read_sitemap(packed[: len(packed) // 2], **TEXT)
    assert broken.kind == "text" and broken.error and 0 < len(broken.urls) < 10_000


# ------------------------------------------------------------------------------ the bounds
def atom_of(*links: str) -> bytes:
    return atom(*(f'<link href="{link}"/>' for link in links))


@pytest.mark.parametrize("make", [lambda links: rss(*links), lambda links: atom_of(*links)], ids=["rss", "atom"])
def test_a_feed_is_bounded_as_a_urlset_is(make) -> None:
    links = [f"http://s.test/p{i}" for i in range(10)]
    body = make(links)
    assert read_sitemap(body, max_urls=4, max_bytes=10**6).urls == links[:4]
    assert read_sitemap(body, max_urls=4, max_bytes=10**6).truncated == "urls"
    cut = read_sitemap(gzip.compress(body), max_urls=100, max_bytes=len(body) // 2)
    assert cut.truncated == "bytes" and 0 < len(cut.urls) < 10 and cut.urls == links[:len(cut.urls)]
    long_link = "http://s.test/" + "x" * 20_000  # over the longest URL kept: dropped
    assert read_sitemap(make([long_link, "http://s.test/ok"]), **LIMITS).urls == ["http://s.test/ok"]


def test_a_malformed_feed_keeps_the_urls_before_the_error() -> None:
    body = rss("http://s.test/a", "http://s.test/b").replace(b"</channel>", b"<item><link>x</lnk></item>")
    sitemap = read_sitemap(body, **LIMITS)
    assert sitemap.urls == ["http://s.test/a", "http://s.test/b"] and "mismatched tag" in (sitemap.error or "")


# ------------------------------------------------------------------------------ the worker
def test_a_feeds_links_are_scoped_and_one_level_deeper_like_a_sitemaps() -> None:
    context = ParseContext(scope=Scope(allow_hosts=["s.test"], max_depth=3), max_links=1)
    body = atom('<link href="http://s.test/a"/>', '<link href="/relative"/>', '<link href="http://elsewhere.test/x"/>')
    [report] = parse_pages(context, [(gzip.compress(body), "http://s.test/feed.atom", 2, None, False)])
    assert isinstance(report, PageReport) and (report.kind, report.found) == ("sitemap", 3)
    assert report.links == [("http://s.test/a", "s.test"), ("http://s.test/relative", "s.test")]
    assert report.rejected == [("http://elsewhere.test/x", "host_not_allowed")]


def test_a_text_sitemap_in_the_worker_only_where_the_job_says_one_is_expected() -> None:
    context = ParseContext(scope=Scope(allow_hosts=["s.test"]), max_links=1)
    body = gzip.compress(b"http://s.test/a\n/relative\nhttp://elsewhere.test/x\n")
    expected, elsewhere, plain = parse_pages(context, [
        (body, "http://s.test/sitemap.txt.gz", 0, None, False, None, None, True),
        (b"http://s.test/b\n", "http://elsewhere.test/sitemap.txt", 0, None, False, None, None, True),
        (b"http://s.test/c\n", "http://s.test/list.txt", 0, None, False, None, None, False)])
    assert isinstance(expected, PageReport) and (expected.kind, expected.found) == ("sitemap", 2)
    assert expected.links == [("http://s.test/a", "s.test")]
    assert expected.rejected == [("http://elsewhere.test/x", "host_not_allowed")]
    assert isinstance(elsewhere, PageReport) and elsewhere.links == [("http://s.test/b", "s.test")]
    assert isinstance(plain, PageReport) and plain.kind == "page" and plain.links == [] and plain.error


def lease(url: str, via: str | None, redirects: int = 0) -> Lease:
    return Lease(1, url, "s.test", 0, 0, 1, 0, redirects, via)


def test_a_text_sitemap_is_one_robots_txt_names_served_as_text() -> None:
    robots = "http://s.test/robots.txt"
    assert named_by_robots(lease("http://s.test/sitemap.txt", robots))
    assert named_by_robots(lease("http://other.test/s.txt", "https://s.test:8443/robots.txt"))
    assert not named_by_robots(lease("http://s.test/sitemap.txt", None))  # a seed
    assert not named_by_robots(lease("http://s.test/list.txt", "http://s.test/page.html"))  # a link
    assert not named_by_robots(lease("http://s.test/x.txt", "http://s.test/a/robots.txt"))  # no robots.txt there
    assert not named_by_robots(lease("https://s.test/sitemap.txt", "http://s.test/sitemap.txt", 1))  # a redirect

    def text(content_type: str | None, via: str | None = robots) -> bool:
        headers = [("Content-Type", content_type)] if content_type else []
        result = FetchResult(url="http://s.test/sitemap.txt", status=200, body=b"x", headers=headers)
        return may_be_text_sitemap(lease(result.url, via), result)

    assert text("text/plain; charset=utf-8") and text(None) and text("application/octet-stream")
    assert text("application/x-gzip") and text("application/gzip")
    assert not text("text/html") and not text("application/pdf") and not text("text/csv")
    assert not text("text/plain", via="http://s.test/")


def test_feed_types_and_paths_may_be_sitemaps() -> None:
    def may_be(url: str, content_type: str) -> bool:
        return FetchResult(url=url, headers=[("Content-Type", content_type)]).may_be_sitemap

    assert may_be("http://s.test/feed", "application/rss+xml; charset=utf-8")
    assert may_be("http://s.test/feed", "application/atom+xml")
    assert may_be("http://s.test/feed.rss", "application/octet-stream")
    assert may_be("http://s.test/feed.atom.gz", "application/octet-stream")
    assert not may_be("http://s.test/feed", "text/plain")
