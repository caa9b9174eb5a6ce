"""Sitemaps of every format on testweb, crawled by a real node (issue 46): hosts whose robots.txt
names a text sitemap, an RSS and an Atom feed (gzip'd or not, and an XML urlset), each listing
pages that no page links to. The node fetches exactly what testweb's ground truth says is
reachable, those pages included; first, what testweb serves and counts as reachable."""

from __future__ import annotations

import gzip

import pytest
from conftest import read_crawl_log, roots

from crawler_node.parse.sitemap import read_sitemap
from crawler_node.testweb.graph import LISTED_PAGES, HostFeatures, SyntheticWeb
from crawler_node.testweb.profile import ProfileError, parse_profile

HOSTS, PAGES = 4, 8
PROFILE = {
    "site-0.test": {"sitemaps": ["txt", "rss", "atom"]},
    "site-1.test": {"sitemaps": ["txt.gz", "rss.gz", "atom.gz", "xml"]},
    # robots.txt names the sitemap but disallows what it lists: nothing of it is fetched
    "site-2.test": {"sitemaps": ["txt"], "robots": "User-agent: *\nDisallow: /listed/\n"},
}
SITEMAPS = {host: settings["sitemaps"] for host, settings in PROFILE.items()}


def listed(host: str, name: str) -> list[str]:
    return [f"http://{host}/listed/{name}/{index}" for index in range(LISTED_PAGES)]


# ------------------------------------------------------------------------------ testweb itself
def small_web(**features: HostFeatures) -> SyntheticWeb:
    return SyntheticWeb(hosts=["site-0.test", "site-1.test"], pages=PAGES, seed=3, features=features)


def test_robots_txt_names_each_sitemap_and_each_lists_pages_linked_from_nowhere_else() -> None:
    names = ("txt", "txt.gz", "rss", "rss.gz", "atom", "atom.gz", "xml", "xml.gz")
    web = small_web(**{"site-0.test": HostFeatures(sitemaps=names)})
    robots = web.robots_txt("site-0.test") or ""
    assert robots.startswith("User-agent: *\nDisallow:\n")
    assert [line for line in robots.splitlines() if line.startswith("Sitemap:")] == [
        f"Sitemap: http://site-0.test/sitemap.{name}" for name in names]
    expected = set(web.expected_urls())
    for name in names:
        body = web.sitemap("site-0.test", f"/sitemap.{name}")
        assert body.startswith(b"\x1f\x8b") == name.endswith(".gz")
        sitemap = read_sitemap(body, max_urls=100, max_bytes=10**6, text=name.startswith("txt"))
        assert sitemap.kind == {"txt": "text", "xml": "urlset"}.get(name[:3], name.removesuffix(".gz"))
        assert sitemap.urls == listed("site-0.test", name) and sitemap.error is None
        assert {f"http://site-0.test/sitemap.{name}", *sitemap.urls} <= expected
    # Reachable only through the sitemaps: a web without them has none of these pages.
    assert not any("/listed/" in url or "/sitemap." in url for url in small_web().expected_urls())
    assert web.robots_txt("site-1.test") is None and small_web().robots_txt("site-0.test") is None


def test_a_sitemaps_listed_pages_link_back_home_only() -> None:
    web = small_web(**{"site-0.test": HostFeatures(sitemaps=("rss",))})
    assert web.links("site-0.test", "/listed/rss/0") == ["http://site-0.test/"]
    assert b"<html" in web.render("site-0.test", "/listed/rss/2")
    assert web.resolve("site-0.test", f"/listed/rss/{LISTED_PAGES}") is None
    assert web.resolve("site-0.test", "/listed/atom/0") is None and web.resolve("site-0.test", "/sitemap.atom") is None


def test_robots_rules_of_the_profile_come_first_and_apply_to_what_a_sitemap_lists() -> None:
    web = small_web(**{"site-0.test": HostFeatures(sitemaps=("txt",), robots="User-agent: *\nDisallow: /listed/\n")})
    assert web.robots_txt("site-0.test") == (
        "User-agent: *\nDisallow: /listed/\n\nSitemap: http://site-0.test/sitemap.txt\n")
    expected = web.expected_urls()
    assert "http://site-0.test/sitemap.txt" in expected and not any("/listed/" in url for url in expected)


@pytest.mark.parametrize(("value", "why"), [
    ("txt", "expected a list"), (["html"], "unknown sitemap format"), (["txt", "txt"], "listed twice"),
    (["gz"], "unknown sitemap format"),
])
def test_a_bad_sitemaps_setting_is_refused_by_name(value: object, why: str) -> None:
    with pytest.raises(ProfileError, match=why):
        parse_profile({"site-0.test": {"sitemaps": value}})


def test_sitemaps_are_off_the_spanning_tree() -> None:
    with pytest.raises(ValueError, match="sitemaps"):
        SyntheticWeb(hosts=["site-0.test"], pages=2, seed=1, tree_only=True,
                     features={"site-0.test": HostFeatures(sitemaps=("txt",))})


# ------------------------------------------------------------------------------ a real node
@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    from crawler_node.testweb.process import TestwebProcess
    from crawler_node.tools.node_process import NodeProcess

    tmp = tmp_path_factory.mktemp("sitemaps")
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=3, profile=PROFILE, tmp_dir=tmp) as web:
        with NodeProcess(node_id="node-1", data_dir=tmp / "node-1", proxy=web.url, seeds=roots(HOSTS)) as node:
            status = node.wait_idle(timeout_s=120)
            yield {"expected": set(web.expected()), "stats": web.stats(), "status": status,
                   "log": read_crawl_log(node.data_dir)}


def test_the_node_fetches_exactly_what_is_reachable_sitemaps_included(crawled) -> None:
    logged = {line["url"] for line in crawled["log"]}
    assert logged - crawled["expected"] == set(), "fetched what is not part of the synthetic web"
    assert crawled["expected"] - logged == set(), "never fetched"


def test_every_page_only_a_sitemap_lists_was_fetched_once(crawled) -> None:
    requests = crawled["stats"]["urls"]
    for host in ("site-0.test", "site-1.test"):
        for name in SITEMAPS[host]:
            assert requests.get(f"http://{host}/sitemap.{name}") == 1
            assert [requests.get(url) for url in listed(host, name)] == [1] * LISTED_PAGES, (host, name)
    assert requests.get("http://site-2.test/sitemap.txt") == 1
    assert not any("/listed/" in url for url in requests if url.startswith("http://site-2.test/"))


def test_each_sitemap_is_a_sitemap_in_crawl_log_and_in_the_counters(crawled) -> None:
    kinds = {line["url"]: line["kind"] for line in crawled["log"]}
    files = [f"http://{host}/sitemap.{name}" for host, names in SITEMAPS.items() for name in names]
    assert {url: kinds[url] for url in files} == dict.fromkeys(files, "sitemap")
    assert {url for url, kind in kinds.items() if kind == "sitemap"} == set(files)
    counters = crawled["status"]["counters"]
    assert (counters["sitemaps"], counters["sitemap_urls"], counters["sitemap_errors"]) == (
        len(files), LISTED_PAGES * len(files), 0)


def test_a_gzipped_text_sitemap_is_served_as_gzip() -> None:
    web = small_web(**{"site-0.test": HostFeatures(sitemaps=("txt.gz",))})
    lines = gzip.decompress(web.sitemap("site-0.test", "/sitemap.txt.gz")).decode().splitlines()
    assert lines == listed("site-0.test", "txt.gz")
