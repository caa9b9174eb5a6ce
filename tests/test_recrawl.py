"""Recrawl: fetched URLs come back when due, asked with their validators; an unchanged page
costs a 304 and a revisit record, a changed one is stored in full."""

from __future__ import annotations

import time

import pytest
from conftest import read_crawl_log, roots

from crawler_node.core.recrawl_policy import RecrawlPolicy, parse_duration

HOSTS, PAGES = 3, 30


def test_durations_and_per_host_overrides() -> None:
    assert [parse_duration(text) for text in ("90", "90s", "15m", "6h", "1d", "2w", "1h30m", "0.5s")] == [
        90, 90, 900, 21_600, 86_400, 1_209_600, 5_400, 0.5]
    assert parse_duration("never") is None
    for bad in ("", "5x", "h", "-1s", "0s", "1h 30"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    policy = RecrawlPolicy.from_specs("1d", ["*.news.test=1h", "static.test=never", "local:8080=5m"])
    assert policy.after("a.news.test") == 3600 and policy.after("static.test") is None
    assert policy.after("local:8080") == 300 and policy.after("other.test:81") == 86_400
    assert not RecrawlPolicy.from_specs(None, []).enabled and RecrawlPolicy.from_specs(None, ["x=1h"]).enabled


def visits(data_dir, visit: int) -> dict[str, dict]:
    return {line["url"]: line for line in read_crawl_log(data_dir) if line["visit"] == visit}


def wait_for_visit(node, expected: set[str], visit: int, timeout_s: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = visits(node.data_dir, visit)
        if expected <= set(lines):
            return lines
        time.sleep(0.1)
    raise TimeoutError(f"visit {visit} never covered the crawl: {sorted(expected - set(lines))[:5]}")


def test_an_unchanged_web_answers_the_recrawl_with_304s(start_testweb, start_node):
    # site-0's pages change between visits; the other hosts' never do.
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=41, profile={"site-0.test": {"changing": 0.3}})
    expected = set(web.expected())
    changing = set(web.changing())
    assert changing and {url.split("/")[2] for url in changing} == {"site-0.test"}
    node = start_node(proxy=web.url, seeds=roots(HOSTS), extra_args=["--recrawl-after", "6s"])
    first = wait_for_visit(node, expected, 0, 60)
    first_bytes = web.stats()["hosts"]
    web.reset()
    second = wait_for_visit(node, expected, 1, 60)
    second_bytes = web.stats()["hosts"]

    # An unchanged host's second pass: 304s, and at most 5% of the first pass's body bytes.
    for host in ("site-1.test", "site-2.test"):
        assert second_bytes[host]["body_bytes"] <= 0.05 * first_bytes[host]["body_bytes"], host
        assert second_bytes[host]["not_modified"] > 0
    validated = {url for url, line in first.items() if line["status"] == 200}
    for url in validated - changing:
        assert (second[url]["status"], second[url]["outcome"], second[url]["warc_type"]) == (
            304, "not_modified", "revisit"), second[url]
    # A page that changed is stored in full, under its new digest.
    for url in changing:
        assert (second[url]["status"], second[url]["warc_type"]) == (200, "response")
        assert second[url]["digest"] != first[url]["digest"]
    status = node.status()
    assert status["counters"]["recrawl_queued"] >= len(expected)
    assert status["frontier"]["recrawl_scheduled"] > 0
