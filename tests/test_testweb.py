"""testweb, exercised as users see it: real subprocesses on 127.0.0.1, reached as a proxy.

Four servers are started per module (graph features, timing behaviours, a paid-API front and a
twin of the first for determinism); bad-profile and signal tests start their own.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import html
import json
import re
import signal
import subprocess
import sys
import time
import zlib
from collections import deque
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp
import pytest
from protego import Protego

from crawler_node.testweb import TestwebProcess
from crawler_node.testweb.graph import HostFeatures, SyntheticWeb
from crawler_node.testweb.pages import gzip_bomb
from crawler_node.testweb.profile import ProfileError, load_profile, parse_profile

ROBOTS_SITE1 = "User-agent: *\nDisallow: /p/1\nCrawl-delay: 0.2\n"
# Only the crawler-node group applies to us: everything but /p/2 is allowed.
ROBOTS_SHOP = "User-agent: crawler-node\nDisallow: /p/2\n\nUser-agent: *\nDisallow: /\n"
BOMB_BYTES = 32 << 20

GRAPH_ARGS = dict(
    hosts=5,
    pages=30,
    seed=7,
    profile={
        "site-1.test": {"robots": ROBOTS_SITE1},
        "site-2.test": {"redirects": 0.3},
        "site-3.test": {"trap": True},
        "site-4.test": {"gzip_bomb": BOMB_BYTES},
        "shop.example.test": {"robots": ROBOTS_SHOP},
    },
)

BEHAVIOUR_PROFILE = {
    "site-0.test": {"max_concurrency": 3, "latency_ms": 500, "jitter_ms": 0, "retry_after_s": 2},
    "site-1.test": {"latency_ms": 500, "jitter_ms": 0},
    "site-2.test": {"error_rate": 0.5, "robots": "User-agent: *\nAllow: /\n"},
    "site-3.test": {"page_bytes": 2_000_000},
    "drip.test": {"drip_bytes_per_s": 4000, "page_bytes": 4000},
}


@pytest.fixture(scope="module")
def graph_web():
    with TestwebProcess(**GRAPH_ARGS) as web:
        yield web


@pytest.fixture(scope="module")
def behaviour_web():
    with TestwebProcess(hosts=4, pages=5, profile=BEHAVIOUR_PROFILE) as web:
        yield web


@pytest.fixture(scope="module")
def api_web():
    profile = {
        "hosts": {"site-0.test": {"latency_ms": 400, "jitter_ms": 0}},
        "api_limit": {"concurrency": 2, "header": "X-Plan-Limit"},
    }
    with TestwebProcess(hosts=2, pages=5, profile=profile, extra_args=["--api-quota", "6"]) as web:
        yield web


async def fetch(session: aiohttp.ClientSession, proxy: str, url: str) -> tuple[int, dict, bytes]:
    async with session.get(url, proxy=proxy, allow_redirects=False) as response:
        return response.status, dict(response.headers), await response.read()


def raw_session() -> aiohttp.ClientSession:
    # No transparent decompression (the gzip bomb) and no environment proxies.
    return aiohttp.ClientSession(auto_decompress=False, trust_env=False)


# --- a deliberately independent mini crawler -------------------------------------------------

_TAG_HREF = re.compile(r"<(a|base)\b[^>]*?\bhref=\"([^\"]*)\"", re.IGNORECASE)


def canonical(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host if parts.port in (None, 80) else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", parts.query, ""))


def extract_links(page_url: str, body: str) -> list[str]:
    base, links = page_url, []
    for tag, href in _TAG_HREF.findall(body):
        href = html.unescape(href)
        if tag.lower() == "base":
            base = urljoin(page_url, href)
        else:
            links.append(canonical(urljoin(base, href)))
    return links


async def crawl(proxy: str, hosts: list[str]) -> tuple[set[str], set[str], set[str]]:
    """BFS from every host root through the proxy. Returns (fetched, trap, disallowed)."""
    fetched: set[str] = set()
    trap: set[str] = set()
    disallowed: set[str] = set()
    robots: dict[str, Protego | None] = {}
    queue = deque(f"http://{host}/" for host in hosts)
    seen = set(queue)
    async with raw_session() as session:
        while queue:
            url = queue.popleft()
            host = urlsplit(url).hostname
            if urlsplit(url).path.startswith("/calendar/"):
                trap.add(url)
                continue
            if host not in robots:
                status, _, body = await fetch(session, proxy, f"http://{host}/robots.txt")
                robots[host] = Protego.parse(body.decode()) if status == 200 else None
            rules = robots[host]
            if rules is not None and not rules.can_fetch(url, "crawler-node"):
                disallowed.add(url)
                continue
            status, headers, body = await fetch(session, proxy, url)
            fetched.add(url)
            if status in (301, 302):
                found = [canonical(urljoin(url, headers["Location"]))]
            elif headers.get("Content-Type", "").startswith("text/html") and (
                "Content-Encoding" not in headers
            ):
                assert status == 200, url
                found = extract_links(url, body.decode())
            else:
                found = []
            for link in found:
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
    return fetched, trap, disallowed


# --- graph -----------------------------------------------------------------------------------


async def test_every_expected_url_is_reached_by_an_independent_crawl(graph_web):
    hosts = list(graph_web.hosts()["hosts"])
    assert hosts == [f"site-{k}.test" for k in range(5)] + ["shop.example.test"]
    fetched, trap, disallowed = await crawl(graph_web.url, hosts)
    expected = graph_web.expected()
    assert expected == sorted(expected) and len(expected) > 150
    assert fetched == set(expected)
    assert trap and not trap & set(expected)
    assert disallowed and not disallowed & set(expected)


async def test_links_are_spelled_in_many_ways_that_canonicalise_to_expected(graph_web):
    async with raw_session() as session:
        bodies = [
            (await fetch(session, graph_web.url, f"http://site-0.test/p/{k}"))[2].decode()
            for k in range(1, 30)
        ]
    hrefs = [href for body in bodies for _, href in _TAG_HREF.findall(body)]
    spellings = {
        "relative": any(re.fullmatch(r"(\./)?\d+(#.*)?", h) for h in hrefs),
        "dot-dot": any(h.startswith("../") for h in hrefs),
        "root-relative": any(h.startswith("/p/") for h in hrefs),
        "absolute": any(h.startswith("http://site-") for h in hrefs),
        "upper-case": any(h.startswith("HTTP://SITE-") for h in hrefs),
        "default-port": any(":80/" in h for h in hrefs),
        "fragment": any("#" in h for h in hrefs),
        "base": any("<base href=" in body for body in bodies),
    }
    assert all(spellings.values()), spellings


async def test_same_seed_gives_identical_pages_and_another_seed_differs(graph_web):
    with TestwebProcess(**GRAPH_ARGS) as twin:
        assert twin.expected() == graph_web.expected()
        sample = graph_web.expected()[::7]
        async with raw_session() as session:
            for url in sample:
                first = await fetch(session, graph_web.url, url)
                second = await fetch(session, twin.url, url)
                assert first[0] == second[0] and first[2] == second[2], url
                assert (await fetch(session, graph_web.url, url))[2] == first[2]

    def build(seed: int) -> SyntheticWeb:
        hosts = [f"site-{k}.test" for k in range(5)]
        return SyntheticWeb(hosts=hosts, pages=30, seed=seed,
                            features={"site-2.test": HostFeatures(redirects=0.3)})

    one, again, other = build(1), build(1), build(2)
    assert one.expected_urls() == again.expected_urls()
    assert one.render("site-0.test", "/p/5") == again.render("site-0.test", "/p/5")
    assert one.render("site-0.test", "/p/5") != other.render("site-0.test", "/p/5")
    assert one.links("site-0.test", "/") != other.links("site-0.test", "/")


# The graphs generated for these parameters, pinned: change the digest only on purpose (and say
# so), since benchmark results and recorded crawls refer to these webs.
PINNED_GRAPH_DIGEST = "821cdc65d2f5be016d98731b1e1603210e2259fae25b752c2fd67d2e29f9f202"


def graph_digest(graph_module=None) -> str:
    module = graph_module or sys.modules[SyntheticWeb.__module__]
    hosts = [f"site-{k}.test" for k in range(5)] + ["shop.example.test"]
    features = {
        "site-1.test": module.HostFeatures(robots=ROBOTS_SITE1),
        "site-2.test": module.HostFeatures(redirects=0.3),
        "site-3.test": module.HostFeatures(trap=True),
        "site-4.test": module.HostFeatures(gzip_bomb=True),
        "shop.example.test": module.HostFeatures(robots=ROBOTS_SHOP),
    }
    webs = [
        module.SyntheticWeb(hosts=hosts, pages=30, seed=7, features=features),
        module.SyntheticWeb(hosts=[f"site-{k}.test" for k in range(300)], pages=4, seed=5, cross_link_prob=0.6),
    ]
    digest = hashlib.sha256()
    for number, web_graph in enumerate(webs):
        for url in web_graph.expected_urls():
            host, path = urlsplit(url).hostname, urlsplit(url).path
            digest.update(f"{url} -> {' '.join(web_graph.links(host, path))}\n".encode())
            if number == 0 and web_graph.resolve(host, path).kind == "page":
                digest.update(web_graph.render(host, path))
    return digest.hexdigest()


def test_graphs_for_existing_parameters_are_unchanged():
    assert graph_digest() == PINNED_GRAPH_DIGEST


def test_a_web_of_200k_one_page_hosts_starts_in_seconds_and_reports_cheaply():
    # Cross-host links are drawn by index (O(1)), not from a per-host copy of the host list
    # (O(hosts^2): hours at this size).
    args = ["--images", "0", "--cross-link-prob", "0", "--history", "0", "--no-keep-alive"]
    started = time.monotonic()
    with TestwebProcess(hosts=200_000, pages=1, extra_args=args, ready_timeout=60) as web:
        ready_s = time.monotonic() - started
        expected = web.expected()
        assert len(expected) == 200_000 and expected[0] == "http://site-0.test/"
        assert set(expected) == {f"http://site-{k}.test/" for k in range(200_000)}
        polled = time.monotonic()
        summary = web.stats(summary=True)
        assert time.monotonic() - polled < 0.5
        assert set(summary) == {"clock", "totals", "api", "misdirected"}
        assert summary["totals"]["requests"] == 0
    assert ready_s < 45


def test_images_per_host_is_an_option_and_pages_1_means_one_page():
    hosts = [f"site-{k}.test" for k in range(50)]
    bare = SyntheticWeb(hosts=hosts, pages=1, seed=3, images=0)
    assert bare.expected_urls() == sorted(f"http://{host}/" for host in hosts)
    assert bare.resolve("site-0.test", "/img/0.png") is None and bare.resolve("site-0.test", "/p/1") is None
    assert all(link.endswith(".test/") for host in hosts for link in bare.links(host, "/"))
    one = SyntheticWeb(hosts=hosts, pages=1, seed=3, images=1)
    assert len(one.expected_urls()) == 2 * len(hosts)
    with pytest.raises(ValueError, match="images"):
        SyntheticWeb(hosts=hosts, pages=1, seed=3, images=11)


async def _raw_request(port: int, request: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request.encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_absolute_form_and_origin_form_requests_both_work(graph_web):
    port = graph_web.port
    graph_web.reset()
    curl_style = (
        "GET http://site-0.test/p/3 HTTP/1.1\r\nHost: site-0.test\r\nUser-Agent: curl/8.5.0\r\n"
        "Accept: */*\r\nProxy-Connection: Keep-Alive\r\nConnection: close\r\n\r\n"
    )
    odd_spelling = (
        f"GET HTTP://SITE-0.TEST:80/p/3 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Connection: close\r\n\r\n"
    )
    origin_form = "GET /p/3 HTTP/1.1\r\nHost: SITE-0.test\r\nConnection: close\r\n\r\n"
    results = [await _raw_request(port, r) for r in (curl_style, odd_spelling, origin_form)]
    assert [status for status, _ in results] == [200, 200, 200]
    assert results[0][1] == results[1][1] == results[2][1]
    assert results[0][1].startswith(b"<!DOCTYPE html>")
    assert graph_web.stats()["urls"] == {"http://site-0.test/p/3": 3}


async def test_unknown_hosts_are_misdirected(graph_web):
    async with raw_session() as session:
        for url in ("http://example.com/", "http://site-99.test/", "http://site-0.test:8080/"):
            status, _, _ = await fetch(session, graph_web.url, url)
            assert status == 421, url
    assert graph_web.stats()["misdirected"] >= 3


async def test_images_are_png_and_expected(graph_web):
    async with raw_session() as session:
        status, headers, body = await fetch(session, graph_web.url, "http://site-0.test/img/0.png")
    assert status == 200 and headers["Content-Type"] == "image/png"
    assert body.startswith(b"\x89PNG\r\n\x1a\n")
    assert "http://site-0.test/img/0.png" in graph_web.expected()


# --- robots, redirects, trap, bomb -----------------------------------------------------------


async def test_robots_is_served_and_disallowed_urls_are_not_expected(graph_web):
    expected = set(graph_web.expected())
    async with raw_session() as session:
        status, _, body = await fetch(session, graph_web.url, "http://site-1.test/robots.txt")
        assert (status, body.decode()) == (200, ROBOTS_SITE1)
        status, _, _ = await fetch(session, graph_web.url, "http://site-0.test/robots.txt")
        assert status == 404
        # testweb does not enforce robots; it only leaves those URLs out of the ground truth.
        status, _, _ = await fetch(session, graph_web.url, "http://site-1.test/p/1")
        assert status == 200
    for path in ("/p/1", "/p/10", "/p/19"):
        assert f"http://site-1.test{path}" not in expected
    assert "http://site-1.test/p/2" in expected
    assert "http://shop.example.test/" in expected  # the crawler-node group allows it
    assert "http://shop.example.test/p/2" not in expected


async def test_redirects_answer_with_canonical_location_and_the_loop_loops(graph_web):
    expected = set(graph_web.expected())
    site2 = sorted(u for u in expected if u.startswith("http://site-2.test/p/"))
    redirects = 0
    async with raw_session() as session:
        for url in site2:
            status, headers, _ = await fetch(session, graph_web.url, url)
            if status in (301, 302):
                redirects += 1
                target = headers["Location"]
                assert target.startswith("http://site-2.test/") and target in expected
                assert (await fetch(session, graph_web.url, target))[0] == 200
            else:
                assert status == 200
        assert redirects == round(0.3 * 29)
        loop_a, loop_b = "http://site-2.test/loop/a", "http://site-2.test/loop/b"
        status, headers, _ = await fetch(session, graph_web.url, loop_a)
        assert (status, headers["Location"]) == (302, loop_b)
        status, headers, _ = await fetch(session, graph_web.url, loop_b)
        assert (status, headers["Location"]) == (302, loop_a)
    assert {loop_a, loop_b} <= expected


async def test_spider_trap_is_endless_and_not_expected(graph_web):
    expected = graph_web.expected()
    assert not [u for u in expected if "/calendar/" in u]
    url = "http://site-3.test/calendar/2026/01"
    async with raw_session() as session:
        root = (await fetch(session, graph_web.url, "http://site-3.test/"))[2].decode()
        assert url in extract_links("http://site-3.test/", root)
        for _ in range(24):
            status, _, body = await fetch(session, graph_web.url, url)
            assert status == 200
            months = [u for u in extract_links(url, body.decode())
                      if re.search(r"/calendar/\d{4}/\d\d$", u)]
            assert len(months) == 1
            url = months[0]
    assert url == "http://site-3.test/calendar/2028/01"


async def test_gzip_bomb_is_small_on_the_wire_and_inflates_hugely(graph_web):
    assert "http://site-4.test/bomb" in graph_web.expected()
    async with raw_session() as session:
        status, headers, body = await fetch(session, graph_web.url, "http://site-4.test/bomb")
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("text/html")
    assert len(body) < BOMB_BYTES // 500
    inflater, inflated = zlib.decompressobj(zlib.MAX_WBITS | 16), 0
    for offset in range(0, len(body), 4096):
        inflated += len(inflater.decompress(body[offset : offset + 4096]))
    assert inflated == BOMB_BYTES and inflater.eof


def test_gzip_bomb_builder_is_valid_gzip():
    for size in (0, 1, (1 << 20) + 3, 3 << 20):
        assert gzip.decompress(gzip_bomb(size)) == bytes(size)


# --- timing and politeness behaviours ---------------------------------------------------------


async def test_max_concurrency_answers_429_and_counts_them(behaviour_web):
    behaviour_web.reset()
    async with raw_session() as session:
        results = await asyncio.gather(
            *(fetch(session, behaviour_web.url, f"http://site-0.test/p/{1 + k % 4}")
              for k in range(10))
        )
    throttled = [headers for status, headers, _ in results if status == 429]
    assert len(throttled) == 7
    assert all(headers["Retry-After"] == "2" for headers in throttled)
    assert sum(status == 200 for status, _, _ in results) == 3
    host = behaviour_web.stats()["hosts"]["site-0.test"]
    assert host["throttled"] == len(throttled)
    assert host["requests"] == 10


async def test_peak_concurrency_is_exact(behaviour_web):
    behaviour_web.reset()
    concurrent = 6
    async with raw_session() as session:
        results = await asyncio.gather(
            *(fetch(session, behaviour_web.url, "http://site-1.test/") for _ in range(concurrent))
        )
    assert [status for status, _, _ in results] == [200] * concurrent
    host = behaviour_web.stats()["hosts"]["site-1.test"]
    assert host["peak_concurrency"] == concurrent
    assert host["requests"] == concurrent and host["in_flight"] == 0


async def test_latency_delays_and_min_gap_is_recorded(behaviour_web):
    behaviour_web.reset()
    async with raw_session() as session:
        started = time.monotonic()
        for _ in range(2):
            assert (await fetch(session, behaviour_web.url, "http://site-1.test/p/1"))[0] == 200
        elapsed = time.monotonic() - started
    assert elapsed >= 1.0
    stats = behaviour_web.stats()
    assert stats["hosts"]["site-1.test"]["min_gap_s"] >= 0.5
    assert stats["hosts"]["site-0.test"]["min_gap_s"] is None
    assert stats["urls"] == {"http://site-1.test/p/1": 2}


async def test_error_rate_fails_pages_but_not_robots(behaviour_web):
    behaviour_web.reset()
    async with raw_session() as session:
        page_statuses = [
            (await fetch(session, behaviour_web.url, f"http://site-2.test/p/{1 + k % 4}"))[0]
            for k in range(40)
        ]
        robots_statuses = [
            (await fetch(session, behaviour_web.url, "http://site-2.test/robots.txt"))[0]
            for _ in range(10)
        ]
    failures = page_statuses.count(503)
    assert 5 < failures < 35 and failures + page_statuses.count(200) == 40
    assert robots_statuses == [200] * 10
    host = behaviour_web.stats()["hosts"]["site-2.test"]
    assert host["errors"] == failures and host["requests"] == 50


async def test_stats_summary_is_the_totals_of_the_full_document(behaviour_web):
    behaviour_web.reset()
    async with raw_session() as session:
        await asyncio.gather(*(fetch(session, behaviour_web.url, f"http://site-0.test/p/{k}") for k in range(1, 6)))
        for url in ("http://site-1.test/p/1", "http://site-1.test/p/1", "http://site-2.test/robots.txt"):
            await fetch(session, behaviour_web.url, url)
        for k in range(8):
            await fetch(session, behaviour_web.url, f"http://site-2.test/p/{1 + k % 4}")
        await fetch(session, behaviour_web.url, "http://nowhere.test/")
    summary = behaviour_web.stats(summary=True)
    full = behaviour_web.stats()
    assert set(summary) == {"clock", "totals", "api", "misdirected"}
    assert summary["misdirected"] == full["misdirected"] == 1
    hosts, urls = full["hosts"].values(), full["urls"]
    totals = summary["totals"]
    assert totals == {
        "requests": sum(h["requests"] for h in hosts),
        "in_flight": 0,
        "hosts_requested": sum(h["requests"] > 0 for h in hosts),
        "urls": len(urls),
        "robots_urls": sum(url.endswith("/robots.txt") for url in urls),
        "repeated_urls": sum(n > 1 for n in urls.values()),
        "throttled": sum(h["throttled"] for h in hosts),
        "errors": sum(h["errors"] for h in hosts),
        "not_modified": sum(h["not_modified"] for h in hosts),
        "body_bytes": sum(h["body_bytes"] for h in hosts),
        "peak_concurrency": max(h["peak_concurrency"] for h in hosts),
        "refused": sum(sum(h.get("refused", {}).values()) for h in hosts),
    }
    # 5 + 2 + 1 + 8 requests to 3 hosts; site-0.test tolerates 3 at once; site-1.test/p/1 and
    # site-2.test/p/1 ... /p/4 were asked for twice.
    assert (totals["requests"], totals["hosts_requested"], totals["throttled"]) == (16, 3, 2)
    assert (totals["urls"], totals["robots_urls"], totals["repeated_urls"]) == (11, 1, 5)
    behaviour_web.reset()
    assert behaviour_web.stats(summary=True)["totals"]["requests"] == 0


async def test_stats_for_some_hosts_with_their_request_history(behaviour_web):
    behaviour_web.reset()
    async with raw_session() as session:
        results = await asyncio.gather(
            *(fetch(session, behaviour_web.url, f"http://site-0.test/p/{k}") for k in range(1, 6))
        )
        await fetch(session, behaviour_web.url, "http://site-1.test/")
    only = behaviour_web.stats(hosts=["site-0.test", "no-such.test"], history=True)
    assert set(only["hosts"]) == {"site-0.test"}
    assert set(only["urls"]) == {f"http://site-0.test/p/{k}" for k in range(1, 6)}
    history = only["hosts"]["site-0.test"]["history"]
    # [started, status, path] in start order, on testweb's clock
    assert sorted(path for _, _, path in history) == [f"/p/{k}" for k in range(1, 6)]
    assert sorted(status for _, status, _ in history) == sorted(status for status, _, _ in results)
    assert sorted(status for _, status, _ in history) == [200, 200, 200, 429, 429]
    starts = [started for started, _, _ in history]
    assert starts == sorted(starts) and starts[-1] <= only["clock"]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert only["hosts"]["site-0.test"]["min_gap_s"] == pytest.approx(min(gaps), abs=1e-6)
    assert "history" not in behaviour_web.stats(hosts=["site-0.test"])["hosts"]["site-0.test"]


async def test_history_is_bounded_and_keep_alive_can_be_switched_off():
    with TestwebProcess(hosts=2, pages=5, extra_args=["--history", "3", "--no-keep-alive"]) as web:
        async with raw_session() as session:
            for k in range(5):
                status, headers, _ = await fetch(session, web.url, f"http://site-0.test/p/{k}" if k else
                                                 "http://site-0.test/")
                assert status == 200 and headers["Connection"] == "close"
        history = web.stats(history=True)["hosts"]["site-0.test"]["history"]
        assert [path for _, _, path in history] == ["/p/2", "/p/3", "/p/4"]
        assert web.stats(history=True)["hosts"]["site-1.test"]["history"] == []
        assert web.hosts()["keep_alive"] is False and web.hosts()["history"] == 3


async def test_huge_pages_are_about_page_bytes(behaviour_web):
    async with raw_session() as session:
        status, _, body = await fetch(session, behaviour_web.url, "http://site-3.test/p/2")
    assert status == 200
    assert 0.95 * 2_000_000 <= len(body) <= 1.05 * 2_000_000
    assert body.endswith(b"</html>\n")


async def test_drip_streams_slowly(behaviour_web):
    async with raw_session() as session:
        started = time.monotonic()
        status, _, body = await fetch(session, behaviour_web.url, "http://drip.test/")
        elapsed = time.monotonic() - started
    assert status == 200 and len(body) >= 3800
    assert elapsed >= 0.8 * len(body) / 4000


async def test_hosts_endpoint_reports_effective_profiles(behaviour_web):
    described = behaviour_web.hosts()
    assert set(described["hosts"]) == {f"site-{k}.test" for k in range(4)} | {"drip.test"}
    assert described["hosts"]["site-0.test"]["max_concurrency"] == 3
    assert described["hosts"]["drip.test"]["drip_bytes_per_s"] == 4000


# --- paid-API mode --------------------------------------------------------------------------


async def test_api_limit_concurrency_then_quota_then_reset(api_web):
    async with raw_session() as session:
        burst = await asyncio.gather(
            *(fetch(session, api_web.url, "http://site-0.test/") for _ in range(4))
        )
        statuses = sorted(status for status, _, _ in burst)
        assert statuses == [200, 200, 429, 429]
        for status, headers, _ in burst:
            if status == 429:
                assert headers["X-Plan-Limit"] == "concurrency" and headers["Retry-After"] == "1"
        stats = api_web.stats()
        assert stats["api"]["throttled"] == 2 and stats["api"]["quota_left"] == 4
        assert stats["api"]["peak_concurrency"] == 2
        # API refusals never reach the site.
        assert stats["hosts"]["site-0.test"]["requests"] == 2

        statuses = [(await fetch(session, api_web.url, "http://site-1.test/"))[0]
                    for _ in range(5)]
        assert statuses == [200, 200, 200, 200, 509]
        status, headers, _ = await fetch(session, api_web.url, "http://site-1.test/p/1")
        assert (status, headers["X-Plan-Limit"]) == (509, "quota")
        assert api_web.stats()["api"]["quota_left"] == 0

        api_web.set_quota(1)
        assert (await fetch(session, api_web.url, "http://site-1.test/"))[0] == 200
        assert (await fetch(session, api_web.url, "http://site-1.test/"))[0] == 509


# --- profiles and the command line ---------------------------------------------------------


def test_later_globs_win_per_key_and_exact_names_add_hosts():
    profile = parse_profile({
        "site-*.test": {"latency_ms": 10, "error_rate": 0.1},
        "site-[1-4].test": {"latency_ms": 50},
        "shop.example.test": {"trap": True},
    })
    assert profile.for_host("site-2.test").latency_ms == 50
    assert profile.for_host("site-2.test").error_rate == 0.1
    assert profile.for_host("site-7.test").latency_ms == 10
    assert profile.for_host("site-2.test").effective_jitter_ms == pytest.approx(10)
    assert profile.extra_hosts() == ["shop.example.test"]
    assert profile.for_host("shop.example.test").trap


def test_toml_profile_loads(tmp_path: Path):
    path = tmp_path / "profile.toml"
    path.write_text(
        '[hosts."site-0.test"]\nmax_concurrency = 2\ngzip_bomb = true\n'
        '[api_limit]\nconcurrency = 5\nquota = 100\n'
    )
    profile = load_profile(path)
    assert profile.for_host("site-0.test").max_concurrency == 2
    assert profile.for_host("site-0.test").gzip_bomb == 1 << 30
    assert (profile.api_limit.concurrency, profile.api_limit.quota) == (5, 100)
    with pytest.raises(ProfileError, match="unknown setting"):
        parse_profile({"hosts": {"site-0.test": {"latency": 1}}})


BAD_PROFILES = {
    "missing": ("missing.json", None),
    "invalid-json": ("p.json", '{"site-0.test": {'),
    "invalid-toml": ("p.toml", '["site-0.test"\nlatency_ms = 1\n'),
    "unknown-key": ("p.json", json.dumps({"site-0.test": {"latency": 5}})),
    "wrong-type": ("p.json", json.dumps({"site-0.test": {"latency_ms": "fast"}})),
    "negative": ("p.json", json.dumps({"site-0.test": {"max_concurrency": -1}})),
    "out-of-range": ("p.json", json.dumps({"site-0.test": {"error_rate": 1.5}})),
    "bad-glob": ("p.json", json.dumps({"site-[1-4.test": {"latency_ms": 1}})),
    "not-a-host": ("p.json", json.dumps({"site 1.test": {}})),
    "not-a-table": ("p.json", "[1, 2]"),
    "bad-api": ("p.json", json.dumps({"api_limit": {"concurrency": 0}})),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_exits_2_with_one_line(case: str, tmp_path: Path):
    name, content = BAD_PROFILES[case]
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "crawler_node", "testweb", "--listen", "127.0.0.1:0",
         "--profile", str(path)],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"testweb: error: profile {path}: ")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_exits_0_on_signal(signum: int):
    web = TestwebProcess(hosts=1, pages=1).start()
    assert web.url.startswith("http://127.0.0.1:")
    assert web.stop(signum) == 0
