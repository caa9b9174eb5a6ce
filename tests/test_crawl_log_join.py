"""crawl.log joins the archive: each line names its WARC record, and says where the URL came
from; URLs the scope leaves out get a line of their own."""

from __future__ import annotations

import io
import urllib.request
from pathlib import Path

from conftest import read_crawl_log
from warcio.archiveiterator import ArchiveIterator

HOSTS, PAGES = 4, 30


def test_every_line_leads_to_its_record_and_names_its_referrer(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=31)
    node = start_node(proxy=web.url, seeds=["http://site-0.test/", "http://site-1.test/"],
                      extra_args=["--allow-host", "site-0.test", "--allow-host", "site-1.test",
                                  "--warc-max-bytes", "40000"])
    node.wait_idle(timeout_s=120)
    lines = read_crawl_log(node.data_dir, everything=True)
    fetched = [line for line in lines if line["status"] is not None]
    warc = Path(node.data_dir) / "warc"
    assert len({line["warc_file"] for line in fetched}) > 1  # the join holds across files
    for line in fetched:
        with open(warc / line["warc_file"], "rb") as handle:
            handle.seek(line["warc_offset"])
            member = handle.read(line["warc_length"])
        (record,) = list(ArchiveIterator(io.BytesIO(member)))
        assert record.rec_type == line["warc_type"]
        assert record.rec_headers.get_header("WARC-Target-URI") == line["url"]
        assert int(record.http_headers.get_statuscode()) == line["status"]
        assert record.rec_headers.get_header("WARC-Payload-Digest") == line["digest"]
    pages = [line for line in fetched if line["kind"] == "page"]
    urls = {line["url"] for line in pages}
    assert urls == {url for url in web.expected() if url.startswith(("http://site-0.test/", "http://site-1.test/"))}
    seeds = {"http://site-0.test/", "http://site-1.test/"}
    for line in pages:
        if line["url"] in seeds:
            assert (line["via"], line["depth"]) == (None, 0)
        else:
            assert line["via"] in urls and line["depth"] >= 1, line  # found on a page of this crawl
    assert all(line["content_type"] for line in pages)
    # The links to the other two hosts: one line each, never fetched, naming the page they were on.
    outside = [line for line in lines if line["outcome"] == "out_of_scope"]
    assert outside and {line["host"] for line in outside} <= {"site-2.test", "site-3.test"}
    assert len({line["url"] for line in outside}) == len(outside)
    assert all(line["via"] in urls and line["status"] is None and line["warc_file"] is None for line in outside)
    hits = web.stats()["urls"]
    assert not any(url.startswith(("http://site-2.test/", "http://site-3.test/")) for url in hits)
    assert node.status()["counters"]["out_of_scope"] == len(outside)
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{node.url}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    assert f'crawler_urls_turned_away_total{{reason="out_of_scope"}} {float(len(outside))}' in metrics
    # Stopped, the node has indexed each of its WARC files (CDXJ beside it), the open one too.
    assert node.stop(timeout_s=30) == 0
    files = sorted(warc.glob("*.warc.gz"))
    assert files and all(path.with_name(path.name.removesuffix(".warc.gz") + ".cdxj").stat().st_size > 0
                         for path in files)
