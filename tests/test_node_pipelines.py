"""User pipelines on a real node: items for every HTML page, across a SIGKILL; a pipeline that
raises or runs too long costs only its own items, never the crawl."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

from conftest import read_crawl_log, roots

HOSTS, PAGES = 4, 40
TESTS = Path(__file__).parent


def read_items(data_dir: Path) -> list[dict]:
    items = []
    for path in sorted((Path(data_dir) / "items").glob("*.jsonl")):
        items += [json.loads(line) for line in path.read_text().splitlines()]
    return items


def html_pages(data_dir: Path) -> list[str]:
    return [line["url"] for line in read_crawl_log(data_dir)
            if line["status"] == 200 and (line["content_type"] or "").startswith("text/html")]


def test_the_summary_pipeline_has_one_item_per_html_page_across_a_sigkill(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=21, profile={"site-*.test": {"latency_ms": 40}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS), extra_args=["--pipeline", "summary"])
    deadline = time.monotonic() + 60
    while len(read_crawl_log(node.data_dir)) < len(expected) // 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.kill()
    restarted = start_node(proxy=web.url, data_dir=node.data_dir, extra_args=["--pipeline", "summary"])
    restarted.wait_idle(timeout_s=120)

    pages = html_pages(restarted.data_dir)  # a page fetched again after the kill is here twice
    items = read_items(restarted.data_dir)
    assert set(pages) == {url for url in expected if "/img/" not in url}  # images are not HTML
    assert {line["url"] for line in read_crawl_log(restarted.data_dir)} == expected
    # None lost, none written twice beyond the pages fetched twice: the same multiset of URLs.
    assert sorted(item["url"] for item in items) == sorted(pages)
    assert all(set(item) == {"url", "title", "description", "text"} for item in items)
    assert all(item["title"] and item["text"] for item in items)
    assert 0 < restarted.status()["counters"]["items"] < len(items)  # the restarted run's share


def test_a_raising_and_a_slow_pipeline_leave_the_crawl_complete(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=22)
    expected = set(web.expected())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    node = start_node(proxy=web.url, seeds=roots(HOSTS), env=env, extra_args=[
        "--pipeline", "pipeline_plugins.faulty:raises_on_every_tenth",
        "--pipeline", "pipeline_plugins.faulty:sleeps_on_every_tenth", "--pipeline-budget-s", "0.2"])
    node.wait_idle(timeout_s=180)

    logged = read_crawl_log(node.data_dir)
    assert {line["url"] for line in logged} == expected
    assert set(html_pages(node.data_dir)) == {url for url in expected if "/img/" not in url}
    tenth = {url for url in html_pages(node.data_dir) if zlib.crc32(url.encode()) % 10 == 0}
    assert tenth, "the test web has no page the faulty pipelines trip on"
    counters = node.status()["counters"]
    assert counters["pipeline_errors"] == len(tenth)
    assert counters["pipeline_timeouts"] == len(tenth)
    items = read_items(node.data_dir)
    by_kind = {"length": [i["url"] for i in items if "length" in i], "links": [i["url"] for i in items if "links" in i]}
    # Each pipeline's items: every HTML page but the ones it failed on.
    others = sorted(set(html_pages(node.data_dir)) - tenth)
    assert sorted(by_kind["length"]) == others and sorted(by_kind["links"]) == others
