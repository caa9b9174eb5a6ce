"""What the parser sees, on a small real web (nginx over HTTPS, names from dnsmasq), audited
from nginx's own access log: a latin-1 page whose charset is only in the HTTP header gives
links that resolve, a sitemap index leads to every page that only sitemaps list (a plain and
a gzip sitemap), and a big page's links come from its first --max-parse-bytes, the cut
page marked in crawl.log."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
from conftest import read_crawl_log
from realweb import DOMAIN, Access, RealWeb, realweb  # noqa: F401  (the fixture)

from crawler_node.tools.node_process import NodeProcess

pytestmark = pytest.mark.tools  # nginx, dnsmasq

DEFAULT_PARSE_LIMIT = 5_000_000  # Settings.max_parse_bytes
LARGE_PARSE_LIMIT = 9_000_000  # more than the big page's ~8 MB (and under --max-body-bytes)


def run_crawl(realweb: RealWeb, data_dir, seeds: list[str], *extra: str) -> dict:  # noqa: F811
    """One node, no proxy, crawls ``seeds`` to idle; what nginx saw meanwhile, and crawl.log."""
    node = NodeProcess(node_id=data_dir.name, data_dir=data_dir, seeds=seeds, extra_args=[
        "--allow-private", "--ca-bundle", str(realweb.ca_file), "--dns-server", realweb.dns_server,
        "--allow-host", f"*.{DOMAIN}", *extra])
    before = len(realweb.accesses())
    with node:
        status = node.wait_idle(timeout_s=120)
    return {"status": status, "accesses": realweb.accesses()[before:],
            "log": read_crawl_log(node.data_dir, everything=True)}


@pytest.fixture(scope="module")
def crawl(realweb: RealWeb, tmp_path_factory) -> dict:  # noqa: F811
    """The default limits; the sitemap site is seeded with its index only (not its robots.txt's
    Sitemap: line, nor its home page), so every page of it is found through sitemaps."""
    seeds = [realweb.url("latin1"), realweb.url("big"), realweb.url("sitemap", "/sitemap_index.xml")]
    return run_crawl(realweb, tmp_path_factory.mktemp("parse") / "rw-parse", seeds)


@pytest.fixture(scope="module")
def large_limit_crawl(realweb: RealWeb, tmp_path_factory) -> dict:  # noqa: F811
    return run_crawl(realweb, tmp_path_factory.mktemp("parse-large") / "rw-parse-large", [realweb.url("big")],
                     "--max-parse-bytes", str(LARGE_PARSE_LIMIT))


def site_accesses(crawl: dict, realweb: RealWeb, site: str) -> list[Access]:  # noqa: F811
    address = realweb.address(site)
    return [access for access in crawl["accesses"] if access.server_addr == address]


def page_lines(crawl: dict, url: str) -> list[dict]:
    return [line for line in crawl["log"] if line["url"] == url]


def test_a_latin1_pages_links_resolve_when_its_charset_is_only_in_the_header(crawl, realweb) -> None:  # noqa: F811
    truth = realweb.expected("latin1")
    assert truth.wrong_decodings and "/caf%C3%A9.html" in truth.pages
    requests = [access for access in site_accesses(crawl, realweb, "latin1") if access.path != "/robots.txt"]
    asked = {access.uri for access in requests}
    assert not asked & truth.wrong_decodings, "the page was read as UTF-8: é became U+FFFD"
    assert asked == truth.pages  # /crème.html is linked from /café.html only: the chain held
    assert {access.status for access in requests} == {200}
    assert crawl["status"]["idle"]


# Where the header and the fallback disagree: Cyrillic in windows-1251 is not valid UTF-8, and
# read as windows-1252 (the fallback) it is other letters, so only the header (or the meta
# the header does not overrule) gives the link that exists.
CYRILLIC_PAGES = {
    # path: (Content-Type, the page's bytes)
    "/": ("text/html; charset=windows-1251",
          '<meta charset="koi8-r"><a href="/привет.html">привет</a> <a href="/meta.html">meta</a>'.encode("cp1251")),
    "/meta.html": ("text/html", '<meta charset="koi8-r"><a href="мир.html">мир</a>'.encode("koi8-r")),
    "/привет.html": ("text/html; charset=utf-8", "<p>привет</p>".encode()),
    "/мир.html": ("text/html; charset=utf-8", "<p>мир</p>".encode()),
}


class CyrillicSite:
    """A real HTTP server on loopback serving CYRILLIC_PAGES; it records every request line."""

    def __init__(self) -> None:
        pages = {quote(path): page for path, page in CYRILLIC_PAGES.items()}
        self.requests: list[tuple[str, int]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                content_type, body = pages.get(self.path, ("text/plain", b"not found"))
                status = 200 if self.path in pages else 404
                site.requests.append((self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, name="cyrillic-site", daemon=True)

    def __enter__(self) -> CyrillicSite:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def cyrillic_site() -> Iterator[CyrillicSite]:
    with CyrillicSite() as site:
        yield site


def test_the_header_charset_beats_the_meta_and_the_meta_beats_the_fallback(cyrillic_site, tmp_path) -> None:
    node = NodeProcess(node_id="rw-cyrillic", data_dir=tmp_path / "rw-cyrillic", seeds=[cyrillic_site.url],
                       extra_args=["--allow-private"])
    with node:
        assert node.wait_idle(timeout_s=60)["idle"]
    asked = {path for path, _status in cyrillic_site.requests if path != "/robots.txt"}
    assert asked == {quote(path) for path in CYRILLIC_PAGES}, sorted(asked)
    assert all(status == 200 for path, status in cyrillic_site.requests if path != "/robots.txt")


def test_every_sitemap_only_page_is_fetched_through_the_index(crawl, realweb) -> None:  # noqa: F811
    truth = realweb.expected("sitemap")
    requests = site_accesses(crawl, realweb, "sitemap")
    fetched = {access.uri for access in requests if access.status == 200}
    assert truth.sitemaps <= fetched  # the index, then the plain and the gzip sitemap it lists
    assert truth.sitemap_only and truth.sitemap_only <= fetched, sorted(truth.sitemap_only - fetched)
    assert truth.pages <= fetched  # and what those pages link to
    assert max(len([a for a in requests if a.uri == path]) for path in truth.sitemap_only) == 1
    # crawl.log: each sitemap file is a "sitemap", what it lists a page
    for path in truth.sitemaps:
        [line] = page_lines(crawl, realweb.url("sitemap", path))
        assert (line["kind"], line["status"]) == ("sitemap", 200)
    for path in truth.sitemap_only:
        [line] = page_lines(crawl, realweb.url("sitemap", path))
        assert line["kind"] == "page"


def test_a_sitemaps_urls_are_one_level_deeper_than_the_sitemap(realweb, tmp_path) -> None:  # noqa: F811
    # The index is depth 0, the sitemaps it lists 1, their pages 2: --max-depth 1 stops there.
    crawl = run_crawl(realweb, tmp_path / "rw-depth", [realweb.url("sitemap", "/sitemap_index.xml")],
                      "--max-depth", "1")
    fetched = {access.uri for access in site_accesses(crawl, realweb, "sitemap") if access.path != "/robots.txt"}
    assert fetched == realweb.expected("sitemap").sitemaps


def big_pages_fetched(crawl: dict, realweb: RealWeb) -> set[str]:  # noqa: F811
    return {access.uri for access in site_accesses(crawl, realweb, "big")
            if access.status == 200 and access.path != "/robots.txt"}


def test_the_default_limit_reads_links_from_the_first_five_megabytes_and_marks_the_cut(crawl, realweb) -> None:  # noqa: F811
    truth = realweb.expected("big")
    assert truth.late_links and truth.pages - truth.late_links - {"/"}
    fetched = big_pages_fetched(crawl, realweb)
    assert fetched == truth.pages - truth.late_links  # every link before the cut, none after it
    [home] = page_lines(crawl, realweb.url("big"))
    assert home["bytes"] > DEFAULT_PARSE_LIMIT and home["parse_truncated"] is True
    assert all(line["parse_truncated"] is False for line in crawl["log"] if line["url"] != home["url"])


def test_a_larger_max_parse_bytes_follows_the_links_past_five_megabytes(large_limit_crawl, realweb) -> None:  # noqa: F811
    truth = realweb.expected("big")
    assert big_pages_fetched(large_limit_crawl, realweb) == truth.pages
    [home] = page_lines(large_limit_crawl, realweb.url("big"))
    assert home["bytes"] > DEFAULT_PARSE_LIMIT and home["parse_truncated"] is False
