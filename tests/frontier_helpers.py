"""What the frontier tests share: an injected clock, URL entries, an open frontier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler_node.frontier import FRONTIER_FILENAME, Frontier, UrlEntry

# The urls table as the first releases made it (later ones add indexes and tables around it).
OLD_URLS_TABLE = """
CREATE TABLE urls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    state INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    lease_expires REAL,
    enqueued_at REAL NOT NULL
);
"""


class FakeClock:
    """An injected clock: tests move time by assignment instead of sleeping."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def entry(host: str, n: int, **fields: int) -> UrlEntry:
    return UrlEntry(url=f"http://{host}/page/{n}", host=host, **fields)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# Every test of the `frontier` fixture runs twice: every host with work in memory, and at most
# 64 of them (the node's way: frontier.host_records), the test's few hosts all active.
@pytest.fixture(params=[0, 64], ids=["all-active", "bounded"])
def frontier(tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest) -> Iterator[Frontier]:
    with Frontier(tmp_path / FRONTIER_FILENAME, lease_timeout_s=60.0, clock=clock,
                  resident_hosts=request.param) as opened:
        yield opened
