"""One real node crawling a real testweb: coverage, exactly-once, politeness, WARC fidelity."""

from __future__ import annotations

import gzip
import time
import urllib.request
from datetime import datetime

import pytest
from conftest import read_crawl_log, roots
from warcio.archiveiterator import ArchiveIterator

HOSTS, PAGES = 20, 50
CEILING = 4
CRAWL_DELAY = 0.2
PROFILE = {
    # robots.txt with Disallow rules and a Crawl-delay on one host
    "site-1.test": {"robots": f"User-agent: *\nDisallow: /p/1\nDisallow: /p/2\nCrawl-delay: {CRAWL_DELAY}\n"},
    # a little latency elsewhere so concurrency actually builds up
    "site-[2-9].test": {"latency_ms": 20},
}


@pytest.fixture(scope="module")
def finished_crawl(tmp_path_factory):
    """Crawl a 20-host x 50-page testweb to idle once; the tests below audit the result."""
    from crawler_node.testweb.process import TestwebProcess
    from crawler_node.tools.node_process import NodeProcess

    tmp = tmp_path_factory.mktemp("crawl")
    started = time.time()
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=7, profile=PROFILE, tmp_dir=tmp) as web:
        node = NodeProcess(node_id="node-1", data_dir=tmp / "node-1", proxy=web.url, seeds=roots(HOSTS),
                           extra_args=["--host-limit-ceiling", str(CEILING), "--host-limit-start", "2"])
        with node:
            status = node.wait_idle(timeout_s=180)
            idle_seen = time.time()
            metrics = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{node.url}/metrics").read()
            yield {
                "web": web,
                "node": node,
                "status": status,
                "metrics": metrics.decode(),
                "expected": set(web.expected()),
                "stats": web.stats(),
                "log": read_crawl_log(node.data_dir),
                "started": started,
                "idle_seen": idle_seen,
            }


def test_crawl_log_covers_exactly_the_expected_urls(finished_crawl):
    logged = {line["url"] for line in finished_crawl["log"]}
    expected = finished_crawl["expected"]
    assert logged - expected == set(), "fetched URLs that are not part of the synthetic web"
    assert expected - logged == set(), "expected URLs never fetched"


def test_every_url_fetched_exactly_once(finished_crawl):
    counts = finished_crawl["stats"]["urls"]
    repeated = {url: n for url, n in counts.items() if n != 1 and not url.endswith("/robots.txt")}
    assert repeated == {}
    assert len(finished_crawl["log"]) == len(finished_crawl["expected"])


def test_per_host_concurrency_never_exceeds_the_ceiling(finished_crawl):
    peaks = {host: h["peak_concurrency"] for host, h in finished_crawl["stats"]["hosts"].items()}
    assert max(peaks.values()) <= CEILING, peaks
    # and the limiter did open up beyond one request at a time on the latency hosts
    assert max(peaks.values()) >= 2


def test_robots_txt_is_obeyed(finished_crawl):
    stats = finished_crawl["stats"]
    assert stats["urls"].get("http://site-1.test/p/1", 0) == 0
    assert stats["urls"].get("http://site-1.test/p/2", 0) == 0
    # Crawl-delay is honoured between any two requests to the host, robots.txt included
    assert stats["hosts"]["site-1.test"]["min_gap_s"] >= CRAWL_DELAY
    assert stats["hosts"]["site-1.test"]["peak_concurrency"] == 1
    assert finished_crawl["status"]["counters"]["robots_disallowed"] >= 1


def test_warc_has_a_response_for_every_2xx_with_the_served_body(finished_crawl):
    node = finished_crawl["node"]
    responses: dict[str, bytes] = {}
    requests = 0
    for path in sorted((node.data_dir / "warc").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "response":
                    responses[record.rec_headers.get_header("WARC-Target-URI")] = record.content_stream().read()
                elif record.rec_type == "request":
                    requests += 1
    ok_urls = [line["url"] for line in finished_crawl["log"] if 200 <= (line["status"] or 0) < 300]
    assert ok_urls and set(ok_urls) <= set(responses)
    assert requests >= len(ok_urls)
    # bodies are byte-identical to what testweb serves for the URL (testweb pages are deterministic)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": finished_crawl["web"].url}))
    for url in ok_urls[:: max(1, len(ok_urls) // 40)]:
        with opener.open(url) as response:
            served = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                served = gzip.decompress(served)
        assert responses[url] == served, url


def test_crawl_log_lines_have_the_documented_fields(finished_crawl):
    fields = {"url", "host", "status", "outcome", "bytes", "node", "attempt", "fetched_at"}
    for line in finished_crawl["log"]:
        assert fields <= line.keys()
        assert line["node"] == "node-1"


def test_status_and_metrics_report_pressure(finished_crawl):
    status = finished_crawl["status"]
    assert status["idle"] is True
    assert status["counters"]["fetched"] == len(finished_crawl["log"])
    for stage in ("inbound", "frontier", "fetch", "parse", "store"):
        assert {"depth", "oldest_age_s"} <= status["queues"][stage].keys()
    metrics = finished_crawl["metrics"]
    for name in ("crawler_queue_depth", "crawler_queue_oldest_age_seconds", "crawler_host_in_flight",
                 "crawler_host_limit", "crawler_fetch_outcomes_total", "crawler_blocked_enqueues_total"):
        assert name in metrics


def test_status_and_metrics_say_when_the_crawl_ended(finished_crawl):
    # The last commit came after the last fetch began and before the node was seen idle:
    # a benchmark times a crawl to it, an operator alerts on it standing still.
    last_stored = finished_crawl["status"]["last_stored_at"]
    last_fetch_started = max(datetime.fromisoformat(line["fetched_at"]).timestamp()
                             for line in finished_crawl["log"])
    # (crawl.log's times are rounded to the millisecond)
    assert finished_crawl["started"] < last_fetch_started - 0.001 < last_stored <= finished_crawl["idle_seen"]
    gauge = next(line for line in finished_crawl["metrics"].splitlines()
                 if line.startswith("crawler_last_stored_timestamp_seconds "))
    assert float(gauge.split()[1]) == pytest.approx(last_stored)


def test_throttling_host_gets_its_own_limit_cut_and_the_crawl_completes(start_testweb, start_node):
    profile = {"site-0.test": {"max_concurrency": 2, "latency_ms": 100, "retry_after_s": 0}}
    web = start_testweb(hosts=6, pages=40, seed=3, profile=profile)
    node = start_node(proxy=web.url, seeds=roots(6),
                      extra_args=["--host-limit-start", "6", "--host-limit-ceiling", "8", "--retry-base-s", "0.05"])
    status = node.wait_idle(timeout_s=120)
    stats = web.stats()
    logged = {line["url"] for line in read_crawl_log(node.data_dir)}
    assert set(web.expected()) <= logged
    hosts = {h["host"]: h for h in status["hosts"]}
    assert stats["hosts"]["site-0.test"]["throttled"] > 0
    assert hosts["site-0.test"]["limit_decreases"] >= 1
    # the 429s of site-0 cut nobody else's limit
    for name, host in hosts.items():
        if name != "site-0.test":
            assert host["limit_decreases"] == 0, host
            assert stats["hosts"][name]["throttled"] == 0


def test_private_addresses_are_refused_without_a_proxy(start_testweb, start_node):
    web = start_testweb(hosts=1, pages=3)
    node = start_node(seeds=[f"{web.url}/"])  # direct fetch of a loopback address
    node.wait_idle(timeout_s=60)
    lines = read_crawl_log(node.data_dir)
    assert [line["outcome"] for line in lines] == ["not_allowed"]
    assert web.stats()["hosts"] == {} or all(h["requests"] == 0 for h in web.stats()["hosts"].values())


def test_robots_txt_exchanges_are_archived_and_disallowed_urls_have_their_own_line(finished_crawl):
    node = finished_crawl["node"]
    everything = read_crawl_log(node.data_dir, everything=True)
    robots_lines = [line for line in everything if line["kind"] == "robots"]
    # one robots.txt per host, each archived as Heritrix does (request + response records)
    assert sorted(line["url"] for line in robots_lines) == sorted(f"{root}robots.txt" for root in roots(HOSTS))
    archived = set()
    for path in sorted((node.data_dir / "warc").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "response":
                    archived.add(record.rec_headers.get_header("WARC-Target-URI"))
    assert {line["url"] for line in robots_lines} <= archived
    # the URLs robots.txt kept out: never requested (testweb saw none), each logged once with why
    disallowed = [line for line in everything if line["outcome"] == "robots_disallowed"]
    stats = finished_crawl["stats"]["urls"]
    assert disallowed and all(line["url"].startswith(("http://site-1.test/p/1", "http://site-1.test/p/2"))
                              for line in disallowed)
    assert all(stats.get(line["url"], 0) == 0 and line["status"] is None and line["error"] for line in disallowed)
    assert len({line["url"] for line in disallowed}) == len(disallowed)
