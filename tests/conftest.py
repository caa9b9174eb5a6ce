"""Shared fixtures: real testweb and real node processes, every one stopped by PID."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from baseline_tree import baseline_tree  # noqa: F401 - the session's BASELINE tree (contract tests)
from frontier_helpers import clock, frontier  # noqa: F401 - fixtures of the frontier tests

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

# The two files that take longest in CI (2026-12-06: ~5 min, ~4.5 min with its image builds).
LONGEST_FILES = ("test_memory_hosts.py", "test_compose.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, one to each worker (pyproject's addopts: two workers, a file to
    a worker, in this order), then the other files with a slow test, then the rest as
    collected: the long ones start while there are other files left to share, instead of one
    worker finishing alone with test_memory_hosts.py's 5 minutes (16:22 for the suite in CI
    when it started last)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        if item.path.name in LONGEST_FILES:
            return LONGEST_FILES.index(item.path.name)
        return len(LONGEST_FILES) + (item.path not in slow_files)

    items.sort(key=rank)  # a stable sort: a file's tests keep their order


@pytest.fixture
def start_testweb(tmp_path: Path):
    started: list[TestwebProcess] = []

    def start(**kwargs) -> TestwebProcess:
        kwargs.setdefault("tmp_dir", tmp_path)
        web = TestwebProcess(**kwargs)
        web.__enter__()
        started.append(web)
        return web

    yield start
    for web in started:
        web.__exit__(None, None, None)


# The tests written before the default scope (a link's host must be its page's) seed some
# testweb hosts and reach the others through cross-host links: their nodes go wide.
ANY_HOST = ("--allow-host", "*")


@pytest.fixture
def start_node(tmp_path: Path):
    started: list[NodeProcess] = []

    def start(node_id: str = "node-1", *, wait: bool = True, default_scope: bool = False, **kwargs) -> NodeProcess:
        """``default_scope``: the node keeps the crawl's default scope; otherwise, unless the
        test names its own hosts, any host is in scope."""
        kwargs.setdefault("data_dir", tmp_path / node_id)
        extra = list(kwargs.get("extra_args", ()))
        if not default_scope and "--allow-host" not in extra:
            kwargs["extra_args"] = [*ANY_HOST, *extra]
        node = NodeProcess(node_id=node_id, **kwargs)
        started.append(node)
        node.start(wait=wait)
        return node

    yield start
    for node in started:
        node.stop(timeout_s=15)


UNFETCHED_OUTCOMES = ("robots_disallowed", "robots_unavailable", "out_of_scope", "repeated_segments", "path_too_deep",
                      "too_many_query_params", "denied_url", "host_page_cap", "host_dropped", "calendar_trap")


def read_crawl_log(data_dir: Path, *, everything: bool = False) -> list[dict]:
    """The crawl.log lines of requests for the frontier's URLs; with ``everything``, also the
    robots.txt exchanges (kind "robots") and the URLs that ended without a request."""
    current = Path(data_dir) / "crawl.log"
    # Rotated files first (crawl.log.<UTC stamp>, oldest first), then the current one.
    paths = sorted(current.parent.glob("crawl.log.[0-9]*")) + ([current] if current.exists() else [])
    lines = []
    # A line is whole once its newline is written: the last one of a file being written (or
    # of a node killed mid-write) may not be yet.
    for line in (text for path in paths for text in path.read_text().split("\n")[:-1]):
        if line.strip():
            entry = json.loads(line)
            if everything or (entry.get("kind", "page") != "robots" and entry["outcome"] not in UNFETCHED_OUTCOMES):
                lines.append(entry)
    return lines


def roots(hosts: int) -> list[str]:
    return [f"http://site-{i}.test/" for i in range(hosts)]


def wait_until(predicate, timeout_s: float, what: str, interval: float = 0.1):
    """Poll until ``predicate()`` is truthy and return its value; bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
