"""--min-host-delay-s paces every host as a Crawl-delay would, whatever its robots.txt says:
one request at a time, spaced from the end of the last, robots.txt included (Heritrix's kind of
politeness, for sites a crawl has no permission to press)."""

from __future__ import annotations

from conftest import read_crawl_log, roots

DELAY = 0.4


def test_every_host_is_paced_at_least_the_minimum_delay(start_testweb, start_node):
    web = start_testweb(hosts=2, pages=6, seed=91)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(2), extra_args=["--min-host-delay-s", str(DELAY)])
    node.wait_idle(timeout_s=90)
    assert {line["url"] for line in read_crawl_log(node.data_dir)} == expected
    hosts = web.stats()["hosts"]
    for host in ("site-0.test", "site-1.test"):
        assert hosts[host]["peak_concurrency"] == 1, hosts[host]
        assert hosts[host]["min_gap_s"] >= DELAY, hosts[host]


def test_the_default_pace_is_polite_one_request_at_a_time_a_second_apart(start_testweb, start_node):
    """No pace given (the tests' nodes otherwise go at the adaptive pace): what a crawl of
    sites that gave no permission gets."""
    web = start_testweb(hosts=2, pages=4, seed=92)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(2), pace=None)
    node.wait_idle(timeout_s=90)
    assert {line["url"] for line in read_crawl_log(node.data_dir)} == expected
    hosts = web.stats()["hosts"]
    for host in ("site-0.test", "site-1.test"):
        assert hosts[host]["requests"] >= 3, hosts[host]  # robots.txt and at least two pages
        assert hosts[host]["peak_concurrency"] == 1, hosts[host]
        assert hosts[host]["min_gap_s"] >= 1.0, hosts[host]
