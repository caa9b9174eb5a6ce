"""A host's Crawl-delay holds across a takeover (issue 14): its owner is SIGKILLed just after a
request to it, and the successor that takes the host over waits the delay out. The host's
next-eligible time and delay travel with the fetched-URL replica (frontier.replica); the request
the owner may have had in flight, unreplicated, is covered by a Crawl-delay counted from the
takeover. What testweb saw decides: the smallest gap between two requests to the host."""

from __future__ import annotations

import time

from cluster_helpers import FAST_CLUSTER, SECURED, owner_of, peers_of, plan, wait_until

HOSTS, PAGES = 9, 30
DELAY_S = 3.0  # longer than failure detection (under 3 s): a takeover could beat it
TOLERANCE_S = 0.05
PROFILE = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {DELAY_S}\n"}}


def test_a_successor_waits_out_the_crawl_delay_of_the_owner_it_replaces(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=41, profile=PROFILE)
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id, (host, port) in addresses.items():
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=[f"http://site-{k}.test/" for k in range(HOSTS)] if node_id == "a" else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED])
    for node in nodes.values():
        node.wait_healthy(30)
    victim_hosts = [f"site-{k}.test" for k in range(HOSTS) if owner_of(nodes["a"], f"site-{k}.test") == "b"]
    assert victim_hosts

    def requests(history: bool = False) -> dict:
        return web.stats(hosts=victim_hosts, history=history)["hosts"]

    # Its delay known and a few pages fetched on each of its hosts (robots.txt, then pages)...
    wait_until(lambda: all(requests()[host]["requests"] >= 3 for host in victim_hosts), 60, "b's hosts under way")
    # ... the owner dies just after a request to one of them started.
    host = victim_hosts[0]
    before = requests()[host]["requests"]
    wait_until(lambda: requests()[host]["requests"] > before, 2 * DELAY_S + 5, "b's next request", interval=0.01)
    nodes["b"].kill()
    killed_at = web.stats(summary=True)["clock"]

    def taken_over() -> bool:
        seen = requests(history=True)
        return all(any(started > killed_at for started, _, _ in seen[h]["history"]) for h in victim_hosts)

    wait_until(taken_over, 30, "the successors' first requests to b's hosts")
    time.sleep(DELAY_S)  # and a second request each, spaced by the delay
    gaps = {h: stats["min_gap_s"] for h, stats in requests().items()}
    assert min(gaps.values()) >= DELAY_S - TOLERANCE_S, gaps
