"""A killed node loses no queued URL; a stopped node hands unfinished work back cleanly."""

from __future__ import annotations

import os
import signal
import time
from urllib.parse import urlsplit

import psutil
import pytest
from conftest import read_crawl_log, roots, wait_until

from crawler_node.testweb.graph import SyntheticWeb

HOSTS, PAGES = 10, 60
PROFILE = {"site-*.test": {"latency_ms": 40}}  # slow enough to stop the crawl half-way


def wait_for_lines(node, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(read_crawl_log(node.data_dir)) >= count:
            return
        time.sleep(0.05)
    raise TimeoutError(f"crawl.log never reached {count} lines")


# "parked": 3 hosts with work in memory, the others on disk, turns of 0.3 s (--active-hosts):
# what waits on disk at the kill is there after it, and the turns go on from the restart.
@pytest.mark.parametrize("active", [(), ("--active-hosts", "3", "--host-turn-s", "0.3")], ids=["all", "parked"])
def test_sigkill_half_way_then_restart_completes_without_loss(start_testweb, start_node, tmp_path, active):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=11, profile=PROFILE)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS), extra_args=list(active))
    wait_for_lines(node, len(expected) // 2)
    node_parked_before_kill = node.status()["frontier"]
    workers = psutil.Process(node.pid).children()
    assert len(workers) >= 2  # the parser and the store
    # CPU workers yield to the event loop that paces them (worker_nice, 10 by default).
    assert {w.nice() for w in workers} == {min(19, psutil.Process(node.pid).nice() + 10)}
    node.kill()
    assert node.proc.returncode == -signal.SIGKILL
    # Their input closed with the node: no worker outlives it (and holds the data dir).
    wait_until(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers),
               10, "the killed node's workers to exit")
    if active:
        assert node_parked_before_kill["parked_queued"] > 0, "the test meant hosts waiting on disk at the kill"
    restarted = start_node(proxy=web.url, data_dir=node.data_dir, extra_args=list(active))  # resumes its frontier
    restarted.wait_idle(timeout_s=120)
    logged = {line["url"] for line in read_crawl_log(restarted.data_dir)}
    assert expected - logged == set(), "URLs lost across SIGKILL"
    counts = web.stats()["urls"]
    assert max(n for url, n in counts.items() if not url.endswith("/robots.txt")) <= 2


def test_sigterm_returns_unfinished_work_and_exits_zero(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=12, profile=PROFILE)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS))
    wait_for_lines(node, len(expected) // 3)
    assert node.stop(timeout_s=30) == 0
    restarted = start_node(proxy=web.url, data_dir=node.data_dir)
    restarted.wait_idle(timeout_s=120)
    logged = [line["url"] for line in read_crawl_log(restarted.data_dir)]
    assert set(logged) == expected
    counts = web.stats()["urls"]
    # a graceful stop finishes or hands back every lease: nothing is fetched twice
    assert {url: n for url, n in counts.items() if n > 1 and not url.endswith("/robots.txt")} == {}


def test_a_killed_parser_is_replaced_and_no_link_is_lost(start_testweb, start_node):
    # The parser is the process a hostile page or the OOM killer takes down. Its pages are
    # parsed again (one by one, on a worker of their own) and the crawl misses nothing.
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=13, profile=PROFILE)
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS),
                      env={**os.environ, "CRAWLER_TEST_PARSE_DELAY_S": "0.002"})  # a test hook (config.TestHooks)
    wait_for_lines(node, len(expected) // 4)
    parsers = [p for p in psutil.Process(node.pid).children() if "parse-0" in " ".join(p.cmdline())]
    assert len(parsers) == 1
    parsers[0].kill()
    node.wait_idle(timeout_s=120)
    counters = node.status()["counters"]
    assert counters["parser_restarts"] == 1
    assert counters["parse_errors"] == 0  # no page was to blame
    logged = [line["url"] for line in read_crawl_log(node.data_dir)]
    assert set(logged) == expected
    assert len(logged) == len(set(logged))  # nothing fetched again: only parsed again
    replacement = [p for p in psutil.Process(node.pid).children() if "parse-0" in " ".join(p.cmdline())]
    assert len(replacement) == 1 and replacement[0].pid != parsers[0].pid


def _reachable(graph: SyntheticWeb, hosts: int, *, without_links_of: str = "") -> set[str]:
    """URLs reachable from the roots through links and redirects, not following the links of
    the page `without_links_of` (it is reached, but what it links to is not seen through it)."""
    seen, queue = set(roots(hosts)), list(roots(hosts))
    while queue:
        url = queue.pop()
        parts = urlsplit(url)
        host, path = parts.hostname, parts.path
        resource = graph.resolve(host, path)
        if resource is None or url == without_links_of:
            continue
        targets = [resource.location] if resource.kind == "redirect" else graph.links(host, path)
        for target in targets:
            if target and target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def test_a_page_that_kills_the_parser_is_stored_without_links_and_the_rest_keep_theirs(
        start_testweb, start_node):
    # A page that crashes the HTML parser's C code takes the whole parser process with it.
    # The node replaces the parser, parses the pages it held again one by one on a worker of
    # their own, and so finds the culprit: that page is stored and counted as a parse error,
    # every other page keeps its links, and nothing is fetched twice.
    hosts, pages, seed = 4, 40, 17
    web = start_testweb(hosts=hosts, pages=pages, seed=seed)
    graph = SyntheticWeb(hosts=[f"site-{i}.test" for i in range(hosts)], pages=pages, seed=seed)
    assert _reachable(graph, hosts) == set(web.expected())  # the model below is testweb's graph
    # The only page that links to some URL: that URL must go unfetched, everything else not.
    culprit = "http://site-1.test/p/17"
    unreachable = set(web.expected()) - _reachable(graph, hosts, without_links_of=culprit)
    assert culprit in web.expected() and unreachable
    node = start_node(proxy=web.url, seeds=roots(hosts),
                      env={**os.environ, "CRAWLER_TEST_PARSE_CRASH_URL": culprit})  # a test hook (config.TestHooks)
    node.wait_idle(timeout_s=120)
    counters = node.status()["counters"]
    assert counters["parse_errors"] == 1
    assert counters["parser_restarts"] == 1
    log = read_crawl_log(node.data_dir)
    logged = [line["url"] for line in log]
    assert len(logged) == len(set(logged))
    assert set(logged) == set(web.expected()) - unreachable
    assert [line["status"] for line in log if line["url"] == culprit] == [200]
