"""A frontier that lost what it had committed is refused at start, with one line that says
how to go on, and `crawler-node recover` rebuilds it from crawl.log and the WARC files."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_crawl_log, roots, wait_until

from crawler_node.runtime.frontier_guard import (
    FrontierLost,
    Watermark,
    check_frontier,
    highest_url_id,
    read_watermark,
    write_watermark,
)

HOSTS, PAGES = 4, 40


def _frontier_with_rows(path: Path, rows: int) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE urls (id INTEGER PRIMARY KEY AUTOINCREMENT, url TEXT)")
    connection.executemany("INSERT INTO urls (url) VALUES (?)", [(f"http://a.test/{n}",) for n in range(rows)])
    connection.commit()
    connection.close()


def test_the_watermark_tells_a_lost_frontier_from_a_whole_one(tmp_path: Path) -> None:
    db = tmp_path / "frontier.sqlite3"
    check_frontier(tmp_path, db)  # a new data directory: nothing was promised
    _frontier_with_rows(db, 10)
    watermark = Watermark(tmp_path, db)
    assert watermark.update() == 10 and read_watermark(tmp_path) == 10
    check_frontier(tmp_path, db)
    watermark.close()
    write_watermark(tmp_path, 25)  # the frontier had handed out ids up to 25: 15 are gone
    with pytest.raises(FrontierLost, match="crawler-node recover"):
        check_frontier(tmp_path, db)
    db.unlink()
    with pytest.raises(FrontierLost, match="is missing"):
        check_frontier(tmp_path, db)
    db.write_bytes(b"")  # a main file cut to nothing reads as an empty database
    with pytest.raises(FrontierLost):
        check_frontier(tmp_path, db)
    db.write_bytes(b"this is not a database, just bytes " * 200)
    with pytest.raises(FrontierLost):
        check_frontier(tmp_path, db)
    assert highest_url_id(tmp_path / "none.sqlite3") is None
    # No watermark, but a crawl.log: a missing or empty frontier is refused all the same.
    (tmp_path / "frontier.watermark").unlink()
    db.unlink()
    check_frontier(tmp_path, db)
    (tmp_path / "crawl.log").write_text('{"url": "http://a.test/"}\n')
    with pytest.raises(FrontierLost, match="crawl happened"):
        check_frontier(tmp_path, db)


def _wait_for_lines(node, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(read_crawl_log(node.data_dir)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("damage", ["lost wal", "empty main file"])
def test_a_node_refuses_a_damaged_frontier_and_recover_rebuilds_it(start_testweb, start_node, damage):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=71, profile={"site-*.test": {"latency_ms": 40}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS))
    _wait_for_lines(node, len(expected) // 3)
    data = Path(node.data_dir)
    wait_until(lambda: read_watermark(data) > 0, 30, "the node's watermark")  # written every 2 s
    node.kill()
    db = data / "frontier.sqlite3"
    (data / "frontier.sqlite3-wal").unlink()
    (data / "frontier.sqlite3-shm").unlink(missing_ok=True)
    if damage == "empty main file":
        db.write_bytes(b"")

    refused = subprocess.run([sys.executable, "-m", "crawler_node", "run", "--data-dir", str(data),
                              "--listen", "127.0.0.1:0", "--proxy", web.url],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    errors = [line for line in refused.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "crawler-node recover" in errors[0], refused.stderr

    # recover is given the node's scope (the test helper's nodes run with --allow-host '*')
    rebuilt = subprocess.run([sys.executable, "-m", "crawler_node", "recover", "--data-dir", str(data),
                              "--allow-host", "*"],
                             capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "recovered the frontier" in rebuilt.stdout and list(data.glob("frontier-lost-*/frontier.sqlite3"))

    restarted = start_node(proxy=web.url, data_dir=data)
    restarted.wait_idle(timeout_s=120)
    logged = {line["url"] for line in read_crawl_log(data)}
    assert expected - logged == set(), "URLs lost with the frontier"
    counts = web.stats()["urls"]
    # What was fetched before the kill is not fetched again (beyond what was in flight).
    assert max(n for url, n in counts.items() if not url.endswith("/robots.txt")) <= 2
