"""A data directory has an identity (issue 52): the first start writes its node id, a start
under another --node-id is refused in one line, and --rename-node renames a node alone (in a
cluster it is not yet available: refused in one line too)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import read_crawl_log, roots

from crawler_node.tools.node_process import free_port

HOSTS, PAGES = 2, 15


def _start(data: Path, node_id: str, proxy: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler_node", "run", "--data-dir", str(data), "--node-id", node_id,
                           "--listen", f"127.0.0.1:{free_port('127.0.0.1')}", "--proxy", proxy, *extra],
                          capture_output=True, text=True, timeout=60)


def _one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_another_node_id_is_refused_unless_renamed(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=52)
    node = start_node("node-a", proxy=web.url, seeds=roots(HOSTS))
    node.wait_idle(timeout_s=60)
    node.stop(timeout_s=30)
    data = Path(node.data_dir)
    assert json.loads((data / "identity.json").read_text())["node_id"] == "node-a"
    lines = len(read_crawl_log(data, everything=True))

    error = _one_error(_start(data, "node-b", web.url))
    assert "'node-a'" in error and "--rename-node" in error, error
    error = _one_error(_start(data, "node-b", web.url, "--rename-node", "--secret", "s3cret",
                              "--peer", "node-c=http://127.0.0.1:9"))
    assert "not yet available in a cluster" in error, error
    assert len(read_crawl_log(data, everything=True)) == lines, "a refused start crawled"
    assert json.loads((data / "identity.json").read_text())["node_id"] == "node-a"

    renamed = start_node("node-b", proxy=web.url, data_dir=data, seeds=roots(HOSTS), extra_args=["--rename-node"])
    renamed.wait_idle(timeout_s=60)
    assert json.loads((data / "identity.json").read_text())["node_id"] == "node-b"
    counts = web.stats()["urls"]
    assert max(n for url, n in counts.items() if not url.endswith("/robots.txt")) == 1, "the rename fetched again"
    renamed.stop(timeout_s=30)
