"""``--ring-key-by domain`` on three real nodes: the hosts of one registrable domain are crawled
by one member, the one every member names as their owner.

testweb serves two hosts (www. and img.) of each of twelve registrable domains, under an ICANN
suffix (co.uk), a private one (github.io) and a deep one (k12.ak.us), 3 pages each. The node
ids are chosen so that keyed by host the ring would split some domain's two hosts between
members (so the check could fail) and keyed by domain every member owns some domain.
"""

from __future__ import annotations

import itertools

from cluster_helpers import FAST_CLUSTER, SECURED, cluster_idle, logged_urls, owner_of, peers_of, plan, wait_until

from crawler_node.cluster.ring import Ring, ring_key
from crawler_node.settings import Settings

DOMAINS = [f"shop-{i}.co.uk" for i in range(4)] + [f"user-{i}.github.io" for i in range(4)] + \
    [f"school-{i}.k12.ak.us" for i in range(4)]
HOSTS = {domain: [f"www.{domain}", f"img.{domain}"] for domain in DOMAINS}


def spread_ids() -> list[str]:
    vnodes = Settings().ring_vnodes
    for k in itertools.count():
        ids = [f"d{k}-a", f"d{k}-b", f"d{k}-c"]
        ring = Ring(ids, vnodes=vnodes)
        by_domain = {ring.owner(ring_key(domain, by="domain")) for domain in DOMAINS}
        split_by_host = any(len({ring.owner(ring_key(h, by="host")) for h in hosts}) > 1 for hosts in HOSTS.values())
        if by_domain == set(ids) and split_by_host:
            return ids
        assert k < 1000, "no three ids spread these domains"
    raise AssertionError("unreachable")


def test_the_hosts_of_one_registrable_domain_land_on_one_member(start_testweb, start_node):
    for domain, hosts in HOSTS.items():
        assert {ring_key(host, by="domain") for host in hosts} == {domain}
    web = start_testweb(hosts=0, pages=3, seed=46, extra_args=["--images", "0"],
                        profile={host: {"latency_ms": 2} for hosts in HOSTS.values() for host in hosts})
    expected = set(web.expected())
    ids = spread_ids()
    addresses = plan(ids)
    peers = peers_of(addresses)
    nodes = [start_node(node_id, host=addresses[node_id][0], port=addresses[node_id][1], proxy=web.url, peers=peers,
                        wait=False, seeds=[f"http://{h}/" for hosts in HOSTS.values() for h in hosts] if i == 0 else (),
                        extra_args=[*FAST_CLUSTER, *SECURED, "--ring-key-by", "domain"])
             for i, node_id in enumerate(ids)]
    for node in nodes:
        node.wait_healthy(30)
    wait_until(lambda: cluster_idle(nodes[1]), 120, "cluster idle")

    logs = logged_urls(nodes)
    assert {line["url"] for lines in logs.values() for line in lines} == expected
    crawled_by: dict[str, set[str]] = {}
    for node_id, lines in logs.items():
        for line in lines:
            crawled_by.setdefault(ring_key(line["host"], by="domain"), set()).add(node_id)
    assert set(crawled_by) == set(DOMAINS)
    for domain, hosts in HOSTS.items():
        owners = {owner_of(node, host) for node in nodes for host in hosts}  # every member agrees
        assert len(owners) == 1, (domain, owners)
        assert crawled_by[domain] == owners, (domain, crawled_by[domain], owners)
    assert all(logs.values()), "every member crawled a domain of its own"
