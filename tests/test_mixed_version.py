"""A cluster of two versions (issue 45): members of BASELINE (the last commit before the
refactor, tests/baseline_tree.py) and of the tree under test crawl together, their peer
messages going both ways, and a takeover between them loses nothing and keeps the Crawl-delay.

Three members, so that the two left after a loss keep their majority (cluster.fencing): one of
one version (a, the one killed) and two of the other (b, c), both ways round (a of BASELINE,
then a of head). Everything a sends goes to the other version and everything it receives
comes from it, so its own counters say what crossed each way: the URLs it forwarded and
received, the replicas of its queued and fetched URLs it sent. What it was sent of replicas
and politeness is read where it lands, in the receivers' replica of their neighbours (the
frontier's `replica` and `replica_hosts` tables, as test_takeover_politeness.py reads them).
Every host has a Crawl-delay, so its politeness rows travel; the delay is longer than failure
detection, so a successor that did not have a's politeness would ask a's hosts too soon.
What testweb saw decides: every expected URL fetched, and the smallest gap between two
requests to a host.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

import pytest
from baseline_tree import HEAD, Tree
from cluster_helpers import FAST_CLUSTER, SECURED, get_json, kill_and_reap, owner_of, peers_of, plan, wait_until
from conftest import roots

from crawler_node.frontier import FRONTIER_FILENAME
from crawler_node.tools.node_process import NodeProcess

HOSTS, PAGES, SEED = 9, 6, 47
# No images (each would be one more request spaced by the delay); more links between hosts
# than testweb's default (0.2), so that each member finds links to the others' hosts early.
WEB_ARGS = ("--images", "0", "--cross-link-prob", "0.6")
DELAY_S = 3.0  # longer than failure detection (~2 s here): a successor without a's politeness beats it
TOLERANCE_S = 0.05  # as test_takeover_politeness.py
PROFILE = {"site-*.test": {"latency_ms": 20, "robots": f"User-agent: *\nCrawl-delay: {DELAY_S}\n"}}


def local_status(node: NodeProcess) -> dict:
    return get_json(f"{node.url}/v1/status?scope=local&fresh=1")


def replica_politeness(node: NodeProcess) -> dict[str, float]:
    """host -> Crawl-delay of the neighbours' hosts whose politeness ``node`` keeps."""
    with closing(sqlite3.connect(f"file:{node.data_dir / FRONTIER_FILENAME}?mode=ro", uri=True, timeout=5)) as db:
        return dict(db.execute("SELECT host, crawl_delay FROM replica_hosts"))


def replica_hosts(node: NodeProcess) -> set[str]:
    """The neighbours' hosts of which ``node`` keeps a replica of URLs."""
    with closing(sqlite3.connect(f"file:{node.data_dir / FRONTIER_FILENAME}?mode=ro", uri=True, timeout=5)) as db:
        return {host for (host,) in db.execute("SELECT DISTINCT host FROM replica")}


def within(predicate: Callable[[], object], timeout_s: float) -> bool:
    """Whether ``predicate()`` came true within ``timeout_s`` (polled): the caller's assert
    says what did not."""
    try:
        wait_until(predicate, timeout_s, "", interval=0.2)
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize("killed", ["baseline", "head"], ids=lambda killed: f"{killed}-killed")
def test_members_of_two_versions_exchange_work_and_a_takeover_between_them_loses_nothing(
        start_testweb, start_node, baseline_tree: Tree, killed: str) -> None:
    versions = {"baseline": baseline_tree, "head": HEAD}
    lone, other = versions[killed], versions["head" if killed == "baseline" else "baseline"]
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=SEED, profile=PROFILE, extra_args=WEB_ARGS)
    expected = set(web.expected())
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {node_id: start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                 env=(lone if node_id == "a" else other).env(),
                                 seeds=roots(HOSTS) if node_id == "b" else (), extra_args=[*FAST_CLUSTER, *SECURED])
             for node_id, (host, port) in addresses.items()}
    for node in nodes.values():
        node.wait_healthy(30)
    victim, survivors = nodes["a"], [nodes["b"], nodes["c"]]
    owners = {f"site-{k}.test": owner_of(victim, f"site-{k}.test") for k in range(HOSTS)}
    a_hosts = {host for host, owner in owners.items() if owner == "a"}
    assert a_hosts and len(a_hosts) < HOSTS, f"a ({lone.name}) should own some hosts, not all: {owners}"

    def under_way() -> bool:
        """a has fetched pages of each of its hosts (robots.txt then pages, spaced by the
        delay), and has more queued."""
        status = local_status(victim)
        fetched = {row["host"]: row["fetched"] for row in status["hosts"]}
        return all(fetched.get(host, 0) >= 2 for host in a_hosts) and status["frontier"]["queued"] > 0

    def kept_by_successors() -> dict[str, float]:
        return replica_politeness(nodes["b"]) | replica_politeness(nodes["c"])

    wait_until(under_way, 60, f"a ({lone.name}) under way", interval=0.2)
    # a's politeness rows went out after its robots.txt requests, a delay or more ago.
    assert within(lambda: all(kept_by_successors().get(host) == DELAY_S for host in a_hosts), 2 * DELAY_S), (
        f"b and c ({other.name}) do not keep the Crawl-delay of a's ({lone.name}) hosts {sorted(a_hosts)}: "
        f"they keep {kept_by_successors()}")
    # What crossed before the loss, read where it landed, and what a says it sent and received.
    a_status = local_status(victim)
    a_kept_politeness, a_kept_replicas = replica_politeness(victim), replica_hosts(victim)
    others_kept_replicas = replica_hosts(nodes["b"]) | replica_hosts(nodes["c"])
    # a dies just after a request to one of its hosts started (its successors must wait it out).
    host = sorted(a_hosts)[0]
    before = web.stats(hosts=[host])["hosts"][host]["requests"]
    wait_until(lambda: web.stats(hosts=[host])["hosts"][host]["requests"] > before, DELAY_S + 10,
               f"a's next request to {host}", interval=0.01)
    kill_and_reap(victim)
    killed_at = web.stats(summary=True)["clock"]

    def survivors_now() -> dict[str, dict]:
        """What b and c say of a, of the takeover and of their work."""
        return {status["node_id"]: {"a": next(m["state"] for m in status["members"] if m["id"] == "a"),
                                    "promoted": status["cluster"]["counters"].get("replica_promoted", 0),
                                    "idle": status["idle"], "queued": status["frontier"]["queued"]}
                for status in (local_status(node) for node in survivors)}

    streak = 0

    def finished() -> bool:
        """b and c saw a go, took its queue over from their replica, and ran out of work, on
        three polls in a row (a URL one of them forwards to the other is in neither's totals
        for a moment)."""
        nonlocal streak
        now = survivors_now()
        done = (all(said["a"] == "down" and said["idle"] for said in now.values())
                and sum(said["promoted"] for said in now.values()) > 0)
        streak = streak + 1 if done else 0
        return streak >= 3

    assert within(finished, 90), f"b and c ({other.name}) did not take a's hosts over and finish: {survivors_now()}"
    promoted = {node_id: said["promoted"] for node_id, said in survivors_now().items()}

    # Both ways, before the loss: a's batches, replicas of queued and fetched URLs...
    sent = a_status["cluster"]["counters"]
    assert sent["forwarded"] > 0 and sent["sent_replica"] > 0 and sent["sent_seen"] > 0, (
        f"a ({lone.name}) sent {other.name} too little: {sent}")
    assert others_kept_replicas & a_hosts, f"b, c ({other.name}) keep no replica of a's hosts {sorted(a_hosts)}"
    # ... and what b and c sent a: batches, replicas, politeness of their hosts.
    assert sent["received"] > 0, f"a ({lone.name}) received no URL from {other.name}: {sent}"
    assert a_kept_replicas - a_hosts, f"a ({lone.name}) keeps no replica of b's and c's hosts: {a_kept_replicas}"
    their_politeness = {host: delay for host, delay in a_kept_politeness.items() if host not in a_hosts}
    assert their_politeness and set(their_politeness.values()) == {DELAY_S}, (
        f"a ({lone.name}) keeps no politeness of b's and c's hosts: {a_kept_politeness}")
    # testweb's ground truth: nothing lost, and no Crawl-delay broken, across the takeover too.
    stats = web.stats()
    fetched = {url for url, count in stats["urls"].items() if count > 0}
    lost = sorted(expected - fetched)
    assert not lost, f"{len(lost)} of {len(expected)} URLs never fetched, e.g. {lost[:5]}"
    gaps = {name: host_stats["min_gap_s"] for name, host_stats in stats["hosts"].items()}
    broken = {name: gap for name, gap in gaps.items() if gap is not None and gap < DELAY_S - TOLERANCE_S}
    assert not broken, f"Crawl-delay {DELAY_S}s broken (smallest gaps; a's hosts: {sorted(a_hosts)}): {broken}"
    # For the record: the gap at a's hosts across the kill, and the pages fetched twice (a's
    # fetched URLs whose replica it had not sent yet).
    history = web.stats(hosts=sorted(a_hosts), history=True)["hosts"]
    starts = {name: [start for start, _, _ in seen["history"]] for name, seen in history.items()}
    across = min(min(s for s in times if s > killed_at) - max(s for s in times if s <= killed_at)
                 for times in starts.values() if any(s > killed_at for s in times))
    twice = sum(count - 1 for url, count in stats["urls"].items() if count > 1 and not url.endswith("robots.txt"))
    print(f"\n{lone.name} killed: {len(expected)} URLs, a owned {len(a_hosts)} hosts and sent {sent['forwarded']} "
          f"URLs, {sent['sent_replica']} queued and {sent['sent_seen']} fetched replicas, received "
          f"{sent['received']}; promoted {promoted}; fetched twice {twice}; smallest gap "
          f"{min(gap for gap in gaps.values() if gap is not None):.3f} s, across the kill {across:.3f} s")
