"""A host's Crawl-delay holds across a takeover (issue 14): its owner is SIGKILLed just after a
request to it, and the successor that takes the host over waits the delay out. The host's
next-eligible time and delay travel with the fetched-URL replica (frontier.replica); the request
the owner may have had in flight, unreplicated, is covered by a Crawl-delay counted from the
takeover. A Crawl-delay just learnt from robots.txt reaches the successor before the host's
first page does (a row of politeness alone, frontier.outbox): an owner killed between its
robots.txt request and its first page leaves a successor that waits the delay out too. What
testweb saw decides: the smallest gap between two requests to the host."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing

from cluster_helpers import FAST_CLUSTER, SECURED, owner_of, peers_of, plan, wait_until

from crawler_node.frontier import FRONTIER_FILENAME
from crawler_node.tools import client

HOSTS, PAGES = 9, 30
DELAY_S = 3.0  # longer than failure detection (under 3 s): a takeover could beat it
TOLERANCE_S = 0.05
PROFILE = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {DELAY_S}\n"}}


def roots() -> list[str]:
    return [f"http://site-{k}.test/" for k in range(HOSTS)]


def start_cluster(start_node, web, *, seeds: bool = True) -> dict:
    """a, b and c; `seeds`: a starts with the roots (else they come later, through the API)."""
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id, (host, port) in addresses.items():
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=roots() if node_id == "a" and seeds else (),
                                    extra_args=[*FAST_CLUSTER, *SECURED])
    for node in nodes.values():
        node.wait_healthy(30)
    return nodes


def test_a_successor_waits_out_the_crawl_delay_of_the_owner_it_replaces(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=41, profile=PROFILE)
    nodes = start_cluster(start_node, web)
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


def replica_politeness(node) -> dict[str, float]:
    """host -> Crawl-delay of the neighbours' hosts whose politeness `node` keeps."""
    with closing(sqlite3.connect(f"file:{node.data_dir / FRONTIER_FILENAME}?mode=ro", uri=True, timeout=5)) as db:
        return dict(db.execute("SELECT host, crawl_delay FROM replica_hosts"))


def test_a_crawl_delay_learnt_from_robots_txt_holds_at_a_successor_before_the_first_page(
        start_testweb, start_node):
    delay_s = 6.0  # the owner's first page waits this long after its robots.txt: time to look
    profile = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {delay_s}\n"}}
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=42, profile=profile)
    # The roots only once every member is up: b's first page then waits its delay from a
    # robots.txt request made now, however long the members took to start.
    nodes = start_cluster(start_node, web, seeds=False)
    victim_hosts = [f"site-{k}.test" for k in range(HOSTS) if owner_of(nodes["a"], f"site-{k}.test") == "b"]
    assert victim_hosts
    client.submit(nodes["a"].url, roots(), secret=SECURED[1])

    def known_to_successors() -> bool:
        kept = replica_politeness(nodes["a"]) | replica_politeness(nodes["c"])
        return all(kept.get(host) == delay_s for host in victim_hosts)

    # b asked for robots.txt of its hosts; their delay is at a successor before any page went.
    wait_until(known_to_successors, delay_s - 1, "b's Crawl-delays at the successors", interval=0.05)
    stats = web.stats(hosts=victim_hosts)["hosts"]
    assert all(stats[host]["requests"] == 1 for host in victim_hosts), stats  # robots.txt alone
    nodes["b"].kill()
    killed_at = web.stats(summary=True)["clock"]

    def taken_over() -> bool:
        seen = web.stats(hosts=victim_hosts, history=True)["hosts"]
        return all(sum(1 for started, _, _ in seen[h]["history"] if started > killed_at) >= 2 for h in victim_hosts)

    wait_until(taken_over, 4 * delay_s, "the successors' requests to b's hosts")
    gaps = {h: stats["min_gap_s"] for h, stats in web.stats(hosts=victim_hosts)["hosts"].items()}
    assert min(gaps.values()) >= delay_s - TOLERANCE_S, gaps
