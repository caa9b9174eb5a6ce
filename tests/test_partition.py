"""A partition in network namespaces (issue 14): three real nodes, each in a namespace of its own
(tests/netns_helpers.py), crawl testweb. Mid-crawl one node is cut off from the other two for
20 s (its links to them set down; it still reaches testweb), then the links come back. From
testweb's ground truth: no URL lost, at most 5% fetched twice, and every host fetched as its
robots.txt asks — one request at a time (peak concurrency 1) and never two closer than its
Crawl-delay — although both sides of the cut believed for a while that they crawl it.
"""

from __future__ import annotations

import os
import time

import pytest
from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, missing, wait_until
from netns_helpers import Network, available

from crawler_node.tools.node_process import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.tools]  # root, iproute2 (network namespaces)

HOSTS, PAGES = 50, 80  # 4,000 URLs
CRAWL_DELAY_S = 0.4  # per host: 80 pages take 32 s or more, so the crawl outlasts the cut
CUT_S = 20.0
DUPLICATE_SHARE_MAX = 0.05
PROFILE = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {CRAWL_DELAY_S}\n"}}
PORT = 8080  # every node has a namespace, hence a port space, of its own


@pytest.fixture
def network():
    why = available()
    if why is not None:
        if os.environ.get("CRAWLER_REQUIRE_NETNS"):
            pytest.fail(f"the partition test must run here (CRAWLER_REQUIRE_NETNS): {why}")
        pytest.skip(why)
    net = Network(["a", "b", "c"]).up()
    try:
        yield net
    finally:
        net.down()


def test_a_node_cut_off_for_20_s_loses_nothing_and_no_host_is_crawled_twice_at_once(
        network, start_testweb, tmp_path):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=61, profile=PROFILE, listen_host=network.root_address)
    expected = set(web.expected())
    peers = {name: f"http://{network.address(name)}:{PORT}" for name in network.names}
    nodes: dict[str, NodeProcess] = {}
    try:
        for index, name in enumerate(network.names):
            nodes[name] = NodeProcess(
                node_id=name, data_dir=tmp_path / name, host=network.address(name), port=PORT, proxy=web.url,
                peers=peers, seeds=[f"http://site-{i}.test/" for i in range(HOSTS)] if index == 0 else (),
                extra_args=[*FAST_CLUSTER, *SECURED, "--allow-host", "*"], wrapper=network.wrapper(name),
            ).start(wait=False)
        for node in nodes.values():
            node.wait_healthy(60)
        members = list(nodes.values())
        wait_until(lambda: web.stats(summary=True)["totals"]["requests"] >= 600, 90, "the crawl under way")

        network.cut("c")
        cut_at = time.monotonic()
        # The two sides see each other go: a and b find c down, c finds both down.
        wait_until(lambda: {m["id"]: m["state"] for m in nodes["a"].status()["members"]}["c"] == "down", 15,
                   "a finds c down")
        wait_until(lambda: {m["id"] for m in nodes["c"].status()["members"] if m["state"] == "down"} == {"a", "b"},
                   15, "c finds a and b down")
        time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_at)))  # the cut lasts 20 s, as asked
        network.heal("c")
        wait_until(lambda: all(m["state"] == "alive" for m in nodes["a"].status()["members"]), 30, "c back")

        wait_until(lambda: all(cluster_idle(node) for node in members), 240, "the cluster idle")
        assert not (lost := missing(members, expected)), lost
    finally:
        for node in nodes.values():
            node.stop(timeout_s=20)

    stats = web.stats()
    counts = {url: n for url, n in stats["urls"].items() if not url.endswith("/robots.txt")}
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    crowded = {host: h["peak_concurrency"] for host, h in stats["hosts"].items() if h["peak_concurrency"] > 1}
    close = {host: round(h["min_gap_s"], 4) for host, h in stats["hosts"].items()
             if h["min_gap_s"] is not None and h["min_gap_s"] < CRAWL_DELAY_S}
    print(f"partition: {len(expected)} URLs, {duplicates} fetched again ({duplicates / len(expected):.1%}), "
          f"{len(crowded)} hosts with two requests at once, {len(close)} closer than the Crawl-delay")
    assert expected <= set(counts)
    problems = []
    if duplicates > DUPLICATE_SHARE_MAX * len(expected):
        problems.append(f"{duplicates} duplicate fetches of {len(expected)}")
    if crowded:
        problems.append(f"hosts fetched by more than one request at once: {crowded}")
    if close:
        problems.append(f"hosts fetched closer than their Crawl-delay of {CRAWL_DELAY_S} s: {close}")
    assert not problems, "; ".join(problems)
