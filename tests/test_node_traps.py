"""The default scope and the trap guards in a real node against real servers: what the
servers were asked for (testweb's own stats, a local server's request log) and what each
URL turned away left in crawl.log, with its outcome and counter."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import read_crawl_log
from site_helpers import serving

from crawler_node.testweb.graph import TRAP_ENTRY

TRAP_OUTCOMES = ("out_of_scope", "repeated_segments", "path_too_deep", "too_many_query_params", "denied_url",
                 "host_page_cap", "calendar_trap")


def unfetched(data_dir: Path) -> dict[str, list[dict]]:
    """crawl.log lines of URLs turned away by the scope or a guard, per outcome."""
    lines: dict[str, list[dict]] = {outcome: [] for outcome in TRAP_OUTCOMES}
    for line in read_crawl_log(data_dir, everything=True):
        if line["outcome"] in lines:
            lines[line["outcome"]].append(line)
    return lines


def requested_hosts(web) -> dict[str, int]:
    return {host: stats["requests"] for host, stats in web.stats()["hosts"].items() if stats["requests"]}


@pytest.mark.timeout(120)
def test_by_default_a_seed_s_links_to_other_hosts_are_logged_not_fetched(start_testweb, start_node) -> None:
    web = start_testweb(hosts=4, pages=30, seed=11, extra_args=["--cross-link-prob", "0.5"])
    node = start_node("scoped", proxy=web.url, seeds=["http://site-0.test/"], default_scope=True)
    status = node.wait_idle(timeout_s=60)

    # testweb saw requests for the seed's host only: not even a robots.txt of another host.
    assert set(requested_hosts(web)) == {"site-0.test"}
    fetched = {line["url"] for line in read_crawl_log(node.data_dir)}
    assert {url for url in web.expected() if url.startswith("http://site-0.test/")} <= fetched
    outside = unfetched(node.data_dir)["out_of_scope"]
    assert outside, "testweb's cross-host links should have been found"
    assert all(line["host"] != "site-0.test" and line["via"].startswith("http://site-0.test/") for line in outside)
    assert all(line["status"] is None and line["attempt"] == 0 and line["error"] for line in outside)
    assert {line["host"] for line in outside} <= {"site-1.test", "site-2.test", "site-3.test"}
    assert status["counters"]["out_of_scope"] == len(outside)


@pytest.mark.timeout(150)
def test_a_calendar_trap_is_caught_by_its_dates_before_any_cap(start_testweb, start_node) -> None:
    # No --max-pages-per-host, no --max-depth: the calendar (each month links to the next, without
    # end) is stopped by the date guard, --max-future-years (2) after this year.
    web = start_testweb(hosts=1, pages=10, seed=5, extra_args=["--cross-link-prob", "0", "--images", "2"],
                        profile={"site-0.test": {"trap": True}})
    node = start_node("dated", proxy=web.url, seeds=["http://site-0.test/"], default_scope=True)
    status = node.wait_idle(timeout_s=120)
    latest = time.gmtime().tm_year + 2
    calendar = [url for url in web.stats()["urls"] if "/calendar/" in url]
    assert f"http://site-0.test{TRAP_ENTRY}" in calendar
    years = {int(url.split("/calendar/")[1][:4]) for url in calendar}
    assert max(years) <= latest, sorted(years)
    assert len(calendar) <= 2 * 12 * (latest - 2026 + 1) + 2  # a month and its day page, per month
    trapped = unfetched(node.data_dir)["calendar_trap"]
    assert trapped and all(int(line["url"].split("/calendar/")[1][:4]) == latest + 1 for line in trapped)
    assert status["counters"]["calendar_trap"] == len(trapped)


@pytest.mark.timeout(150)
def test_a_calendar_trap_stays_within_the_host_page_cap(start_testweb, start_node) -> None:
    cap = 40
    web = start_testweb(hosts=2, pages=10, seed=5, extra_args=["--cross-link-prob", "0", "--images", "2"],
                        profile={"site-0.test": {"trap": True}, "site-1.test": {"redirect_trap": True}})
    node = start_node("capped", proxy=web.url, seeds=["http://site-0.test/", "http://site-1.test/"],
                      default_scope=True, extra_args=["--max-pages-per-host", str(cap)])
    status = node.wait_idle(timeout_s=90)
    served = web.stats()["urls"]

    # The calendar: testweb served no more of the host than the cap (robots.txt aside), and
    # the calendar got some of it: the trap was entered, then stopped.
    host_urls = {url: n for url, n in served.items()
                 if url.startswith("http://site-0.test/") and not url.endswith("/robots.txt")}
    calendar = [url for url in host_urls if "/calendar/" in url]
    assert f"http://site-0.test{TRAP_ENTRY}" in calendar
    assert len(host_urls) <= cap and len(calendar) < cap
    assert all(n == 1 for n in host_urls.values())
    capped = unfetched(node.data_dir)["host_page_cap"]
    assert capped and all(line["host"] == "site-0.test" and "/calendar/" in line["url"] for line in capped)
    assert not {line["url"] for line in capped} & set(served)  # never fetched
    assert status["counters"]["host_page_cap"] == len(capped)
    # The count is on disk, with the host's row.
    with sqlite3.connect(f"file:{node.data_dir / 'frontier.sqlite3'}?mode=ro", uri=True) as db:
        [(accepted,)] = db.execute("SELECT accepted FROM hosts WHERE host = 'site-0.test'").fetchall()
    assert accepted == cap

    # The redirect trap, /trap/redirect/x answering 302 to one /x more each time, ends at the
    # repeated-segment guard (3 repeats by default): testweb served the hops with 1 to 3 x.
    trap = sorted(url for url in served if url.startswith("http://site-1.test/trap/"))
    assert trap == [f"http://site-1.test/trap/redirect{'/x' * hops}" for hops in (1, 2, 3)]
    [repeated] = unfetched(node.data_dir)["repeated_segments"]
    assert repeated["url"] == "http://site-1.test/trap/redirect/x/x/x/x"
    assert repeated["via"] == "http://site-1.test/trap/redirect/x/x/x"
    assert status["counters"]["repeated_segments"] == 1


@pytest.mark.timeout(120)
def test_a_deny_pattern_keeps_its_urls_out(start_testweb, start_node) -> None:
    web = start_testweb(hosts=1, pages=40, seed=9, extra_args=["--images", "3"])
    denied_pattern = r"/p/[0-9]*[37]$|\.png$"
    node = start_node("denied", proxy=web.url, seeds=["http://site-0.test/"], default_scope=True,
                      extra_args=["--deny-url", denied_pattern])
    status = node.wait_idle(timeout_s=60)
    served = web.stats()["urls"]

    def is_denied(url: str) -> bool:
        return url.endswith((".png", "3", "7")) and ("/p/" in url or url.endswith(".png"))

    assert served and not [url for url in served if is_denied(url)]
    denied = unfetched(node.data_dir)["denied_url"]
    assert denied and all(is_denied(line["url"]) for line in denied)
    assert any(line["url"].endswith(".png") for line in denied)
    assert status["counters"]["denied_url"] == len(denied)
    # Everything else reachable without the denied pages was crawled.
    assert len(served) > 10


class _TrapSite(BaseHTTPRequestHandler):
    """A page whose links testweb has no such URLs for: too many query parameters, a path
    that repeats a segment, a path too deep, and one plain link."""

    requested: list[str] = []
    LINKS = ("/ok", "/list?" + "&".join(f"k{i}={i}" for i in range(11)), "/a/b/a/b/a/b/a",
             "/" + "/".join(str(i) for i in range(40)), "/fine?a=1&b=2")

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.requested.append(self.path)
        if self.path == "/robots.txt":
            body, kind = b"", "text/plain"
        else:
            body = "".join(f'<a href="{link}">x</a>' for link in self.LINKS).encode() if self.path == "/" else b"ok"
            kind = "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def trap_site():
    _TrapSite.requested = []
    with serving(_TrapSite, "trap-site") as server:
        yield server


@pytest.mark.timeout(120)
def test_query_parameter_and_path_guards_end_urls_with_their_outcomes(trap_site, start_node) -> None:
    origin = f"http://127.0.0.1:{trap_site.server_address[1]}"
    node = start_node("guarded", seeds=[f"{origin}/"], default_scope=True, extra_args=["--allow-private"])
    status = node.wait_idle(timeout_s=60)

    assert Counter(_TrapSite.requested) == Counter({"/robots.txt": 1, "/": 1, "/ok": 1, "/fine?a=1&b=2": 1})
    lines = unfetched(node.data_dir)
    assert [line["url"] for line in lines["too_many_query_params"]] == [origin + _TrapSite.LINKS[1]]
    assert [line["url"] for line in lines["repeated_segments"]] == [origin + "/a/b/a/b/a/b/a"]
    assert [line["url"] for line in lines["path_too_deep"]] == [origin + _TrapSite.LINKS[3]]
    for outcome in ("too_many_query_params", "repeated_segments", "path_too_deep"):
        [line] = lines[outcome]
        assert (line["via"], line["depth"], line["status"]) == (f"{origin}/", 1, None)
        assert status["counters"][outcome] == 1
