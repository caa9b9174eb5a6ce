"""A host's Crawl-delay holds across a handback (issue 14): its owner is frozen (SIGSTOP), its
successor takes the host over and crawls it, and the owner, woken just after one of the
successor's requests, waits the delay out before its own first request. The successor hands
the host back with its politeness (cluster.sweep, frontier.handoff), and the owner honours it
(node.hosts.HostTable.honour): without that, the owner's first request came about its
handback delay (1 s) after the wake, whatever the successor had just sent. The handback comes
through the successors' outboxes, and may come late (a loaded machine; here, outboxes that
linger 3 s): the owner then spaces its hosts from the moment its quorum came back
(node.hosts.HostTable.regained); without that its first requests came 2.2 s after the
successor's (and once in CI, unlingered, 3.3 s). What testweb saw decides: the smallest gap
between two requests to each host."""

from __future__ import annotations

import signal
import time
from datetime import datetime

import pytest
from cluster_helpers import FAST_CLUSTER, SECURED, logged_urls, owner_of, peers_of, plan, wait_until

HOSTS, PAGES = 9, 40
DELAY_S = 4.0  # well past the handback delay (1 s) and failure detection (under 3 s)
TOLERANCE_S = 0.05
PROFILE = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {DELAY_S}\n"}}


@pytest.mark.parametrize("linger", ["prompt", "late_handback"])
def test_an_owner_back_from_a_freeze_waits_out_the_crawl_delay_of_the_member_that_covered_for_it(
        start_testweb, start_node, linger):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=43, profile=PROFILE)
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id, (host, port) in addresses.items():
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=[f"http://site-{k}.test/" for k in range(HOSTS)] if node_id == "a" else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED, *(
                                        ["--forward-linger-s", "3"] if linger == "late_handback" and node_id != "b"
                                        else [])])
    for node in nodes.values():
        node.wait_healthy(30)
    owner = nodes["b"]
    victim_hosts = [f"site-{k}.test" for k in range(HOSTS) if owner_of(nodes["a"], f"site-{k}.test") == "b"]
    assert victim_hosts

    def requests(history: bool = False) -> dict:
        return web.stats(hosts=victim_hosts, history=history)["hosts"]

    def started_since(at: float) -> dict[str, int]:
        seen = requests(history=True)
        return {h: sum(1 for started, _, _ in seen[h]["history"] if started > at) for h in victim_hosts}

    wait_until(lambda: all(requests()[host]["requests"] >= 3 for host in victim_hosts), 60, "b's hosts under way")
    assert owner.proc is not None
    owner.proc.send_signal(signal.SIGSTOP)
    try:
        frozen_at = web.stats(summary=True)["clock"]
        # The successors take b's hosts over and crawl each, spaced by the delay...
        wait_until(lambda: min(started_since(frozen_at).values()) >= 2, 60, "the successors crawling b's hosts")
        # ... and b wakes just after one of their requests.
        host = victim_hosts[0]
        before = requests()[host]["requests"]
        wait_until(lambda: requests()[host]["requests"] > before, DELAY_S + 5, "a successor's next request",
                   interval=0.01)
    finally:
        owner.proc.send_signal(signal.SIGCONT)
    woken_at = time.time()

    def owner_back_on_each() -> bool:
        fetched = {line["host"] for line in logged_urls([owner])["b"]
                   if datetime.fromisoformat(line["fetched_at"]).timestamp() > woken_at}
        return set(victim_hosts) <= fetched

    wait_until(owner_back_on_each, 2 * DELAY_S + 20, "b's own requests to its hosts after the wake")
    gaps = {h: stats["min_gap_s"] for h, stats in requests().items()}
    assert min(gaps.values()) >= DELAY_S - TOLERANCE_S, gaps
