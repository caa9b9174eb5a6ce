"""Cookies in a real node against a real server: what the server was sent back after it set
one (--cookies on, the default), what it never sees with --cookies off, what the WARC request
records say was sent, how many cookies a site that sets hundreds gets back, and the pages
behind a cookie check (a redirect to itself, or back from the page that set the cookie),
fetched once more with the cookie instead of dropped as already seen."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cluster_helpers import get_json
from conftest import read_crawl_log
from site_helpers import serving
from warcio.archiveiterator import ArchiveIterator

SESSION = "dGVzdA==/x"  # a base64 session id: "=" and "/" reach the server as they were set
FLOOD_PAGES, FLOOD_PER_PAGE = 5, 60  # a site that sets 300 cookies on one host


class _CookieSite(BaseHTTPRequestHandler):
    """/ sets a session cookie and links to /account; /account links to /flood/0, and each
    /flood/N sets FLOOD_PER_PAGE new cookies and links to the next. Every request's Cookie
    header is recorded, as received."""

    seen: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        with self.lock:
            self.seen.append((self.path, self.headers.get("Cookie")))
        cookies: list[str] = []
        if self.path == "/robots.txt":
            body = b"User-agent: *\nAllow: /\n"
            kind = "text/plain"
        else:
            kind = "text/html"
            if self.path == "/":
                cookies, links = [f"session={SESSION}; Path=/", "scoped=1; Path=/elsewhere"], ["/account"]
            elif self.path == "/account":
                links = ["/flood/0"]
            elif self.path.startswith("/flood/"):
                n = int(self.path.rsplit("/", 1)[1])
                cookies = [f"f{n}_{i}={'v' * 20}; Path=/" for i in range(FLOOD_PER_PAGE)]
                links = [f"/flood/{n + 1}"] if n + 1 < FLOOD_PAGES else ["/end"]
            else:
                links = []
            body = "".join(f'<a href="{link}">{link}</a>' for link in links).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def cookie_site() -> Iterator[ThreadingHTTPServer]:
    _CookieSite.seen = []
    with serving(_CookieSite, "cookie-site") as server:
        yield server


def sent(path: str) -> list[str | None]:
    """The Cookie headers the site received with requests for `path`, in order."""
    return [cookie for seen_path, cookie in _CookieSite.seen if seen_path == path]


def cookie_names(header: str | None) -> list[str]:
    return [pair.split("=", 1)[0].strip() for pair in header.split(";")] if header else []


def warc_request_cookies(data_dir: Path) -> dict[str, str | None]:
    """Each WARC request record's Cookie header, by target URI."""
    found: dict[str, str | None] = {}
    for path in sorted(data_dir.glob("**/*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "request":
                    found[record.rec_headers.get_header("WARC-Target-URI")] = record.http_headers.get_header("Cookie")
    return found


def crawl(start_node, site: ThreadingHTTPServer, node_id: str, *extra: str):
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    node = start_node(node_id, seeds=[f"{origin}/"], default_scope=True,
                      extra_args=["--allow-private", "--pace", "adaptive", *extra])
    node.wait_idle(timeout_s=60)
    fetched = {line["url"] for line in read_crawl_log(node.data_dir)}
    return origin, node, fetched


@pytest.mark.timeout(120)
def test_a_cookie_a_site_sets_goes_back_to_it_as_it_was_set_and_into_the_warc_request(cookie_site, start_node):
    origin, node, fetched = crawl(start_node, cookie_site, "cookies-on")
    assert fetched == {f"{origin}/", f"{origin}/account", *(f"{origin}/flood/{n}" for n in range(FLOOD_PAGES)),
                       f"{origin}/end"}

    assert sent("/robots.txt") == [None] and sent("/") == [None]  # nothing before the site set it
    # Sent back byte for byte (aiohttp's default would have sent "dGVzdA==/x" in quotes), and
    # a cookie for another path is not sent here.
    assert sent("/account") == [f"session={SESSION}"]
    # The archive says what was sent: the request record carries the header the server got.
    requests = warc_request_cookies(node.data_dir)
    assert requests[f"{origin}/account"] == f"session={SESSION}"
    assert requests[f"{origin}/"] is None


@pytest.mark.timeout(120)
def test_a_site_that_sets_hundreds_of_cookies_gets_a_bounded_cookie_header_back(cookie_site, start_node):
    origin, node, fetched = crawl(start_node, cookie_site, "cookie-flood")
    assert f"{origin}/end" in fetched
    [header] = sent("/end")
    names = cookie_names(header)
    # 301 cookies set on one host: the jar keeps at most 180 of a domain (the rest evicted) and
    # a request sends at most 150 of them, within 8,190 bytes.
    set_names = {"session"} | {f"f{n}_{i}" for n in range(FLOOD_PAGES) for i in range(FLOOD_PER_PAGE)}
    assert 100 <= len(names) <= 150 and len(header) <= 8190, (len(names), len(header))
    assert len(set(names)) == len(names) and set(names) <= set_names
    assert "Traceback" not in node.log_tail()


@pytest.mark.timeout(120)
def test_with_cookies_off_no_request_carries_a_cookie_and_the_crawl_is_the_same(cookie_site, start_node):
    origin, node, fetched = crawl(start_node, cookie_site, "cookies-off", "--cookies", "off")
    assert f"{origin}/end" in fetched and f"{origin}/account" in fetched
    assert _CookieSite.seen and all(cookie is None for _, cookie in _CookieSite.seen), _CookieSite.seen
    assert all(cookie is None for cookie in warc_request_cookies(node.data_dir).values())



class _CookieCheckSite(BaseHTTPRequestHandler):
    """Three cookie checks, as sites do them:
    /self     sets `self=1` and redirects to itself; with the cookie, a page linking /self-ok;
    /asp      sets `asp=1` and redirects to /asp?check=1, which redirects back to /asp (ASP.NET's
              cookie detection); with the cookie, /asp is a page linking /asp-ok;
    /always   redirects to itself and sets a new cookie every time (never a page);
    /loop     redirects to itself and sets no cookie (a request again would change nothing)."""

    seen: list[tuple[str, str | None]] = []
    lock = threading.Lock()
    always = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        cookie = self.headers.get("Cookie") or ""
        with self.lock:
            self.seen.append((self.path, cookie or None))
        if self.path == "/self" and "self=1" not in cookie:
            self._answer(302, location="/self", cookies=["self=1; Path=/"])
        elif self.path == "/self":
            self._answer(200, body='<a href="/self-ok">ok</a>')
        elif self.path == "/asp" and "asp=1" not in cookie:
            self._answer(302, location="/asp?check=1", cookies=["asp=1; Path=/"])
        elif self.path == "/asp?check=1":
            self._answer(302, location="/asp")
        elif self.path == "/asp":
            self._answer(200, body='<a href="/asp-ok">ok</a>')
        elif self.path == "/always":
            with self.lock:
                _CookieCheckSite.always += 1
                n = _CookieCheckSite.always
            self._answer(302, location="/always", cookies=[f"n{n}={n}; Path=/"])
        elif self.path == "/loop":
            self._answer(302, location="/loop")
        elif self.path == "/robots.txt":
            self._answer(404)
        else:
            self._answer(200, body="<p>end</p>")

    def _answer(self, status: int, *, location: str | None = None, cookies: tuple[str, ...] | list[str] = (),
                body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        if location:
            self.send_header("Location", location)
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def cookie_check_site() -> Iterator[ThreadingHTTPServer]:
    _CookieCheckSite.seen, _CookieCheckSite.always = [], 0
    with serving(_CookieCheckSite, "cookie-check-site") as server:
        yield server


def check_crawl(start_node, site: ThreadingHTTPServer, node_id: str, *extra: str):
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    node = start_node(node_id, seeds=[f"{origin}/{path}" for path in ("self", "asp", "always", "loop")],
                      default_scope=True,
                      extra_args=["--allow-private", "--pace", "adaptive", *extra])
    status = node.wait_idle(timeout_s=60)
    return origin, node, status, read_crawl_log(node.data_dir)


def carries(header: str | None, cookie: str) -> bool:
    return cookie in (header or "").split("; ")


def requests_for(path: str) -> list[str | None]:
    return [cookie for seen_path, cookie in _CookieCheckSite.seen if seen_path == path]


def warc_responses(data_dir: Path) -> list[tuple[str, str]]:
    """(target URI, status) of each WARC response record, in order."""
    found = []
    for path in sorted(data_dir.glob("**/*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "response":
                    found.append((record.rec_headers.get_header("WARC-Target-URI"),
                                  record.http_headers.get_statuscode()))
    return found


@pytest.mark.timeout(120)
def test_a_page_behind_a_cookie_check_is_fetched_again_with_the_cookie_and_archived(cookie_check_site, start_node):
    origin, node, status, lines = check_crawl(start_node, cookie_check_site, "cookie-checks")

    # (The three checks share a host, so a request may carry the others' cookies too.)
    # A redirect to itself: asked again, with the cookie, and then it is a page with links.
    assert [carries(cookie, "self=1") for cookie in requests_for("/self")] == [False, True]
    assert [line["status"] for line in lines if line["url"] == f"{origin}/self"] == [302, 200]
    assert [carries(cookie, "self=1") for cookie in requests_for("/self-ok")] == [True]
    # Back to the page that set the cookie, through another URL: that page once more.
    assert [carries(cookie, "asp=1") for cookie in requests_for("/asp")] == [False, True]
    assert [carries(cookie, "asp=1") for cookie in requests_for("/asp?check=1")] == [True]
    assert len(requests_for("/asp-ok")) == 1
    responses = warc_responses(node.data_dir)
    assert [code for uri, code in responses if uri == f"{origin}/asp"] == ["302", "200"]
    # A site that always sends it back, with a new cookie each time: three requests, not more.
    assert len(requests_for("/always")) == 3
    assert [line["status"] for line in lines if line["url"] == f"{origin}/always"] == [302, 302, 302]
    assert len(requests_for("/loop")) == 1  # it set no cookie: asked once
    assert status["counters"]["cookie_refetches"] == 1 + 1 + 2
    assert get_json(f"{node.url}/v1/status")["counters"]["cookie_refetches"] == 4
    with urllib.request.urlopen(f"{node.url}/metrics", timeout=10) as answer:
        assert "crawler_cookie_refetches_total 4.0" in answer.read().decode()


@pytest.mark.timeout(120)
def test_with_cookies_off_a_cookie_check_is_not_followed_back(cookie_check_site, start_node):
    origin, node, status, lines = check_crawl(start_node, cookie_check_site, "no-cookie-checks", "--cookies", "off")
    assert requests_for("/self") == [None] and requests_for("/always") == [None] and requests_for("/loop") == [None]
    assert requests_for("/asp") == [None] and requests_for("/asp?check=1") == [None]
    assert not requests_for("/self-ok") and not requests_for("/asp-ok")
    assert status["counters"]["cookie_refetches"] == 0
