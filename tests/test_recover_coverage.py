"""`crawler-node recover` cannot lose a URL silently (issue 52): each damage the start-up guard
refuses recovers to full coverage on testweb's spanning-tree web (`--tree-only`: a URL lost is
never found again through another link), and a URL ended `out_of_scope` from another host's
page while it was queued from its own is fetched after the recovery, not counted done."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_crawl_log, roots, wait_until

from crawler_node.runtime.frontier_guard import read_watermark

HOSTS, PAGES = 4, 60


def _wait_for_lines(node, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(read_crawl_log(node.data_dir)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _damage(data: Path, damage: str) -> None:
    db, wal = data / "frontier.sqlite3", data / "frontier.sqlite3-wal"
    if damage == "deleted wal":
        wal.unlink()
        (data / "frontier.sqlite3-shm").unlink(missing_ok=True)
    elif damage == "garbled wal":
        size = wal.stat().st_size
        with open(wal, "r+b") as handle:  # every frame past the first few: checksums fail
            handle.seek(min(size // 8, 32 + 4096 * 2))
            handle.write(b"\x5a" * (size - handle.tell()))
    elif damage == "zero-length main":
        wal.unlink()
        (data / "frontier.sqlite3-shm").unlink(missing_ok=True)
        db.write_bytes(b"")
    elif damage == "truncated main":
        wal.unlink()
        (data / "frontier.sqlite3-shm").unlink(missing_ok=True)
        with open(db, "r+b") as handle:
            handle.truncate(max(db.stat().st_size // 2, 4096))
    elif damage == "garbage main":
        wal.unlink()
        (data / "frontier.sqlite3-shm").unlink(missing_ok=True)
        db.write_bytes(b"this is not a database, just bytes " * 400)
    else:
        raise AssertionError(damage)


def _refused_then_recovered(data: Path, proxy: str, scope: list[str]) -> str:
    refused = subprocess.run([sys.executable, "-m", "crawler_node", "run", "--node-id", "node-1",
                              "--data-dir", str(data),
                              "--listen", "127.0.0.1:0", "--proxy", proxy, *scope],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "crawler-node recover" in errors[0], refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    rebuilt = subprocess.run([sys.executable, "-m", "crawler_node", "recover", "--data-dir", str(data), *scope],
                             capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    return rebuilt.stdout


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted wal", "garbled wal", "zero-length main", "truncated main",
                                    "garbage main"])
def test_each_damage_recovers_to_full_coverage_on_the_tree_web(start_testweb, start_node, damage):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=52, extra_args=["--tree-only"],
                        profile={"site-*.test": {"latency_ms": 150}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS), default_scope=True)
    _wait_for_lines(node, len(expected) // 3)
    data = Path(node.data_dir)
    wait_until(lambda: read_watermark(data) > 0, 30, "the node's watermark")
    node.kill()
    _damage(data, damage)
    report = _refused_then_recovered(data, web.url, [])

    restarted = start_node(proxy=web.url, data_dir=data, default_scope=True)
    restarted.wait_idle(timeout_s=120)
    logged = {line["url"] for line in read_crawl_log(data)}
    assert expected - logged == set(), f"URLs lost with the frontier ({damage}); recover said: {report}"
    counts = web.stats()["urls"]
    assert max(n for url, n in counts.items() if not url.endswith("/robots.txt")) <= 2
    assert "recovered" in report and "requeued" in report and "unknown" in report, report


@pytest.mark.slow
def test_a_url_ended_out_of_scope_from_another_host_is_fetched_after_recovery(start_testweb, start_node):
    # Cross-host links everywhere, the default scope (a link's host must be its page's): most
    # URLs get an out_of_scope line from another host's page, while queued from their own.
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=53, extra_args=["--cross-link-prob", "0.9"],
                        profile={"site-*.test": {"latency_ms": 150}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS), default_scope=True)
    _wait_for_lines(node, len(expected) // 3)
    data = Path(node.data_dir)
    wait_until(lambda: read_watermark(data) > 0, 30, "the node's watermark")
    node.kill()
    logged_before = {line["url"] for line in read_crawl_log(data)}
    scoped_only = {line["url"] for line in read_crawl_log(data, everything=True)
                   if line.get("outcome") == "out_of_scope"} - logged_before
    assert scoped_only & expected, "the test needs URLs ended out_of_scope before their own fetch"
    _damage(data, "deleted wal")
    report = _refused_then_recovered(data, web.url, [])

    restarted = start_node(proxy=web.url, data_dir=data, default_scope=True)
    restarted.wait_idle(timeout_s=120)
    logged = {line["url"] for line in read_crawl_log(data)}
    assert expected - logged == set(), f"URLs lost: {sorted(expected - logged)[:5]}; recover said: {report}"


@pytest.mark.parametrize("where", [0.3, 0.5, 0.8])
def test_a_malformed_frontier_is_a_one_line_refusal_and_recover_rebuilds_it(start_testweb, start_node, where):
    # 4 KiB of garbage in the middle of a checkpointed frontier: the sqlite_sequence the guard
    # reads may be whole while the pages the start reads are not.
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=54, extra_args=["--tree-only"])
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS), default_scope=True)
    node.wait_idle(timeout_s=120)
    node.stop(timeout_s=30)  # the last connection's close checkpoints: the main file holds it all
    data = Path(node.data_dir)
    db = data / "frontier.sqlite3"
    size = db.stat().st_size
    assert size > 3 * 4096, size
    with open(db, "r+b") as handle:
        handle.seek(int(size * where) // 4096 * 4096)
        handle.write(bytes(range(256)) * 16)
    started = subprocess.run([sys.executable, "-m", "crawler_node", "run", "--node-id", "node-1",
                              "--data-dir", str(data),
                              "--listen", "127.0.0.1:0", "--proxy", web.url],
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 2, started.stderr[-3000:]
    assert "Traceback" not in started.stderr, started.stderr[-3000:]
    errors = [line for line in started.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "crawler-node recover" in errors[0], started.stderr[-3000:]
    rebuilt = subprocess.run([sys.executable, "-m", "crawler_node", "recover", "--data-dir", str(data)],
                             capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    restarted = start_node(proxy=web.url, data_dir=data, default_scope=True)
    restarted.wait_idle(timeout_s=120)
    assert expected - {line["url"] for line in read_crawl_log(data)} == set()
    assert max(n for url, n in web.stats()["urls"].items() if not url.endswith("/robots.txt")) == 1


@pytest.mark.parametrize("then", ["restart", "recover"])
def test_a_torn_crawl_log_tail_is_rebuilt_from_the_warc_records_at_start(start_testweb, start_node, then):
    # A kill in the middle of a batch's lines: the WARC records are written, their lines are not
    # (or half). The node's start puts them back, so that recover, later, sees those pages.
    web = start_testweb(hosts=2, pages=20, seed=55, extra_args=["--tree-only"])
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(2), default_scope=True)
    node.wait_idle(timeout_s=60)
    node.stop(timeout_s=30)
    data = Path(node.data_dir)
    log = data / "crawl.log"
    text = log.read_bytes()
    lines = text.split(b"\n")[:-1]
    archived = [i for i, line in enumerate(lines) if b'"warc_file":"' in line]
    cut = archived[-3]  # the third-last archived line is torn in its middle; the rest are gone
    kept = b"".join(line + b"\n" for line in lines[:cut]) + lines[cut][: len(lines[cut]) // 2]
    log.write_bytes(kept)
    lost = {json.loads(line)["url"] for line in lines[cut:] if b'"warc_file":"' in line}
    assert len(lost) >= 3 and lost <= expected
    if then == "recover":  # the frontier lost too: recover rebuilds the lines, and counts those pages done
        (data / "frontier.sqlite3").write_bytes(b"")
        report = _refused_then_recovered(data, web.url, [])
        assert f"{len(lost)} crawl.log lines a kill had cut rebuilt" in report, report

    restarted = start_node(proxy=web.url, data_dir=data, default_scope=True)
    restarted.wait_idle(timeout_s=60)
    entries = read_crawl_log(data, everything=True)
    rebuilt = {line["url"] for line in entries if "rebuilt" in (line.get("error") or "")}
    assert lost <= rebuilt, sorted(lost - rebuilt)
    assert expected <= {line["url"] for line in entries}
    assert (data / "crawl.log.torn").exists()
    assert max(n for url, n in web.stats()["urls"].items() if not url.endswith("/robots.txt")) == 1
