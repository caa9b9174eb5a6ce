"""The bad afternoon, part 2: one host serves multi-megabyte pages and the parser is slow.

The fetchers must not keep going: the parse queue fills to its bound and stays there, the
fetch tasks that find it full wait (counted as blocked enqueues), admission stops starting new
fetches (counted as rejections), and the node's memory stays bounded. Nothing crashes, and the
crawl completes.

The bound stated here: the node's resident memory (its process and its parser process) grows
by less than 250 MB over its idle size, while 40 pages of 3 MB go through a parser that
takes 50 ms per page."""

from __future__ import annotations

import os
import time

import psutil
from conftest import read_crawl_log, roots
from pressure_helpers import post

HOSTS, PAGES = 5, 40
PAGE_BYTES = 3_000_000
PARSE_QUEUE = 8
RSS_GROWTH_BOUND_MB = 250


def tree_rss_mb(pid: int) -> float:
    process = psutil.Process(pid)
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 1e6


def test_huge_pages_and_a_slow_parser_keep_queues_and_memory_bounded(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=2, profile={"site-0.test": {"page_bytes": PAGE_BYTES}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, extra_args=[
        "--parse-queue", str(PARSE_QUEUE), "--store-queue", "32", "--pipeline-max-bytes", "48000000"],
        env={**os.environ, "CRAWLER_TEST_PARSE_DELAY_S": "0.05"})  # a slow parser: a test hook (config.TestHooks)
    time.sleep(1.0)  # the parser process is up, the node idle: the baseline
    idle_mb = tree_rss_mb(node.pid)

    assert post(f"{node.url}/v1/urls", {"urls": roots(HOSTS)})[0] == 202
    peak_mb, deepest, samples = idle_mb, 0, []
    deadline = time.monotonic() + 50
    while time.monotonic() < deadline:
        status = node.status()
        samples.append(status["queues"]["parse"]["depth"])
        deepest = max(deepest, status["queues"]["parse"]["depth"])
        peak_mb = max(peak_mb, tree_rss_mb(node.pid))
        if status["idle"]:
            break
        time.sleep(0.1)
    final = node.wait_idle(timeout_s=10)

    # the crawl completed, every page exactly once, and the node is still running
    lines = read_crawl_log(node.data_dir)
    assert {line["url"] for line in lines if line["status"] == 200} == expected
    assert len(lines) == len(expected)
    assert node.proc.poll() is None

    # the parse queue sat at its bound (not past it: it cannot grow), and the slow-down
    # travelled upstream: blocked enqueues counted, new fetches refused by admission
    parse = final["queues"]["parse"]
    assert deepest == parse["capacity"] == PARSE_QUEUE
    assert sum(depth == PARSE_QUEUE for depth in samples) >= 5, samples
    assert parse["blocked_puts"] > 0
    rejections = final["admission"]["rejections"]
    assert rejections.get("parse", 0) + rejections.get("memory", 0) > 0, final["admission"]
    assert final["admission"]["held_bytes"] == 0  # everything written, nothing leaked

    # memory stayed bounded
    assert peak_mb - idle_mb < RSS_GROWTH_BOUND_MB, (idle_mb, peak_mb)
    assert node.stop() == 0
