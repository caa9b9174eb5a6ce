"""The sitemap formats besides the XML urlset and index (sitemaps.org, "Other Sitemap formats"):
RSS 2.0 and Atom feeds, each gzip'd or not, read from their content with the XML sitemaps'
bounds; then the parse worker, which makes their URLs links as it does a urlset's."""

from __future__ import annotations

import gzip

import pytest

from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages
from crawler_node.parse.sitemap import Sitemap, read_sitemap

LIMITS = {"max_urls": 50_000, "max_bytes": 52_428_800}
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


def test_feed_types_and_paths_may_be_sitemaps() -> None:
    def may_be(url: str, content_type: str) -> bool:
        return FetchResult(url=url, headers=[("Content-Type", content_type)]).may_be_sitemap

    assert may_be("http://s.test/feed", "application/rss+xml; charset=utf-8")
    assert may_be("http://s.test/feed", "application/atom+xml")
    assert may_be("http://s.test/feed.rss", "application/octet-stream")
    assert may_be("http://s.test/feed.atom.gz", "application/octet-stream")
    assert not may_be("http://s.test/feed", "text/plain")
