"""Cookies in a real node against a real server: what the server was sent back after it set
one (--cookies on, the default), what it never sees with --cookies off, what the WARC request
records say was sent, and how many cookies a site that sets hundreds gets back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import read_crawl_log
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
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CookieSite)
    thread = threading.Thread(target=server.serve_forever, name="cookie-site", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


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

