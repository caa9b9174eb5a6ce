"""What a cluster of N nodes on N machines sends between its members: a cost model, checked
against real nodes in network namespaces, and projected to 100 nodes (issue 18).

  (1) the model (pure; tests/test_cost_model.py): per page fetched, a node forwards the links
      it found that another member owns — links x cross-host share x (1 - own arc share),
      less the links its parser has sent already — and replicates each URL it queues and each
      one it fetches to the host's successor; every heartbeat_interval_s it asks each of the
      N-1 others for their member list (an answer of a fixed size: an unchanged list is left
      out, and the per-IP part acknowledges the asker alone). A dead node's
      arc (1/N of the hosts) is taken over from the replicas its successors already hold, and
      handed back to it when it returns;
  (2) the measurement: 3 and 5 nodes, each in a network namespace of its own with a veth to
      every other (tests/netns_helpers.py), crawl testweb; the veths' byte counters give what
      crossed between members (heartbeats included, TCP/IP included), the nodes' counters
      what they sent. Heartbeats alone are measured first, on the idle cluster. Needs root
      (skipped with a message otherwise);
  (3) the projection to 100 nodes at a given pages/s per node.

    python bench/cost_model.py [--hosts 30 --pages 100] [--sizes 3,5] [--json]
    python bench/cost_model.py --model-only [--pages-per-s 1000 --links-per-page 60 ...]

--json writes bench/results/cost_model.json. Every process is started and stopped by PID,
and the namespaces are removed whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
TESTS = Path(__file__).resolve().parents[1] / "tests"

# On a veth: Ethernet 14 + IPv4 20 + TCP 20 with the timestamp option 12. MSS on a 1,500 MTU.
PACKET_OVERHEAD = 66
MSS = 1448


# ====================================================================== (1) the model
@dataclass(frozen=True)
class Params:
    """What the model is computed from. Sizes are bytes; *_row: one row of a POST /v1/urls
    msgpack body (cluster.wire.encode_batch), measured by encoding real rows."""

    nodes: int
    pages_per_s: float = 1000.0  # per node
    links_per_page: float = 6.5  # distinct links on a page
    cross_host_share: float = 0.06  # of those, links to another host
    own_share: float | None = None  # this node's share of the hosts (host-key spread); None: 1/N
    already_sent_share: float = 0.0  # cross-owner links the parser has sent once already
    new_urls_per_page: float = 1.0  # URLs queued per page fetched (1 when a crawl ends; more while it grows)
    forward_row: float = 99.0  # a URL to crawl: url + via + depth, priority, hops, redirects, seen
    queued_replica_row: float = 85.0  # a queued URL for the successor: url + via + depth, priority
    fetched_replica_row: float = 37.0  # a fetched URL for the successor: the url alone
    politeness_entry: float = 32.0  # [host, next_eligible, crawl_delay], once per host per batch
    hosts: int = 1_000_000  # hosts being crawled, over all members
    # A sender's cycle: forward_linger_s (0.05 s) for its batch to fill, then the POST, the peer's
    # commit and the ack, while the next batch fills (~0.1 s on these loaded 2-core machines).
    forward_cycle_s: float = 0.15
    forward_batch: int = 500  # rows per POST at most (settings)
    post_fixed: float = 900.0  # a POST's HTTP request and 202 answer headers and body, and 3 packets' headers
    heartbeat_interval_s: float = 0.5
    heartbeat_fixed: float = 700.0  # GET /v1/members, the answer's headers and fixed fields, 3 packets' headers
    # A member asks with the digest of the peer's list it holds and its own id: the answer leaves
    # an unchanged list out and acknowledges only the asker's per-IP announcement, so nothing in
    # it grows with N (before: {"id", "url", "state"} and an acknowledgement per member, ~100
    # bytes each). The whole list comes after a change only: a join, a restart.
    heartbeat_per_member: float = 0.0
    # CPU of one heartbeat exchange, the asker's and the answerer's together (µs), from an idle
    # cluster's CPU less as many idle nodes alone (measure): a node's timers and upkeep are not in it.
    heartbeat_cpu_us: float = 400.0
    # The progress log (daemon.ProgressLog) reads every peer's status (GET /v1/status?scope=local)
    # only when a peer's heartbeat says its work changed in a way a read could tell (cluster.
    # activity): once as a crawl ends, after a pause. Its lines while crawling are made of the
    # heartbeats' activities, and an idle cluster reads none. (Until 2026-12-02 every member read
    # all of them for each progress line, and an idle member every 5 s.) A status lists every member.
    status_fixed: float = 4_360.0  # request and answer on the wire, less the member list
    status_per_member: float = 180.0  # (5,031 - 4,674) / 2: the exchange with 5 members and with 3
    # A batch's body is gzip'd from gzip_from_bytes of msgpack (cluster.wire.gzipped): gzip'd
    # bytes per msgpack byte at a batch's rows, (rows, ratio) points measured on real rows
    # (gzip_curve); between them, by log(rows). Empty: bodies as they are (an upper bound).
    gzip_curve: tuple[tuple[float, float], ...] = ()
    gzip_from_bytes: float = 128.0  # cluster.wire.GZIP_FROM_BYTES

    def share_owned(self) -> float:
        return 1.0 / self.nodes if self.own_share is None else self.own_share


def forwarded_share(p: Params) -> float:
    """Share of a page's cross-host links that another member owns: 0 for one node, 1 - 1/N
    for N nodes with an even spread of hosts over the ring."""
    return 0.0 if p.nodes <= 1 else 1.0 - p.share_owned()


def forwarded_per_page(p: Params) -> float:
    return p.links_per_page * p.cross_host_share * forwarded_share(p) * (1.0 - p.already_sent_share)


def replica_rows_per_page(p: Params) -> tuple[float, float]:
    """(queued, fetched) replica rows a node sends per page: one per URL it queues and one per
    page it fetches, to the host's successor; none for a node alone."""
    return (0.0, 0.0) if p.nodes <= 1 else (p.new_urls_per_page, 1.0)


def rows_per_page(p: Params) -> float:
    """Rows a node sends per page fetched: forwarded links and both replicas."""
    return forwarded_per_page(p) + sum(replica_rows_per_page(p))


def rows_per_batch(p: Params) -> float:
    """Rows in one POST: a node's rows spread over its N-1 peers (owners and successors are
    spread evenly by the ring), and a sender posts what arrived during its last cycle. At a fixed
    pages/s, batches shrink as N grows, and each row pays a larger share of a POST."""
    if p.nodes <= 1:
        return 1.0
    per_peer_per_s = p.pages_per_s * rows_per_page(p) / (p.nodes - 1)
    return min(float(p.forward_batch), max(1.0, per_peer_per_s * p.forward_cycle_s))


def politeness_per_page(p: Params) -> float:
    """Politeness entries per page: one per host per batch, for the hosts this node crawls
    whose successor the batch goes to (hosts / N / (N-1) of them), at most one per fetched row."""
    if p.nodes <= 1:
        return 0.0
    fetched_rows = rows_per_batch(p) / rows_per_page(p)  # pages whose fetched replica is in one batch
    hosts_per_link = p.hosts / p.nodes / (p.nodes - 1)
    return min(1.0, hosts_per_link / fetched_rows) if fetched_rows else 0.0


def gzip_ratio(p: Params, rows: float) -> float:
    """gzip'd bytes per msgpack byte of a batch of ``rows`` rows (p.gzip_curve; 1.0 without)."""
    curve = sorted(p.gzip_curve)
    if not curve:
        return 1.0
    if rows <= curve[0][0]:
        return curve[0][1]
    for (r0, g0), (r1, g1) in zip(curve, curve[1:], strict=False):
        if rows <= r1:
            return g0 + (g1 - g0) * (math.log(rows) - math.log(r0)) / (math.log(r1) - math.log(r0))
    return curve[-1][1]


def body_bytes(payload: float, rows: float, p: Params) -> float:
    """What ``rows`` rows of ``payload`` msgpack bytes in all weigh as batch bodies: gzip'd
    where a batch's msgpack reaches gzip_from_bytes (cluster.wire.gzipped)."""
    if rows <= 0:
        return 0.0
    per_batch = rows_per_batch(p)
    if payload / rows * per_batch < p.gzip_from_bytes:
        return payload
    return payload * gzip_ratio(p, per_batch)


def wire_bytes(payload: float, rows: float, p: Params) -> float:
    """Bytes on the wire for ``rows`` rows of ``payload`` msgpack bytes in all, sent in batches
    of rows_per_batch: the bodies (gzip'd: body_bytes), each batch's fixed HTTP part, and
    TCP/IP headers on every segment and on an ACK for every second one."""
    if rows <= 0:
        return 0.0
    body = body_bytes(payload, rows, p)
    segments = body / MSS
    return body + 1.5 * segments * PACKET_OVERHEAD + (rows / rows_per_batch(p)) * p.post_fixed


def forward_bytes_per_page(p: Params) -> float:
    rows = forwarded_per_page(p)
    return wire_bytes(rows * p.forward_row, rows, p)


def replica_bytes_per_page(p: Params) -> float:
    queued, fetched = replica_rows_per_page(p)
    if queued + fetched == 0:
        return 0.0
    payload = (queued * p.queued_replica_row + fetched * p.fetched_replica_row
               + politeness_per_page(p) * p.politeness_entry)
    return wire_bytes(payload, queued + fetched, p)


def heartbeat_exchange_bytes(p: Params) -> float:
    """One heartbeat on the wire, request and answer (of a size that does not grow with N: see
    Params.heartbeat_per_member)."""
    return p.heartbeat_fixed + p.heartbeat_per_member * p.nodes


def heartbeat_messages_per_s(p: Params) -> float:
    """Heartbeats a node takes part in per second: it asks N-1 peers and N-1 peers ask it."""
    return 2.0 * (p.nodes - 1) / p.heartbeat_interval_s


def heartbeat_cpu_share(p: Params) -> float:
    """A node's CPU (share of one core) spent on heartbeats: it takes part in 2(N-1) exchanges
    per interval, and pays half of each (one side). O(N) per node, like the bytes."""
    return heartbeat_messages_per_s(p) * p.heartbeat_cpu_us / 2 / 1e6


def heartbeat_bytes_per_s(p: Params) -> float:
    """A node's heartbeat bytes per second, sent and received: O(N) exchanges of O(1) bytes."""
    return heartbeat_messages_per_s(p) * heartbeat_exchange_bytes(p)


def status_exchange_bytes(p: Params) -> float:
    return p.status_fixed + p.nodes * p.status_per_member


def status_read_bytes(p: Params) -> float:
    """What one change costs a node (a crawl ending, a pause): it reads N-1 statuses and N-1
    members read its own, O(N) exchanges of O(N) bytes, once; nothing in a steady crawl or idle."""
    return 2.0 * (p.nodes - 1) * status_exchange_bytes(p)


def per_node(p: Params) -> dict[str, float]:
    """A node's traffic to and from the other members (bytes/s sent + received: in a steady
    crawl each node receives what it sends, so a node's link carries twice its sending)."""
    forward = forward_bytes_per_page(p) * p.pages_per_s
    replica = replica_bytes_per_page(p) * p.pages_per_s
    heartbeat = heartbeat_bytes_per_s(p)
    total = 2 * (forward + replica) + heartbeat
    return {"forwarded_urls_per_page": forwarded_per_page(p),
            "forward_bytes_per_page": forward_bytes_per_page(p), "replica_bytes_per_page": replica_bytes_per_page(p),
            "forward_bytes_per_s": 2 * forward, "replica_bytes_per_s": 2 * replica,
            "heartbeat_bytes_per_s": heartbeat, "status_read_bytes_per_change": status_read_bytes(p),
            "heartbeat_cpu_share": heartbeat_cpu_share(p),
            "total_bytes_per_s": total,
            "per_peer_link_bytes_per_s": total / max(1, p.nodes - 1)}


def cluster_total_bytes_per_s(p: Params) -> float:
    """Everything the members send each other: O(N) for the data, O(N^2) for heartbeats."""
    return p.nodes * (forward_bytes_per_page(p) + replica_bytes_per_page(p)) * p.pages_per_s \
        + p.nodes * heartbeat_bytes_per_s(p) / 2


def takeover(p: Params, *, queued: float, fetched: float) -> dict[str, float]:
    """A member dies holding ``queued`` URLs and having fetched ``fetched`` (the whole cluster's
    figures, spread evenly). Its arc's replica is at its successors already (with 160 virtual
    points per member, spread over all N-1 survivors); a takeover moves it from the replica
    into their queues, locally. What crosses the wire is what the others had in their
    outboxes for it, rerouted — URLs they would have forwarded anyway."""
    survivors = max(1, p.nodes - 1)
    arc_queued, arc_fetched = queued / p.nodes, fetched / p.nodes
    return {"promoted_rows": arc_queued, "seen_from_replica": arc_fetched,
            "promoted_per_survivor": arc_queued / survivors, "wire_bytes": 0.0,
            "replica_prepaid_bytes": wire_bytes(arc_queued * p.queued_replica_row
                                                + arc_fetched * p.fetched_replica_row,
                                                arc_queued + arc_fetched, p)}


def handback(p: Params, *, queued: float, outage_s: float) -> dict[str, float]:
    """The member returns (its data directory kept) after ``outage_s``: the survivors hand back
    what they hold of its hosts, the queued URLs (about the arc's queue: what the takers fetched
    their pages added) as URLs to crawl, the pages fetched for it meanwhile as seen URLs — both
    as full forward rows."""
    arc_queued = queued / p.nodes
    fetched_meanwhile = outage_s * p.pages_per_s  # the survivors crawl its arc at its rate
    rows = arc_queued + fetched_meanwhile
    return {"rows": rows, "queued_rows": arc_queued, "seen_rows": fetched_meanwhile,
            "wire_bytes": wire_bytes(rows * p.forward_row, rows, p)}


def give_back(p: Params, *, queued: float, fetched: float) -> dict[str, float]:
    """The member returns with an empty data directory: its successors send it their whole
    replica of its arc, queued rows to crawl and fetched rows as seen (forward rows)."""
    rows = (queued + fetched) / p.nodes
    return {"rows": rows, "wire_bytes": wire_bytes(rows * p.forward_row, rows, p)}


def projection(base: Params, sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        p = replace(base, nodes=n)
        node = per_node(p)
        rows.append({"nodes": n, **{k: round(v, 4 if k.endswith("_share") else 2) for k, v in node.items()},
                     "heartbeat_share": round(node["heartbeat_bytes_per_s"] / node["total_bytes_per_s"], 4)
                     if node["total_bytes_per_s"] else 0.0,
                     "cluster_bytes_per_s": round(cluster_total_bytes_per_s(p), 1)})
    return rows


def heartbeat_crossover(base: Params, limit: int = 10_000) -> int | None:
    """The smallest N at which a node's heartbeats cost more than its forwarding and replicas."""
    for n in range(2, limit + 1):
        node = per_node(replace(base, nodes=n))
        if node["heartbeat_bytes_per_s"] > node["forward_bytes_per_s"] + node["replica_bytes_per_s"]:
            return n
    return None


# ====================================================================== row sizes, from real rows
def row_sizes(urls: list[str], vias: list[str]) -> dict[str, float]:
    """msgpack bytes per row of each kind, from encode_batch over real URLs (batches of 500),
    and of one politeness entry."""
    import msgpack

    from crawler_node.cluster.wire import encode_batch
    from crawler_node.core.urls import host_of
    from crawler_node.frontier.outbox import OutboxRow
    from crawler_node.frontier.records import HostPoliteness, UrlEntry

    entries = [UrlEntry(url, host_of(url), depth=3, via=via) for url, via in zip(urls, vias, strict=True)]
    kinds = {"forward_row": {"seen": False}, "queued_replica_row": {"seen": False, "replica": True},
             "fetched_replica_row": {"seen": True, "replica": True}}
    sizes = {}
    for kind, flags in kinds.items():
        total = 0
        for start in range(0, len(entries), 500):
            rows = [OutboxRow(i, e, **flags) for i, e in enumerate(entries[start:start + 500])]
            total += len(msgpack.packb(encode_batch(rows))) - len(msgpack.packb({"urls": []}))
        sizes[kind] = total / len(entries)
    hosts = sorted({e.host for e in entries})
    plain = [OutboxRow(i, UrlEntry(f"http://{h}/", h), seen=True, replica=True) for i, h in enumerate(hosts)]
    polite = [replace(row, politeness=HostPoliteness(row.entry.host, time.time(), 0.0)) for row in plain]
    sizes["politeness_entry"] = (len(msgpack.packb(encode_batch(polite))) - len(msgpack.packb(encode_batch(plain)))
                                 - len(msgpack.packb({"hosts": []})) + 1) / len(hosts)
    sizes["mean_url_chars"] = sum(map(len, urls)) / len(urls)
    return sizes


def gzip_curve(urls: list[str], vias: list[str], mix: tuple[float, float, float],
               batches: tuple[int, ...] = (1, 2, 3, 5, 10, 30, 100, 300, 500)) -> tuple[tuple[float, float], ...]:
    """(rows, gzip'd bytes per msgpack byte) of batches of real rows, as cluster.wire.gzipped
    sends them: rows of the three kinds in the proportions ``mix`` (forwarded, queued replica,
    fetched replica), the sample shuffled (a batch's rows share hosts and vias only by chance:
    a real batch holds a page's links together, so this errs on the large side)."""
    import random

    import msgpack

    from crawler_node.cluster.wire import encode_batch, gzipped
    from crawler_node.core.urls import host_of
    from crawler_node.frontier.outbox import OutboxRow
    from crawler_node.frontier.records import UrlEntry

    pairs = list(zip(urls, vias, strict=True))
    random.Random(18).shuffle(pairs)
    urls, vias = [u for u, _ in pairs], [v for _, v in pairs]
    flags = ({"seen": False}, {"seen": False, "replica": True}, {"seen": True, "replica": True})
    total = sum(mix)
    kinds = [k for k, share in enumerate(mix) for _ in range(round(share / total * 100))]
    curve = []
    for size in batches:
        packed = sent = 0
        for start in range(0, len(urls) - size + 1, max(size, len(urls) // 20)):
            rows = [OutboxRow(i, UrlEntry(url, host_of(url), depth=3, via=via), **flags[kinds[i % len(kinds)]])
                    for i, (url, via) in enumerate(zip(urls[start:start + size], vias[start:start + size],
                                                       strict=True))]
            body = msgpack.packb(encode_batch(rows))
            packed += len(body)
            sent += len(gzipped(body)[0])
        curve.append((float(size), sent / packed))
    return tuple(curve)


# ====================================================================== the testweb graph
def graph_figures(hosts: int, pages: int, seed: int, node_ids: list[str]) -> dict:
    """From testweb's own graph and the cluster's ring: links per page, the cross-host share,
    and the URLs each node must forward (a distinct (discoverer, URL) pair whose owner is
    another member: the parser sends each link once)."""
    from crawler_node.cluster.ring import Ring, ring_key
    from crawler_node.core.urls import host_of
    from crawler_node.testweb.graph import SyntheticWeb

    web = SyntheticWeb(hosts=[f"site-{k}.test" for k in range(hosts)], pages=pages, seed=seed)
    ring = Ring(node_ids)
    owner = {}

    def owner_of(host: str) -> str:
        if host not in owner:
            owner[host] = ring.owner(ring_key(host))
        return owner[host]

    expected = web.expected_urls()
    links = cross = cross_other_owner = 0
    sent: set[tuple[str, str]] = set()
    vias: dict[str, str] = {}
    for url in expected:
        host = host_of(url)
        targets = set(web.links(host, url.split(host, 1)[1] or "/"))
        links += len(targets)
        for target in targets:
            vias.setdefault(target, url)
            target_host = host_of(target)
            if target_host != host:
                cross += 1
                if owner_of(target_host) != owner_of(host):
                    cross_other_owner += 1
                    sent.add((owner_of(host), target))
    shares = {node: sum(1 for h in web.hosts if owner_of(h) == node) / len(web.hosts) for node in node_ids}
    return {"urls": len(expected), "links_per_page": links / len(expected), "cross_host_share": cross / links,
            "cross_other_owner_share": cross_other_owner / cross if cross else 0.0,
            "forwarded_links": len(sent), "already_sent_share": 1 - len(sent) / cross_other_owner
            if cross_other_owner else 0.0, "host_shares": shares,
            "seeds_forwarded": sum(1 for h in web.hosts if owner_of(h) != node_ids[0]),
            "sample_urls": expected, "sample_vias": [vias.get(u, u) for u in expected]}


# ====================================================================== (2) the measurement
def _ns_links(ns: str) -> dict[str, dict]:
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return {link["ifname"]: link["stats64"] for link in json.loads(out)}


def _ns_routes(ns: str) -> dict[str, str]:
    """device -> the address it routes to (a veth to one other namespace each)."""
    out = subprocess.run(["ip", "-n", ns, "-j", "route", "show"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return {route["dev"]: route["dst"].split("/")[0] for route in json.loads(out)}


class MeshCounters:
    """Bytes and packets each node sent to each other node, from its veths' TX counters (the
    veth to the root namespace, testweb's and the bench's, is left out)."""

    def __init__(self, net) -> None:
        self._net = net
        address_of = {net.address(name): name for name in net.names}
        self._devices = {}  # node -> {device: peer}
        for name in net.names:
            routes = _ns_routes(net.ns(name))
            self._devices[name] = {dev: address_of[dst] for dev, dst in routes.items() if dst in address_of}

    def read(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(sender, receiver) -> (bytes, packets) sent so far."""
        sent = {}
        for name, devices in self._devices.items():
            stats = _ns_links(self._net.ns(name))
            for dev, peer in devices.items():
                sent[(name, peer)] = (stats[dev]["tx"]["bytes"], stats[dev]["tx"]["packets"])
        return sent

    @staticmethod
    def delta(after: dict, before: dict) -> dict[tuple[str, str], tuple[int, int]]:
        return {key: (after[key][0] - before[key][0], after[key][1] - before[key][1]) for key in after}


def heartbeat_path(asker: str, whole: dict | None = None) -> str:
    """The path of a member's heartbeat to a peer whose whole answer was `whole` (with the
    digest of the list it merged from it; cluster.heartbeats)."""
    digest = (whole or {}).get("members_digest") or "0" * 16
    return f"/v1/members?from={asker}&known={digest}"


def _get(url: str, secret: str, timeout: float = 5.0) -> tuple[dict, int, int]:
    """(JSON, body bytes, status line + header bytes) of a GET (no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    with opener.open(request, timeout=timeout) as response:
        body = response.read()
        headers = len("HTTP/1.1 200 OK\r\n") + sum(len(k) + len(v) + 4 for k, v in response.headers.items()) + 2
        return json.loads(body), len(body), headers


def _post_answer_bytes(url: str, secret: str) -> int:
    """Status line, headers and body of a node's 202 to a POST /v1/urls of one URL it has."""
    import msgpack

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    body = msgpack.packb({"urls": [{"url": "http://site-0.test/"}]})
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/msgpack"}
    request = urllib.request.Request(f"{url}/v1/urls", data=body, method="POST", headers=headers)
    with opener.open(request, timeout=5) as response:
        body = response.read()
        return (len(f"HTTP/1.1 {response.status} Accepted\r\n") + len(body) + 2
                + sum(len(k) + len(v) + 4 for k, v in response.headers.items()))


SECRET = "cost-model-secret"
PORT = 8080


def measure(size: int, hosts: int, pages: int, seed: int, idle_s: float, workdir: Path) -> dict:
    sys.path.insert(0, str(TESTS))
    from netns_helpers import Network

    from crawler_node.daemon import IDLE_CHECK_S
    from crawler_node.testweb.process import TestwebProcess
    from crawler_node.tools import client
    from crawler_node.tools.node_process import NodeProcess

    names = [f"n{i}" for i in range(size)]
    net = Network(names, net=size).up()
    try:
        with TestwebProcess(hosts=hosts, pages=pages, seed=seed, listen_host=net.root_address) as web, \
                contextlib.ExitStack() as stack:
            peers = {name: f"http://{net.address(name)}:{PORT}" for name in names}
            nodes = {}
            for name in names:
                node = NodeProcess(node_id=name, data_dir=workdir / f"{size}-{name}", host=net.address(name),
                                   port=PORT, proxy=web.url, peers=peers, wrapper=net.wrapper(name),
                                   extra_args=["--secret", SECRET, "--allow-host", "*", "--log-level", "WARNING"])
                node.start(wait=False)
                stack.callback(node.stop, 20)
                nodes[name] = node
            for node in nodes.values():
                node.wait_healthy(60)
            status = lambda node: _get(f"{node.url}/v1/status?scope=local", SECRET)[0]  # noqa: E731
            _wait(lambda: all(all(m["state"] == "alive" for m in status(n)["members"]) for n in nodes.values()),
                  60, "every member alive in every view")
            # The one-off exchanges of a start are over: the control sync, the per-IP acks, and the
            # progress log's first reads of each peer's status (up to two rounds, until a read finds
            # the cluster idle with every peer's activity known: cluster.activity).
            time.sleep(2 * IDLE_CHECK_S + 1.0)
            mesh = MeshCounters(net)
            cpu_before = sum(_tree_cpu(node.pid) for node in nodes.values())
            before, t0 = mesh.read(), time.monotonic()
            time.sleep(idle_s)
            idle = MeshCounters.delta(mesh.read(), before)
            idle_wall = time.monotonic() - t0
            idle_cpu = sum(_tree_cpu(node.pid) for node in nodes.values()) - cpu_before
            # read after the peers' per-IP acknowledgements are in it, as a heartbeat finds it
            # as a member's heartbeat asks: with its id and the digest of the list it holds
            whole, _, _ = _get(f"{nodes[names[0]].url}/v1/members", SECRET)
            answer, answer_body, answer_headers = _get(f"{nodes[names[0]].url}{heartbeat_path(names[1], whole)}",
                                                       SECRET)
            ips = answer.get("ips")
            bare = {**answer, "members": [], "ips": {**ips, "seen": {}} if isinstance(ips, dict) else ips}
            if "members" not in answer:
                del bare["members"]
            answer_fixed = len(json.dumps(bare))
            _, status_body, status_headers = _get(f"{nodes[names[0]].url}/v1/status?scope=local", SECRET)

            start_counters = {name: status(node) for name, node in nodes.items()}
            before, t0 = mesh.read(), time.monotonic()
            client.submit(nodes[names[0]].url, [f"http://site-{k}.test/" for k in range(hosts)], secret=SECRET)
            _wait(lambda: all(status(n)["idle"] for n in nodes.values()), 120, "the crawl done")
            wall = time.monotonic() - t0
            crawl = MeshCounters.delta(mesh.read(), before)
            end = {name: status(node) for name, node in nodes.items()}
            post_answer = _post_answer_bytes(nodes[names[0]].url, SECRET)  # a duplicate by now
    finally:
        net.down()
    run = _summarise(size, names, idle, idle_wall, crawl, wall, start_counters, end,
                     answer_body=answer_body, answer_headers=answer_headers)
    alone = solo_idle_cpu_s_per_s(idle_s, workdir / f"{size}-alone")
    exchanges = size * (size - 1) * idle_wall / 0.5  # the default heartbeat_interval_s
    run["idle_cpu_ms_per_s_node"] = 1000 * idle_cpu / idle_wall / size
    run["alone_idle_cpu_ms_per_s"] = 1000 * alone
    run["heartbeat_cpu_us_per_exchange"] = 1e6 * max(0.0, idle_cpu - size * alone * idle_wall) / exchanges
    run["status_answer_bytes"] = status_body + status_headers
    run["members_answer_per_member"] = (answer_body - answer_fixed) / size
    run["post_answer_bytes"] = post_answer
    return run


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if predicate():
                return
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not after {timeout_s} s")


def _cluster_counter(statuses: dict, key: str) -> int:
    return sum(s["cluster"]["counters"].get(key, 0) for s in statuses.values())


def _tree_cpu(pid: int) -> float:
    bench = str(Path(__file__).resolve().parent)
    if bench not in sys.path:  # imported by the tests rather than run from bench/
        sys.path.insert(0, bench)
    from throughput import process_tree_cpu  # psutil over a node's processes

    return process_tree_cpu(pid)


def solo_idle_cpu_s_per_s(idle_s: float, data_dir: Path) -> float:
    """CPU-seconds per second of one idle node alone (its timers and upkeep), on loopback."""
    from crawler_node.daemon import IDLE_CHECK_S
    from crawler_node.tools.node_process import NodeProcess

    with NodeProcess(node_id="alone", data_dir=data_dir, extra_args=["--secret", SECRET, "--log-level", "WARNING"]) \
            as node:
        time.sleep(2 * IDLE_CHECK_S + 1.0)  # past its start, as the cluster's window is
        before, t0 = _tree_cpu(node.pid), time.monotonic()
        time.sleep(idle_s)
        return (_tree_cpu(node.pid) - before) / (time.monotonic() - t0)


def _summarise(size, names, idle, idle_wall, crawl, wall, start, end, *, answer_body, answer_headers) -> dict:
    idle_bytes = sum(b for b, _ in idle.values())
    idle_packets = sum(n for _, n in idle.values())
    exchanges = size * (size - 1) * idle_wall / 0.5  # the default heartbeat_interval_s
    counters = {key: _cluster_counter(end, key) - _cluster_counter(start, key)
                for key in ("forwarded", "sent_seen", "sent_replica", "sent_bytes", "sent_msgpack_bytes",
                            "forward_batches", "received")}
    fetched = sum(s["counters"]["fetched"] - start[n]["counters"]["fetched"] for n, s in end.items())
    crawl_bytes = sum(b for b, _ in crawl.values())
    heartbeat_during = idle_bytes / idle_wall * wall
    per_link = {f"{a}->{b}": v[0] for (a, b), v in sorted(crawl.items())}
    return {
        "nodes": size, "idle_s": round(idle_wall, 2),
        "heartbeat_bytes_per_s_cluster": idle_bytes / idle_wall,
        "heartbeat_bytes_per_s_node": 2 * idle_bytes / idle_wall / size,  # sent + received
        "heartbeat_bytes_per_exchange": idle_bytes / exchanges,
        "heartbeat_packets_per_exchange": idle_packets / exchanges,
        "members_answer_body_bytes": answer_body, "members_answer_header_bytes": answer_headers,
        "pages": fetched, "crawl_wall_s": round(wall, 2), "pages_per_s": fetched / wall,
        "counters": counters, "mesh_bytes": crawl_bytes, "mesh_bytes_data": crawl_bytes - heartbeat_during,
        "mesh_bytes_per_page": crawl_bytes / fetched, "data_bytes_per_page": (crawl_bytes - heartbeat_during) / fetched,
        "forwarded_per_page": counters["forwarded"] / fetched,
        "replica_rows_per_page": (counters["sent_seen"] + counters["sent_replica"]) / fetched,
        "payload_bytes_per_page": counters["sent_msgpack_bytes"] / fetched,
        "body_bytes_per_page": counters["sent_bytes"] / fetched,
        "rows_per_batch": (counters["forwarded"] + counters["sent_seen"] + counters["sent_replica"])
        / max(1, counters["forward_batches"]),
        "per_link_bytes": per_link,
    }


# ====================================================================== measured vs modelled
# What aiohttp's client adds to every request of a node's cluster session (3.14).
CLIENT_DEFAULT_HEADERS = "Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nUser-Agent: Python/3.11 aiohttp/3.14.5\r\n"
BARE_PACKETS = 3  # request, answer, the client's ACK, on a kept-alive connection (seen on a veth)


def request_bytes(method: str, path: str, host: str, headers: dict[str, str], body: int = 0) -> int:
    lines = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    if body or method == "POST":
        lines += f"Content-Length: {body}\r\n"
    return len(lines) + len(CLIENT_DEFAULT_HEADERS) + 2


def model_for(run: dict, graph: dict, sizes: dict, *, hosts: int,
              curve: tuple[tuple[float, float], ...] = ()) -> Params:
    """The model's parameters for a measured run: the graph's links, the row sizes of real
    rows and their gzip ``curve``, the HTTP sizes of the run's own answers, its pages/s;
    nothing fitted."""
    n = run["nodes"]
    auth = {"Authorization": f"Bearer {SECRET}"}
    host = f"10.77.{n}.10:{PORT}"
    heartbeat_request = request_bytes("GET", heartbeat_path("n1"), host, auth)
    answer_fixed = run["members_answer_body_bytes"] - n * run["members_answer_per_member"]
    post_request = request_bytes("POST", "/v1/urls", host, {**auth, "Content-Type": "application/msgpack",
                                                          "X-Crawler-Forwarded-By": "n0", "X-Crawler-To": "n1",
                                                          "Content-Encoding": "gzip"})
    return Params(
        nodes=n, pages_per_s=run["pages_per_s"] / n, links_per_page=graph["links_per_page"],
        cross_host_share=graph["cross_host_share"], already_sent_share=graph["already_sent_share"],
        new_urls_per_page=1.0, hosts=hosts,
        forward_row=sizes["forward_row"], queued_replica_row=sizes["queued_replica_row"],
        fetched_replica_row=sizes["fetched_replica_row"], politeness_entry=sizes["politeness_entry"],
        post_fixed=post_request + run["post_answer_bytes"] + BARE_PACKETS * PACKET_OVERHEAD,
        heartbeat_fixed=heartbeat_request + run["members_answer_header_bytes"] + answer_fixed
        + BARE_PACKETS * PACKET_OVERHEAD,
        heartbeat_per_member=run["members_answer_per_member"],
        heartbeat_cpu_us=run["heartbeat_cpu_us_per_exchange"], gzip_curve=curve,
        status_fixed=request_bytes("GET", "/v1/status?scope=local", host, auth) + run["status_answer_bytes"]
        + BARE_PACKETS * PACKET_OVERHEAD - n * Params.status_per_member)


def compare(run: dict, p: Params, graph: dict) -> list[tuple[str, float, float]]:
    """(figure, measured, modelled) for one run."""
    queued, fetched = replica_rows_per_page(p)
    pages = run["pages"]
    seeds = graph["seeds_forwarded"] / pages  # the seeds submitted to n0, forwarded to their owners
    payload = ((forwarded_per_page(p) + seeds) * p.forward_row + queued * p.queued_replica_row
               + fetched * p.fetched_replica_row + politeness_per_page(p) * p.politeness_entry)
    data = (wire_bytes((forwarded_per_page(p) + seeds) * p.forward_row, forwarded_per_page(p) + seeds, p)
            + replica_bytes_per_page(p))
    model_hb_node = heartbeat_bytes_per_s(p)
    return [
        ("forwarded URLs per page", run["forwarded_per_page"], forwarded_per_page(p) + seeds),
        ("  (graph and real ring, exact)", run["forwarded_per_page"], (graph["forwarded_links"]
                                                                       + graph["seeds_forwarded"]) / pages),
        ("replica rows per page", run["replica_rows_per_page"], queued + fetched),
        ("rows per POST", run["rows_per_batch"], rows_per_batch(p)),
        ("msgpack bytes per page", run["payload_bytes_per_page"], payload),
        ("  gzip'd, as sent (body bytes per page)", run["body_bytes_per_page"],
         body_bytes((forwarded_per_page(p) + seeds) * p.forward_row, forwarded_per_page(p) + seeds, p)
         + body_bytes(payload - (forwarded_per_page(p) + seeds) * p.forward_row, queued + fetched, p)),
        ("  per forwarded URL (encode_batch)", p.forward_row, p.forward_row),
        ("wire bytes per page (less heartbeats)", run["data_bytes_per_page"], data),
        ("heartbeat bytes per exchange", run["heartbeat_bytes_per_exchange"], heartbeat_exchange_bytes(p)),
        ("idle bytes/s per node (heartbeats alone)", run["heartbeat_bytes_per_s_node"], model_hb_node),
        ("member-traffic bytes/s per node, crawling", run["mesh_bytes"] * 2 / run["nodes"] / run["crawl_wall_s"],
         2 * data * p.pages_per_s + model_hb_node),
    ]


# ====================================================================== printing and main
def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def print_comparison(run: dict, rows: list[tuple[str, float, float]]) -> None:
    print(f"\n{run['nodes']} nodes: {run['pages']:,} pages in {run['crawl_wall_s']} s "
          f"({run['pages_per_s']:,.0f} pages/s), idle heartbeats over {run['idle_s']} s")
    print(f"  {'figure':44} {'measured':>12} {'model':>12} {'model/meas.':>11}")
    for name, measured, modelled in rows:
        ratio = f"{modelled / measured:.2f}" if measured else "-"
        print(f"  {name:44} {_fmt(measured):>12} {_fmt(modelled):>12} {ratio:>11}")
    # The projection's CPU per exchange is this figure; that it agrees across sizes checks O(N).
    print(f"  idle CPU per node {run['idle_cpu_ms_per_s_node']:.1f} ms/s, a node alone "
          f"{run['alone_idle_cpu_ms_per_s']:.1f}: {run['heartbeat_cpu_us_per_exchange']:.0f} µs per heartbeat "
          f"exchange (asker and answerer)")


def print_projection(title: str, base: Params, table: list[dict]) -> None:
    print(f"\n{title}: {base.pages_per_s:,.0f} pages/s per node, {base.links_per_page:.2g} links/page, "
          f"{base.cross_host_share:.0%} cross-host, {base.hosts:,} hosts, "
          f"heartbeat every {base.heartbeat_interval_s:g} s")
    print(f"  {'N':>4} {'fwd URLs/page':>13} {'rows/POST':>9} {'forward B/s':>12} {'replica B/s':>12} "
          f"{'heartbeat B/s':>13} {'hb share':>8} {'node total B/s':>14} {'cluster B/s':>13} {'hb CPU':>7}")
    for row in table:
        p = replace(base, nodes=row["nodes"])
        print(f"  {row['nodes']:>4} {row['forwarded_urls_per_page']:>13.2f} {rows_per_batch(p):>9.1f} "
              f"{row['forward_bytes_per_s']:>12,.0f} {row['replica_bytes_per_s']:>12,.0f} "
              f"{row['heartbeat_bytes_per_s']:>13,.0f} {row['heartbeat_share']:>8.1%} "
              f"{row['total_bytes_per_s']:>14,.0f} {row['cluster_bytes_per_s']:>13,.0f} "
              f"{row['heartbeat_cpu_share']:>7.1%}")
    crossover = heartbeat_crossover(base)
    print(f"  heartbeats cost more than forwarding and replicas from N = {crossover}" if crossover
          else "  heartbeats never cost more than the data (N <= 10,000)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=30)
    parser.add_argument("--pages", type=int, default=100, help="pages per testweb host")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sizes", default="3,5", help="cluster sizes to measure (at most 9)")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle window for heartbeats alone")
    parser.add_argument("--model-only", action="store_true", help="no measurement: the model and projection")
    parser.add_argument("--pages-per-s", type=float, default=1000.0, help="per node, for the projection")
    parser.add_argument("--links-per-page", type=float, default=60.0, help="the real-web projection's")
    parser.add_argument("--cross-host-share", type=float, default=0.3, help="the real-web projection's")
    parser.add_argument("--url-chars", type=float, default=80.0, help="the real-web projection's mean URL")
    parser.add_argument("--new-urls-per-page", type=float, default=3.0, help="the real-web projection's")
    parser.add_argument("--json", action="store_true", help="write bench/results/cost_model.json")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",") if n]
    ids = lambda n: [f"n{i}" for i in range(n)]  # noqa: E731

    graph = graph_figures(args.hosts, args.pages, args.seed, ids(max(sizes)))
    row = row_sizes(graph["sample_urls"], graph["sample_vias"])
    print(f"testweb {args.hosts} hosts x {args.pages} pages (seed {args.seed}): {graph['urls']:,} URLs, "
          f"{graph['links_per_page']:.2f} distinct links per page, {graph['cross_host_share']:.1%} to another host, "
          f"{graph['already_sent_share']:.1%} of those sent once already by the same node")
    print(f"msgpack row bytes (encode_batch, mean URL {row['mean_url_chars']:.1f} chars): forward "
          f"{row['forward_row']:.1f}, queued replica {row['queued_replica_row']:.1f}, fetched replica "
          f"{row['fetched_replica_row']:.1f}, politeness entry {row['politeness_entry']:.1f}")
    # testweb's mix: ~0.25 forwarded links, a queued and a fetched replica per page (measured below)
    curve = gzip_curve(graph["sample_urls"], graph["sample_vias"], mix=(0.25, 1.0, 1.0))
    print("gzip'd bytes per msgpack byte of a batch (cluster.wire.gzipped), by rows: "
          + ", ".join(f"{rows:.0f}: {ratio:.2f}" for rows, ratio in curve))

    runs, comparisons, params = [], {}, {}
    if not args.model_only:
        sys.path.insert(0, str(TESTS))
        from netns_helpers import available

        why = available()
        if why is not None:
            print(f"\nmeasurement skipped: {why}")
        else:
            with tempfile.TemporaryDirectory(prefix="cost-model-") as workdir:
                for n in sizes:
                    g = graph if n == max(sizes) else graph_figures(args.hosts, args.pages, args.seed, ids(n))
                    run = measure(n, args.hosts, args.pages, args.seed, args.idle_s, Path(workdir))
                    p = model_for(run, g, row, hosts=args.hosts, curve=curve)
                    rows = compare(run, p, g)
                    print_comparison(run, rows)
                    runs.append(run)
                    comparisons[n] = [{"figure": f, "measured": m, "model": v} for f, m, v in rows]
                    params[n] = asdict(p)

    # The projection: the testweb-shaped workload with the measured sizes, and a real-web-shaped one.
    measured_p = Params(**params[max(params)]) if params else Params(nodes=3, gzip_curve=curve)
    testweb_like = replace(measured_p, pages_per_s=args.pages_per_s, hosts=1_000_000)
    extra = args.url_chars - row["mean_url_chars"]  # forward and queued rows carry url and via
    real_like = replace(testweb_like, links_per_page=args.links_per_page, cross_host_share=args.cross_host_share,
                        new_urls_per_page=args.new_urls_per_page, already_sent_share=0.0,
                        forward_row=row["forward_row"] + 2 * extra,
                        queued_replica_row=row["queued_replica_row"] + 2 * extra,
                        fetched_replica_row=row["fetched_replica_row"] + extra,
                        gzip_curve=())  # no sample of real-web rows here: bodies as they are, an upper bound
    grid = [1, 2, 3, 5, 10, 20, 50, 100]
    tables = {"testweb_like": projection(testweb_like, grid), "real_web_like": projection(real_like, grid)}
    print_projection("projection, testweb-shaped pages", testweb_like, tables["testweb_like"])
    print_projection("projection, real-web-shaped pages (assumed; bodies not gzip'd: an upper bound)", real_like,
                     tables["real_web_like"])
    queued_cluster, fetched_cluster = 10_000_000, 10_000_000
    events = {}
    for n in (3, 5, 100):
        p = replace(real_like, nodes=n)
        events[n] = {"takeover": takeover(p, queued=queued_cluster, fetched=fetched_cluster),
                     "handback_after_60s": handback(p, queued=queued_cluster, outage_s=60.0),
                     "give_back_empty_return": give_back(p, queued=queued_cluster, fetched=fetched_cluster)}
    print(f"\ntakeover and handback, {queued_cluster:,} queued and {fetched_cluster:,} fetched over the cluster:")
    for n, e in events.items():
        print(f"  N={n:>3}: takeover promotes {e['takeover']['promoted_rows']:,.0f} rows from the replica "
              f"({e['takeover']['promoted_per_survivor']:,.0f} per survivor), 0 bytes on the wire; handback after "
              f"60 s {e['handback_after_60s']['rows']:,.0f} rows, "
              f"{e['handback_after_60s']['wire_bytes'] / 1e6:,.1f} MB; "
              f"empty return {e['give_back_empty_return']['wire_bytes'] / 1e6:,.1f} MB")

    if args.json:
        RESULTS.mkdir(exist_ok=True)
        graph_out = {k: v for k, v in graph.items() if not k.startswith("sample_")}
        document = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args), "graph": graph_out,
                    "row_sizes": row, "runs": runs, "comparisons": comparisons, "params": params,
                    "projection": tables, "projection_params": {"testweb_like": asdict(testweb_like),
                                                                "real_web_like": asdict(real_like)},
                    "events": events}
        (RESULTS / "cost_model.json").write_text(json.dumps(document, indent=2, default=str))
        print(f"\nwrote {RESULTS / 'cost_model.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
