"""A whole cluster stopped (SIGTERM) and started again fetches nothing twice, even when one
member comes back late (`docker compose stop` and `start`, a rolling restart gone slow).

A member's last stored pages owe rows to its peers: its successor's replica of each page (the
page fetched, its new links queued) and the links found for other members. Before the fix they
were left in the outbox when the stages had drained: sent at the member's next start, or never
if it came back after its successor had taken its hosts over, and the successor then fetched
again what it had fetched. Three real nodes crawl testweb's spanning-tree web; all three are
stopped mid-crawl; a and c start again, b only once a and c have crawled its hosts as far as
they can. Counted by testweb: every URL fetched, and those fetched before the stop not again.
Without the flush on stop, 32-89 of the 1,512 URLs were fetched again (2-6%); with it, none.
"""

from __future__ import annotations

import signal
import sqlite3
import time

from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, wait_until
from test_destroyed_datadir import HOSTS, PAGES, PROFILE, fetched_counts, local_status, start_cluster

AGAIN_SHARE_MAX = 0.01  # a page in flight at the stop is finished and stored by the drain: none


def outbox_rows(data_dir) -> int:
    with sqlite3.connect(f"file:{data_dir / 'frontier.sqlite3'}?mode=ro", uri=True) as db:
        return db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]


def test_a_member_back_after_its_successor_covered_for_it_finds_nothing_fetched_twice(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=31, profile=PROFILE, extra_args=["--tree-only"])
    expected = set(web.expected())
    nodes, peers = start_cluster(start_node, web, ["a", "b", "c"])
    wait_until(lambda: len(fetched_counts(web)) >= len(expected) // 3, 120, "a third of the crawl")
    for node in nodes.values():
        node.signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    for node in nodes.values():
        assert node.proc is not None
        assert node.proc.wait(60) == 0, node.log_tail()
    stop_s = time.monotonic() - stopped_at
    at_stop = fetched_counts(web)
    left = {node_id: outbox_rows(node.data_dir) for node_id, node in nodes.items()}

    def restart(node_id: str):
        old = nodes[node_id]
        return start_node(node_id, host=old.host, port=old.port, proxy=web.url, peers=peers, data_dir=old.data_dir,
                          extra_args=[*FAST_CLUSTER, *SECURED], wait=False)

    back = {node_id: restart(node_id) for node_id in ("a", "c")}
    for node in back.values():
        node.wait_healthy(30)
    wait_until(lambda: all(local_status(node)["idle"] for node in back.values()), 120,
               "a and c done, b's hosts crawled as far as they could")
    promoted = sum(local_status(node)["cluster"]["counters"].get("replica_promoted", 0) for node in back.values())
    back["b"] = restart("b")
    back["b"].wait_healthy(30)
    wait_until(lambda: all(cluster_idle(node) for node in back.values()), 240, "the cluster idle with b back")

    counts = fetched_counts(web)
    lost = sorted(expected - set(counts))
    again = sorted(url for url, n in at_stop.items() if counts[url] > n)
    print(f"\n{len(expected)} URLs, {len(at_stop)} fetched at the stop ({stop_s:.2f} s for all three), outbox rows "
          f"left {left}; promoted while b was away {promoted}; fetched again {len(again)}")
    assert not lost, f"{len(lost)} of {len(expected)} never fetched, e.g. {lost[:5]}"
    assert promoted > 0, "b's successors did not cover for it: the test did not test the late return"
    assert len(again) <= AGAIN_SHARE_MAX * len(expected), (
        f"{len(again)} URLs fetched before the stop were fetched again (outbox rows left at the stop: {left}), "
        f"e.g. {again[:5]}")


def test_a_stop_with_a_frozen_peer_ends_and_loses_what_it_owed_the_peer_nothing(start_testweb, start_node):
    """The flush waits for live peers only, and for a bounded time: b frozen (SIGSTOP) answers
    nothing, so a stops anyway (b is found down, or the wait runs out), keeping what it owed b."""
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=31, profile=PROFILE, extra_args=["--tree-only"])
    expected = set(web.expected())
    nodes, peers = start_cluster(start_node, web, ["a", "b", "c"])
    wait_until(lambda: len(fetched_counts(web)) >= len(expected) // 3, 120, "a third of the crawl")
    frozen, stopping = nodes["b"], nodes["a"]
    frozen.signal(signal.SIGSTOP)
    try:
        stopping.signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert stopping.proc is not None
        assert stopping.proc.wait(60) == 0, stopping.log_tail()  # a hang guard: the flush is bounded
        print(f"\na stopped in {time.monotonic() - stopped_at:.2f} s, b frozen; outbox rows left "
              f"{outbox_rows(stopping.data_dir)}; its log: {stopping.log_tail(3)}")
    finally:
        frozen.signal(signal.SIGCONT)
    back = start_node("a", host=stopping.host, port=stopping.port, proxy=web.url, peers=peers,
                      data_dir=stopping.data_dir, extra_args=[*FAST_CLUSTER, *SECURED])
    members = [back, nodes["b"], nodes["c"]]
    wait_until(lambda: all(cluster_idle(node) for node in members), 240, "the cluster idle with a back")
    lost = sorted(expected - set(fetched_counts(web)))
    assert not lost, f"{len(lost)} of {len(expected)} never fetched, e.g. {lost[:5]}"
