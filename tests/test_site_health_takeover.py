"""A host paused for a challenge stays paused across a takeover (issue 47): its owner is
SIGKILLed during the pause, and the successor that takes the host over waits the pause out
(the pause is the host's durable politeness, sent to the successor as soon as it is decided,
as a Crawl-delay is). What testweb saw decides: after the first challenge, the host is asked
nothing until the pause is over, by any node; then every page is fetched."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing

from cluster_helpers import FAST_CLUSTER, SECURED, owner_of, peers_of, plan, wait_until
from conftest import read_crawl_log

from crawler_node.frontier import FRONTIER_FILENAME

HOSTS, PAGES = 9, 12
PAUSE_S = 8.0  # far longer than failure detection (under 3 s): a takeover could beat it
PROFILE = {"site-*.test": {"latency_ms": 250, "jitter_ms": 0, "challenge_rps": 4, "refusal_for_s": 2}}
NODE_ARGS = [*FAST_CLUSTER, *SECURED, "--host-limit-start", "3", "--refusal-pause-initial-s", str(PAUSE_S),
             "--refusal-url-budget", "20", "--refusal-forgive-s", "1"]


def replica_pause(node, host: str) -> float:
    """When ``node`` may next ask ``host``, by the politeness it keeps of a neighbour's host (0: none)."""
    with closing(sqlite3.connect(f"file:{node.data_dir / FRONTIER_FILENAME}?mode=ro", uri=True, timeout=5)) as db:
        row = db.execute("SELECT next_eligible FROM replica_hosts WHERE host = ?", (host,)).fetchone()
    return float(row[0]) if row else 0.0


def test_a_successor_keeps_the_pause_of_the_owner_it_replaces(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=17, profile=PROFILE, extra_args=["--history", "1000"])
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id, (host, port) in addresses.items():
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=[f"http://site-{k}.test/" for k in range(HOSTS)] if node_id == "a" else (),
                                    extra_args=NODE_ARGS)
    for node in nodes.values():
        node.wait_healthy(30)
    victims = wait_until(lambda: [f"site-{k}.test" for k in range(HOSTS)
                                  if owner_of(nodes["a"], f"site-{k}.test") == "b"], 30, "hosts of b's")

    def challenged() -> str | None:
        hosts = web.stats(hosts=victims)["hosts"]
        return next((host for host in victims if hosts[host].get("refused")), None)

    victim = wait_until(challenged, 60, "a challenge to one of b's hosts", interval=0.02)

    def pause_at_successor() -> bool:
        """b decided the pause and sent it on: a or c keeps it with b's host's replica."""
        return any(replica_pause(nodes[node_id], victim) > time.time() + 1.0 for node_id in ("a", "c"))

    wait_until(pause_at_successor, 10, "the pause at b's successor", interval=0.05)
    nodes["b"].kill()  # during the pause (8 s), well before its end
    killed_at = web.stats(summary=True)["clock"]

    # the successor fetches every page of the victim host, once the pause is over
    expected = {url for url in web.expected() if url.startswith(f"http://{victim}/")}

    def all_fetched() -> bool:
        fetched = {line["url"] for node in (nodes["a"], nodes["c"]) for line in read_crawl_log(node.data_dir)
                   if line["status"] == 200 and line["outcome"] == "ok"}
        fetched |= {line["url"] for line in read_crawl_log(nodes["b"].data_dir)
                    if line["status"] == 200 and line["outcome"] == "ok"}
        return expected <= fetched

    wait_until(all_fetched, 90, f"every page of {victim}", interval=0.5)
    history = web.stats(hosts=[victim], history=True)["hosts"][victim]["history"]
    requests = [(started, status) for started, status, path in history if path != "/robots.txt"]
    first = next(index for index, (_, code) in enumerate(requests) if code == 403)
    challenged_at = requests[first][0]
    assert killed_at < challenged_at + PAUSE_S * 0.9
    # requests sent before b saw the challenge come back as echoes of it; then nothing until
    # the pause (+-10%) is over, from b or from its successor
    later = [started for started, _ in requests[first + 1:] if started > challenged_at + 1.0]
    assert later, requests
    assert min(later) >= challenged_at + 0.9 * PAUSE_S, (challenged_at, later[:3], killed_at)
