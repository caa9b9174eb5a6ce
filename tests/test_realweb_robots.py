"""robots.txt by RFC 9309 on a small real web (nginx over HTTPS, names from dnsmasq), audited
from nginx's own access log: rules per scheme, host and port, redirects followed, Crawl-delay
kept, an unavailable robots.txt held to complete disallow and then given up, sitemaps read."""

from __future__ import annotations

import time

import pytest
from conftest import read_crawl_log
from realweb import DOMAIN, Access, RealWeb, realweb  # noqa: F401  (the fixture)

from crawler_node.tools.node_process import NodeProcess

pytestmark = pytest.mark.tools  # nginx, dnsmasq

ROBOTS_ATTEMPTS = 3
SITES = ("redirect", "altport", "httpsonly", "delay", "robots503", "sitemap")


def paths(accesses: list[Access]) -> list[str]:
    return [access.uri for access in accesses]


@pytest.fixture(scope="module")
def crawl(realweb: RealWeb, tmp_path_factory):  # noqa: F811
    """One node, no proxy, crawls six sites to idle; the tests below audit what nginx saw."""
    tmp = tmp_path_factory.mktemp("robots")
    seeds = [realweb.url("redirect", scheme="http"), realweb.url("altport"), realweb.url("httpsonly"),
             realweb.url("delay"), realweb.url("robots503"), realweb.url("sitemap")]
    node = NodeProcess(node_id="rw-1", data_dir=tmp / "rw-1", seeds=seeds, extra_args=[
        "--allow-private", "--ca-bundle", str(realweb.ca_file), "--dns-server", realweb.dns_server,
        "--allow-host", f"*.{DOMAIN}",
        "--robots-max-attempts", str(ROBOTS_ATTEMPTS), "--robots-error-retry-s", "0.3",
        "--robots-retry-cap-s", "60", "--host-limit-ceiling", "4"])
    before = len(realweb.accesses())
    started = time.monotonic()
    with node:
        status = node.wait_idle(timeout_s=120)
        elapsed = time.monotonic() - started
        log_tail = node.log_tail(200)
    accesses = realweb.accesses()[before:]
    yield {"status": status, "elapsed": elapsed, "log": read_crawl_log(node.data_dir, everything=True),
           "accesses": accesses, "node_log": log_tail}


def site_accesses(crawl, realweb: RealWeb, site: str) -> list[Access]:  # noqa: F811
    address = realweb.address(site)
    return [access for access in crawl["accesses"] if access.server_addr == address]


@pytest.mark.parametrize("site", ["redirect", "altport", "httpsonly", "delay"])
def test_no_disallowed_url_is_fetched_on_any_scheme_or_port(crawl, realweb: RealWeb, site: str) -> None:  # noqa: F811
    truth = realweb.expected(site)
    fetched = {access.uri for access in site_accesses(crawl, realweb, site)}
    assert truth.disallowed and not fetched & truth.disallowed, "robots.txt broken"
    assert truth.pages <= fetched, f"pages never fetched: {sorted(truth.pages - fetched)}"
    logged = {line["url"] for line in crawl["log"] if line["outcome"] == "robots_disallowed"}
    assert {realweb.url(site, path) for path in truth.disallowed} <= logged  # each with its own line


def test_robots_txt_is_asked_on_the_urls_own_scheme_and_port_and_redirects_are_followed(crawl, realweb) -> None:  # noqa: F811
    redirect = site_accesses(crawl, realweb, "redirect")
    robots = [(access.scheme, access.server_port, access.status) for access in redirect if access.uri == "/robots.txt"]
    # the http authority's robots.txt answered 301 to https, which was followed; the https
    # authority asked its own (the same file): each authority has its rules
    assert ("http", 80, 301) in robots and ("https", 443, 200) in robots
    altport = [(access.scheme, access.server_port) for access in site_accesses(crawl, realweb, "altport")
               if access.uri == "/robots.txt"]
    assert altport == [("https", 8443)]
    archived = {line["url"] for line in crawl["log"] if line["kind"] == "robots"}
    assert realweb.url("redirect", "/robots.txt", scheme="http") in archived
    assert realweb.url("altport", "/robots.txt") in archived


def test_the_crawl_delay_gap_holds(crawl, realweb: RealWeb) -> None:  # noqa: F811
    truth = realweb.expected("delay")
    assert truth.crawl_delay
    requests = sorted(site_accesses(crawl, realweb, "delay"), key=lambda access: access.start)
    assert len(requests) >= len(truth.pages)
    # nginx logs milliseconds: allow one of rounding
    gaps = [later.start - earlier.end for earlier, later in zip(requests, requests[1:])]
    assert min(gaps) >= truth.crawl_delay - 0.002, gaps


def test_an_unavailable_robots_txt_means_nothing_is_fetched_then_its_urls_end_logged(crawl, realweb) -> None:  # noqa: F811
    requests = site_accesses(crawl, realweb, "robots503")
    assert {access.uri for access in requests} == {"/robots.txt"}  # complete disallow, never a page
    assert len(requests) == ROBOTS_ATTEMPTS and all(access.status == 503 for access in requests)
    ended = [line for line in crawl["log"] if line["url"] == realweb.url("robots503")]
    assert [line["outcome"] for line in ended if line["kind"] == "page"] == ["robots_unavailable"]
    assert "HTTP 503" in ended[-1]["error"]
    assert crawl["status"]["idle"]  # the crawl ended instead of waiting for the host forever
    assert "robots_unavailable" in crawl["node_log"] and "robots503" in crawl["node_log"]
    # and status says which host is held back, and why
    held = {entry["host"]: entry["reason"] for entry in crawl["status"]["host_table"]["held"]["hosts"]}
    assert "HTTP 503" in held[realweb.host("robots503")]
    assert crawl["status"]["counters"]["robots_given_up"] == 1
    assert crawl["status"]["counters"]["robots_unavailable"] == len(ended) == 1  # its one known URL


def test_every_sitemap_only_page_is_fetched(crawl, realweb: RealWeb) -> None:  # noqa: F811
    truth = realweb.expected("sitemap")
    fetched = {access.uri for access in site_accesses(crawl, realweb, "sitemap")}
    assert truth.sitemap_only and truth.sitemap_only <= fetched, sorted(truth.sitemap_only - fetched)
    assert truth.sitemaps <= fetched  # the index, then the plain and the gzip sitemap
