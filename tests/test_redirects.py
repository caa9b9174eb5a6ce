"""A redirect's hop count travels with its target, like depth: through the frontier's rows (and a
database of the layout before it), handoff, the outbox and the peer wire; and a real node ends a
redirect trap at --max-redirects, counted by what testweb itself served."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest
from conftest import read_crawl_log
from frontier_helpers import OLD_URLS_TABLE, FakeClock, entry
from wire_helpers import forwarded_on_the_wire

from crawler_node.frontier import FRONTIER_FILENAME, Frontier, FrontierBatch, UrlEntry
from crawler_node.frontier.schema import SCHEMA_VERSION
from crawler_node.testweb.graph import REDIRECT_TRAP_ENTRY

# The frontier's tables as layout 1 made them (PRAGMA user_version = 1): no redirects columns.
_LAYOUT_1 = OLD_URLS_TABLE + """
CREATE INDEX urls_ready ON urls(host, priority DESC, id, not_before) WHERE state = 0;
CREATE INDEX urls_age ON urls(enqueued_at) WHERE state = 0;
CREATE INDEX urls_deferred ON urls(host, priority DESC, id) WHERE state = 4;
CREATE TABLE hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL DEFAULT 0,
    crawl_delay REAL NOT NULL DEFAULT 0,
    backoff_level INTEGER NOT NULL DEFAULT 0,
    last_throttle REAL
) WITHOUT ROWID;
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    peer TEXT NOT NULL,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    seen INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX outbox_peer ON outbox(peer, id);
CREATE TABLE replica (url TEXT PRIMARY KEY) WITHOUT ROWID;
INSERT INTO hosts (host) VALUES ('a.test');
INSERT INTO urls (url, host, depth, priority, hops, state, attempts, enqueued_at) VALUES
    ('http://a.test/page/0', 'a.test', 2, 5, 1, 0, 0, 1.0),
    ('http://a.test/page/1', 'a.test', 0, 0, 0, 2, 1, 1.0);
INSERT INTO outbox (peer, url, host, depth, priority, hops, seen) VALUES
    ('b', 'http://b.test/page/0', 'b.test', 1, 3, 0, 0);
PRAGMA user_version = 1;
"""


def columns(path: Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


# -- the frontier --------------------------------------------------------------------------------


def test_a_layout_1_database_gains_the_redirects_columns(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with closing(sqlite3.connect(path)) as db:
        db.executescript(_LAYOUT_1)
    columns_of_layout_1 = {table: columns(path, table) for table in ("urls", "outbox")}

    with Frontier(path, clock=clock) as frontier:
        # What the old file held reads back whole, with no redirects behind it.
        assert frontier.totals()["queued"] == 1 and frontier.totals()["done"] == 1
        [(_, owed, seen)] = frontier.outbox.peek("b", 10)
        assert (owed, seen) == (UrlEntry("http://b.test/page/0", "b.test", 1, 3, 0, 0), False)
        [old] = frontier.lease("a.test", 10)[0]
        assert (old.url, old.depth, old.priority, old.hops, old.redirects) == ("http://a.test/page/0", 2, 5, 1, 0)
        # and new rows keep theirs, in both tables
        frontier.add([entry("a.test", 2, redirects=4)])
        frontier.outbox.put([("b", entry("b.test", 1, redirects=7))])
        assert [lease.redirects for lease in frontier.lease("a.test", 10)[0]] == [4]
        assert [e.redirects for _, e, _ in frontier.outbox.peek("b", 10)] == [0, 7]

    for table in ("urls", "outbox"):  # after the columns of layout 1 (later layouts add theirs after it)
        assert columns(path, table)[len(columns_of_layout_1[table])] == "redirects", table
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with Frontier(path, clock=clock) as reopened:  # migrated once: opening again changes nothing
        assert [e.redirects for _, e, _ in reopened.outbox.peek("b", 10)] == [0, 7]
    assert columns(path, "urls").count("redirects") == 1


def test_a_new_database_has_the_columns_where_an_old_one_gets_them(tmp_path: Path, clock: FakeClock) -> None:
    old = tmp_path / "old" / FRONTIER_FILENAME
    old.parent.mkdir()
    with closing(sqlite3.connect(old)) as db:
        db.executescript(_LAYOUT_1)
    Frontier(old, clock=clock).close()
    new = tmp_path / "new"
    new.mkdir()
    Frontier(new, clock=clock).close()
    for table in ("urls", "outbox", "hosts"):
        assert columns(new / FRONTIER_FILENAME, table) == columns(old, table), table


def test_the_hop_count_survives_a_return_a_handoff_and_a_reroute_back(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1, depth=2, redirects=3), entry("a.test", 2)])
    leases, _ = frontier.lease("a.test", 10)
    assert sorted(lease.redirects for lease in leases) == [0, 3]
    frontier.apply(FrontierBatch(returned=[lease.id for lease in leases]))  # never attempted

    assert frontier.handoff.handoff_host("a.test", "b") == 2
    owed = {e.url: e for _, e, _ in frontier.outbox.peek("b", 10)}
    assert owed["http://a.test/page/1"].redirects == 3 and owed["http://a.test/page/1"].depth == 2
    assert owed["http://a.test/page/2"].redirects == 0

    taken = frontier.outbox.reroute("b", lambda host: None)  # "b" is gone: this node takes them in
    assert len(taken.accepted) == 2
    leases, _ = frontier.lease("a.test", 10)
    assert {lease.url: lease.redirects for lease in leases} == {"http://a.test/page/1": 3,
                                                                "http://a.test/page/2": 0}


def test_a_fetched_url_replicated_to_the_successor_keeps_its_hop_count(frontier: Frontier) -> None:
    frontier.add([entry("a.test", 1, redirects=2)])
    [lease] = frontier.lease("a.test", 1)[0]
    frontier.apply(FrontierBatch(done=[lease.id], replicate=[
        ("b", UrlEntry(lease.url, lease.host, lease.depth, lease.priority, lease.hops, lease.redirects))]))
    [(_, replica, seen)] = frontier.outbox.peek("b", 10)
    assert seen and replica.redirects == 2


# -- the peer wire -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_forwarded_urls_carry_their_hop_count_on_the_wire(tmp_path: Path) -> None:
    received = await forwarded_on_the_wire(tmp_path, [UrlEntry("http://b.test/r", "b.test", 1, 5, 0, 4),
                                                      UrlEntry("http://b.test/p", "b.test")])
    assert {item["url"]: item["redirects"] for item in received} == {"http://b.test/r": 4, "http://b.test/p": 0}
    assert {item["url"]: item["depth"] for item in received} == {"http://b.test/r": 1, "http://b.test/p": 0}


# -- a real node against testweb's redirect trap -------------------------------------------------


def post_urls(node, items: list[dict]) -> tuple[int, dict]:
    request = urllib.request.Request(f"{node.url}/v1/urls", data=json.dumps({"urls": items}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def trap_url(host: str, hop: int) -> str:
    """The trap's URL at `hop` (1 is the entry every / links to)."""
    return f"http://{host}{REDIRECT_TRAP_ENTRY}" + "/x" * (hop - 1)


def chain(log: list[dict], host: str) -> list[dict]:
    """The crawl.log lines of the host's redirect trap, in hop order."""
    return sorted((line for line in log if line["url"].startswith(f"http://{host}/trap/")),
                  key=lambda line: len(line["url"]))


@pytest.mark.timeout(180)
def test_a_redirect_trap_ends_at_max_redirects(start_testweb, start_node) -> None:
    limited, default = "site-0.test", "site-1.test"
    web = start_testweb(hosts=2, pages=6, seed=3, profile={"site-*.test": {"redirect_trap": True}},
                        extra_args=["--images", "0", "--cross-link-prob", "0"])
    # --max-path-repeats 0: the trap's /x/x/x... would end at the repeated-segment guard
    # (test_node_traps); here it is the redirect limit alone that must end it.
    small = start_node("node-small", proxy=web.url, seeds=[f"http://{limited}/"],
                       extra_args=["--max-redirects", "3", "--max-path-repeats", "0"])
    large = start_node("node-default", proxy=web.url, seeds=[f"http://{default}/"],
                       extra_args=["--max-path-repeats", "0"])
    statuses = {node.node_id: node.wait_idle(timeout_s=90) for node in (small, large)}
    served = web.stats()["urls"]

    for node, host, limit in ((small, limited, 3), (large, default, 10)):
        # What testweb served: the seed's hop and `limit` more, each once, and nothing past them.
        trap_fetches = {url: n for url, n in served.items() if url.startswith(f"http://{host}/trap/")}
        assert trap_fetches == {trap_url(host, hop): 1 for hop in range(1, limit + 2)}, node.node_id
        lines = chain(read_crawl_log(node.data_dir), host)
        assert [line["url"] for line in lines] == [trap_url(host, hop) for hop in range(1, limit + 2)]
        # every hop's Location, the last one's too (the target that was not followed)
        assert [line["location"] for line in lines] == [trap_url(host, hop + 1) for hop in range(1, limit + 2)]
        assert [line["outcome"] for line in lines] == ["redirect"] * limit + ["too_many_redirects"]
        assert all(line["status"] == 302 for line in lines)
        status = statuses[node.node_id]
        assert status["counters"]["outcomes"]["too_many_redirects"] == 1
        # The chain's end is a result, not a failure: nothing failed, nothing was retried.
        assert status["frontier"]["failed"] == 0 and status["counters"]["retries"] == 0
        assert status["frontier"]["queued"] == 0
        # The rest of the site is crawled as if the trap were not there.
        logged = {line["url"] for line in read_crawl_log(node.data_dir)}
        expected = {url for url in web.expected() if url.startswith(f"http://{host}/")}
        assert expected and expected <= logged

    # A URL submitted with a hop count already behind it (as a peer forwards a redirect's
    # target) has only the rest of the budget: 2 hops taken, so its own fetch, one more, the end.
    fresh = trap_url(limited, 20)
    assert post_urls(small, [{"url": fresh, "redirects": 9, "depth": "one"}])[0] == 400
    assert post_urls(small, [{"url": fresh, "redirects": -1}])[0] == 400
    code, answer = post_urls(small, [{"url": fresh, "redirects": 2}])
    assert (code, answer["accepted"]) == (202, 1)
    small.wait_idle(timeout_s=30)
    lines = chain(read_crawl_log(small.data_dir), limited)
    assert [(line["url"], line["outcome"]) for line in lines[3 + 1:]] == [
        (trap_url(limited, 20), "redirect"), (trap_url(limited, 21), "too_many_redirects")]
    served = web.stats()["urls"]
    assert served.get(trap_url(limited, 21)) == 1 and trap_url(limited, 22) not in served
