"""What the archive holds, read back with warcio: one response and one revisit for identical
bodies, encodings kept, a metadata record per parsed page, warcinfo naming the crawl; and a
recrawl's 304 revisit replays (pywb) as the page it stands for."""

from __future__ import annotations

import time
from collections import defaultdict
from http.client import HTTPConnection
from pathlib import Path

from conftest import read_crawl_log, roots
from replay_helpers import Wayback
from warcio.archiveiterator import ArchiveIterator

from crawler_node.store.cdxj import index_missing

HOSTS, PAGES = 2, 15


def read_records(data_dir: Path) -> list:
    records = []
    for path in sorted((Path(data_dir) / "warc").glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                raw = record.raw_stream.read()
                records.append((record.rec_type, record.rec_headers, record.http_headers, raw))
    return records


def test_identical_bodies_encodings_metadata_and_warcinfo(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=51,
                        profile={"site-0.test": {"duplicates": 2}, "site-1.test": {"gzip": True}})
    node = start_node(proxy=web.url, seeds=roots(HOSTS),
                      extra_args=["--crawl-name", "archive-test", "--operator", "ops@example.org"])
    node.wait_idle(timeout_s=120)
    assert node.stop(timeout_s=30) == 0
    records = read_records(node.data_dir)
    by_uri: dict[str, list] = defaultdict(list)
    for kind, headers, http, raw in records:
        by_uri[headers.get_header("WARC-Target-URI")].append((kind, headers, http, raw))

    # Each duplicate pair: one response, and one revisit that refers to it.
    for pair in range(2):
        a, b = (f"http://site-0.test/dup/{pair}/{side}" for side in "ab")
        kinds = sorted(kind for url in (a, b) for kind, *_ in by_uri[url] if kind in ("response", "revisit"))
        assert kinds == ["response", "revisit"], (pair, kinds)
        response = next(h for url in (a, b) for kind, h, _, _ in by_uri[url] if kind == "response")
        revisit = next(h for url in (a, b) for kind, h, _, _ in by_uri[url] if kind == "revisit")
        assert revisit.get_header("WARC-Refers-To") == response.get_header("WARC-Record-ID")
        assert revisit.get_header("WARC-Payload-Digest") == response.get_header("WARC-Payload-Digest")

    # gzip as the server sent it: the header kept, the payload still gzip.
    html = [(http, raw) for url, recs in by_uri.items() if url and url.startswith("http://site-1.test/p/")
            for kind, _, http, raw in recs if kind == "response" and http.get_statuscode() == "200"]
    assert html and all(http.get_header("Content-Encoding") == "gzip" and raw[:2] == b"\x1f\x8b" for http, raw in html)

    # A metadata record beside each parsed HTML page, listing what the page links to.
    log = {line["url"]: line for line in read_crawl_log(node.data_dir)}
    pages = [url for url, line in log.items() if line["status"] == 200 and line["content_type"] == "text/html"]
    for url in pages:
        metadata = [raw for kind, _, _, raw in by_uri[url] if kind == "metadata"]
        assert len(metadata) == 1, url
        fields = [line.split(": ", 1) for line in metadata[0].decode().splitlines() if line]
        assert ["hopsFromSeed", "L" * log[url]["depth"]] in fields
        if log[url]["via"]:
            assert ["via", log[url]["via"]] in fields
        assert any(name == "outlink" for name, _ in fields), url

    infos = [raw.decode() for kind, _, _, raw in records if kind == "warcinfo"]
    assert infos and all("isPartOf: archive-test" in info and "operator: ops@example.org" in info for info in infos)


def test_a_recrawled_page_replays_from_its_first_capture(start_testweb, start_node, tmp_path):
    web = start_testweb(hosts=1, pages=8, seed=52)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(1), extra_args=["--recrawl-after", "2s"])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        second = {line["url"] for line in read_crawl_log(node.data_dir) if line["visit"] == 1}
        if expected <= second:
            break
        time.sleep(0.1)
    assert expected <= second
    assert node.stop(timeout_s=30) == 0
    page = "http://site-0.test/p/1"
    captures = [line for line in read_crawl_log(node.data_dir) if line["url"] == page]
    assert [line["status"] for line in captures][:2] == [200, 304]
    first = captures[0]["fetched_at"].replace("-", "").replace(":", "").replace("T", "")[:14]

    warc_dir = Path(node.data_dir) / "warc"
    index_missing(warc_dir)
    with Wayback(warc_dir, work_dir=tmp_path / "wayback") as wayback:
        status, headers, body = wayback.replay(page, at=first)
        latest_status, _, latest_body = wayback.replay(page)
    assert status == 200, (status, headers)
    assert body == _direct(web.url, page)
    # The recrawl's server-not-modified revisit keeps the 304 the server sent; pywb replays a
    # 3xx revisit as it is, without a body (the page is the capture before it).
    assert (latest_status, latest_body) == (304, b"")


def _direct(proxy: str, url: str) -> bytes:
    """The page as testweb serves it now (testweb is an HTTP proxy for its sites)."""
    host, port = proxy.removeprefix("http://").rstrip("/").split(":")
    connection = HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", url, headers={"Host": url.split("/")[2]})
        return connection.getresponse().read()
    finally:
        connection.close()
