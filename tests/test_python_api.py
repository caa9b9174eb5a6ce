"""The Python API (issue 51): a single-node crawl inside an asyncio program, its pages an async
iterator with backpressure. Asserted on what testweb served against what the program took."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_crawl_log, roots

import crawler_node
from crawler_node import Crawl, Settings, make_settings
from crawler_node.settings import SettingsError

HOSTS, PAGES = 10, 100  # 1,000 pages
BUFFER, STORE_QUEUE, PARSE_QUEUE, INFLIGHT, PARSE_WORKERS = 8, 8, 8, 4, 1
# Pages fetched and not yet taken by the program, at most: the iterator's buffer; the store
# stage's queue and the batch it hands over (at most a queue's worth and one); the same for the
# parse stage, per parser; and the fetches in flight. None of it grows with the crawl. Counted
# as the pages testweb served (distinct URLs of the web), not its requests: robots.txt, a retry
# after a timeout on a busy machine or a redirect's hop is a request but no page, and those add
# up over a crawl (CI saw 56+ requests ahead where the pages were within this bound).
AHEAD = BUFFER + (2 * STORE_QUEUE + 1) + PARSE_QUEUE + PARSE_WORKERS * (PARSE_QUEUE + 1) + INFLIGHT
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "python_api.py"


def test_a_slow_consumer_slows_the_crawl_and_gets_every_page(start_testweb, tmp_path):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=11)
    expected = set(web.expected())
    settings = make_settings(seeds=roots(HOSTS), data_dir=tmp_path / "api", proxy=web.url, pace="adaptive",
                             store_queue=STORE_QUEUE, parse_queue=PARSE_QUEUE, global_inflight=INFLIGHT,
                             parse_workers=PARSE_WORKERS)
    checks: list[tuple[int, int]] = []

    async def program() -> list[str]:
        urls = []
        async with Crawl(settings, buffer=BUFFER) as crawl:
            async for page in crawl:
                urls.append(page.url)
                assert crawl.buffered <= BUFFER
                await asyncio.sleep(0.002)  # a slow consumer: the crawl would go faster alone
                if len(urls) % 50 == 0:
                    served = sum(1 for url in web.stats()["urls"] if url in expected)
                    snapshot = await crawl.node.snapshot()
                    queues = snapshot.queues
                    assert queues.store.depth <= queues.store.capacity == STORE_QUEUE
                    assert queues.parse.depth <= queues.parse.capacity == PARSE_QUEUE
                    checks.append((len(urls), served))
        return urls

    urls = asyncio.run(program())
    assert set(urls) == expected and len(urls) == len(expected) >= 1000  # each page once, none missed
    # the pages testweb served never ran ahead of what the program took by more than the bounds
    assert checks and all(served <= taken + AHEAD for taken, served in checks), (AHEAD, checks)
    print(f"pages served ahead of the program, at most: {max(served - taken for taken, served in checks)}"
          f" (bound {AHEAD})")
    assert {line["url"] for line in read_crawl_log(tmp_path / "api")} == expected  # stored as the daemon does


def test_the_api_checks_its_settings_and_is_importable_from_the_package():
    assert crawler_node.Crawl is Crawl and crawler_node.Settings is Settings
    settings = make_settings(pace="adaptive", data_dir="./somewhere")
    assert settings.host_limit_ceiling == 8 and isinstance(settings.data_dir, Path)  # the preset, coerced
    with pytest.raises(SettingsError, match="did you mean max_depth"):
        make_settings(max_dept=3)  # the nearest name
    with pytest.raises(ValueError, match="one node"):
        Crawl(Settings(peers=["a=http://127.0.0.1:1"]))
    with pytest.raises(ValueError, match="buffer"):
        Crawl(Settings(), buffer=0)


def test_the_documented_example_runs(start_testweb, tmp_path):
    web = start_testweb(hosts=2, pages=10, seed=3)
    done = subprocess.run([sys.executable, str(EXAMPLE), *roots(2), "--proxy", web.url, "--data-dir",
                           str(tmp_path / "example")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{len(web.expected())} pages handled" in done.stdout
