"""Outboxes: the URLs this node owes its peers, durable in the frontier until acknowledged,
and one sender per peer that drains them in msgpack batches (``POST /v1/urls``).

A peer's 429 slows only that peer's sender; a peer that is down has its URLs re-routed
clockwise (or taken in here, when this node is now the owner). An outbox over ``capacity``
is one of admission's pressure sources: a peer that does not take URLs as fast as they are
found slows this node's fetching rather than growing a buffer. Each sender is a recurring
job: a round that raises is logged and the sender runs again; it never ends silently.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgpack
from isal import isal_zlib

from crawler_node.cluster.membership import ADDRESSED_TO, Membership, PeerState
from crawler_node.cluster.routing import Router
from crawler_node.core.stats import Indexed, counter, stat
from crawler_node.frontier import AddResult, FrontierService, HostPoliteness
from crawler_node.frontier.outbox import OutboxRow
from crawler_node.frontier.replica import HostRefresh
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.cluster")

MSGPACK = "application/msgpack"
# Names the member a batch of POST /v1/urls comes from: the receiver counts what peers
# forwarded apart from what users submitted (Cluster.note_received).
FORWARDED_BY = "X-Crawler-Forwarded-By"
MAX_PEER_HOSTS = 10_000  # entries of a batch's "hosts", at most (as many as its URLs)
_HOST_KEY = re.compile(r"[!-~]{1,300}")  # a frontier's host key: visible ASCII (IDNA), and short
_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,64}")  # a refresh's token (cluster.replica makes 16 hex digits)
# A batch's msgpack says its hosts, its pages' URLs (every link's "via") and every row's keys
# again and again: gzip takes testweb's batches of 87 rows from 59 to 11 bytes a row, at
# ~0.1-0.2 µs a row to pack and as much to unpack (ISA-L's level 1; zlib's 6 is 4-7x the CPU
# for ~17% fewer bytes; bench/cost_model.py's gzip_curve has it by batch size). A member's
# API (aiohttp) decodes a gzip body before its handler reads it, in every version of this
# node, and bounds what it decodes (api.http.read_body). Bodies under this size stay as they
# are: a batch of one testweb row (~70 bytes) grows by gzip's frame (x1.13), one of two
# (~140) already weighs 0.71 of its msgpack, of five 0.41.
GZIP_FROM_BYTES = 128
GZIP_LEVEL = 1


def gzipped(payload: bytes) -> tuple[bytes, str | None]:
    """The body to send for a batch's msgpack, and its Content-Encoding (None: as it is)."""
    if len(payload) < GZIP_FROM_BYTES:
        return payload, None
    return isal_zlib.compress(payload, GZIP_LEVEL, 31), "gzip"  # wbits 31: a gzip frame


def encode_batch(rows: Sequence[OutboxRow]) -> dict[str, Any]:
    """The body of POST /v1/urls for outbox rows. A replica carries what its receiver keeps
    of it (frontier.replica), no more: a fetched URL only its URL; a queued one what it is
    queued with. The replicas' politeness goes once per host, as
    ``"hosts": [[host, next_eligible, crawl_delay], ...]`` (wall-clock seconds; a row of
    politeness alone adds its host there and nothing to ``"urls"``), and so does a
    refresh of a host's replica, as ``"refresh": [[host, token, complete], ...]``: the batch's
    queued replicas of the host are part of the refresh ``token``, which ends in this batch if
    ``complete`` (its end is a row with no URL: nothing in ``"urls"``)."""
    urls: list[dict[str, Any]] = []
    hosts: dict[str, list[Any]] = {}
    refresh: dict[str, list[Any]] = {}
    for row in rows:
        e = row.entry
        polite = row.politeness
        if polite is not None:
            hosts[polite.host] = [polite.host, polite.next_eligible, polite.crawl_delay]
        if row.politeness_only:
            continue  # its politeness is all it says
        if row.refresh is not None:
            # the last refresh of the host in the batch is the one its replicas are part of
            mark = refresh.get(e.host)
            if mark is None or mark[1] != row.refresh:
                refresh[e.host] = mark = [e.host, row.refresh, False]
            if row.ends_refresh:
                mark[2] = True
                continue
        if row.replica and row.seen:
            urls.append({"url": e.url, "seen": True})
        elif row.replica:
            item: dict[str, Any] = {"url": e.url, "depth": e.depth, "priority": e.priority, "replica": True}
            if e.redirects:
                item["redirects"] = e.redirects
            if e.via is not None:
                item["via"] = e.via
            urls.append(item)
        else:
            urls.append({"url": e.url, "depth": e.depth, "priority": e.priority, "hops": e.hops,
                         "redirects": e.redirects, "via": e.via, "seen": row.seen})
    body: dict[str, Any] = {"urls": urls}
    if hosts:
        body["hosts"] = list(hosts.values())
    if refresh:
        body["refresh"] = list(refresh.values())
    return body


def peer_politeness(document: object) -> list[HostPoliteness]:
    """The ``"hosts"`` of a POST /v1/urls body (see encode_batch); ValueError if malformed."""
    hosts = document.get("hosts", []) if isinstance(document, dict) else []
    if not isinstance(hosts, list) or len(hosts) > MAX_PEER_HOSTS:
        raise ValueError(f'"hosts" must be a list of at most {MAX_PEER_HOSTS} entries')
    found = []
    for entry in hosts:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and _HOST_KEY.fullmatch(entry[0]) and all(_time(value) for value in entry[1:])):
            raise ValueError('each of "hosts" must be [host, next_eligible, crawl_delay]')
        found.append(HostPoliteness(entry[0].lower(), float(entry[1]), float(entry[2])))
    return found


def peer_refresh(document: object) -> list[HostRefresh]:
    """The ``"refresh"`` of a POST /v1/urls body (see encode_batch); ValueError if malformed."""
    marks = document.get("refresh", []) if isinstance(document, dict) else []
    if not isinstance(marks, list) or len(marks) > MAX_PEER_HOSTS:
        raise ValueError(f'"refresh" must be a list of at most {MAX_PEER_HOSTS} entries')
    found = []
    for entry in marks:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and _HOST_KEY.fullmatch(entry[0]) and isinstance(entry[1], str) and _TOKEN.fullmatch(entry[1])
                and isinstance(entry[2], bool)):
            raise ValueError('each of "refresh" must be [host, token, complete]')
        found.append(HostRefresh(entry[0].lower(), entry[1], entry[2]))
    return found


def _time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11


@dataclass(slots=True)
class OutboxCounts(Indexed):
    """What the senders count. ``forwarded``: URLs for the peer to crawl; ``sent_seen``:
    replicas and handed-back fetched URLs, which it only records; ``sent_replica``: replicas of
    queued URLs; ``sent_bytes``: the bodies' as sent, gzip'd; ``sent_msgpack_bytes``: before gzip
    (what the replicas cost, bench/replica_cost.py; the cost model, bench/cost_model.py)."""

    forwarded: int = 0
    sent_seen: int = 0
    sent_replica: int = 0
    sent_bytes: int = 0
    sent_msgpack_bytes: int = 0
    forward_batches: int = 0
    forward_throttled: int = 0
    forward_failed: int = 0
    forward_misdirected: int = 0
    forward_gzip_refused: int = 0
    rerouted: int = 0


@dataclass(frozen=True, slots=True)
class OutboxCounters:
    """The outboxes' part of the status's ``cluster.counters``; what only a sent batch counts is
    shown once one was sent, a refused gzip once there was one."""

    forwarded: int = field(metadata=counter("crawler_forwarded_urls",
                                            "URLs forwarded to their owners and acknowledged"))
    sent_seen: int
    forward_batches: int
    forward_throttled: int
    forward_failed: int
    forward_misdirected: int
    rerouted: int
    sent_replica: int = field(metadata=stat(when="forward_batches"))
    sent_bytes: int = field(metadata=stat(when="forward_batches"))
    sent_msgpack_bytes: int = field(metadata=stat(when="forward_batches"))
    forward_gzip_refused: int = field(metadata=stat(when="forward_gzip_refused"))


@dataclass(frozen=True, slots=True)
class OutboxSnapshot:
    counts: Mapping[str, int]  # rows owed, by peer
    total: int
    capacity: int
    senders: tuple[str, ...]
    counters: OutboxCounters


class Outboxes:
    name = "outbox"  # the reason admission reports while a peer's outbox is full

    def __init__(self, *, frontier: FrontierService, router: Router, membership: Membership,
                 supervisor: Supervisor, capacity: int, batch: int, linger_s: float, failure_pause_s: float,
                 on_taken: Callable[[AddResult], None], on_down: Callable[[str, str], None],
                 on_alive: Callable[[str], None], space: Wakeup, clock: Callable[[], float]) -> None:
        """``on_taken``: URLs a reroute brought into this node's own frontier; ``on_down(peer,
        why)`` / ``on_alive(peer)``: a forward's failure or success is evidence of liveness;
        ``space`` is notified whenever an outbox shrinks."""
        self._frontier = frontier
        self._router = router
        self._membership = membership
        self._supervisor = supervisor
        self._capacity = capacity
        self._batch = batch
        self._linger_s = linger_s
        self._failure_pause_s = failure_pause_s
        self._on_taken = on_taken
        self._on_down = on_down
        self._on_alive = on_alive
        self._space = space
        self._clock = clock
        self._node_id = membership.self_id
        self._session: aiohttp.ClientSession | None = None
        self._senders: set[str] = set()
        self._wake: dict[str, Wakeup] = {}
        self._pause: dict[str, float] = {}  # seconds the peer's sender waits before its next batch
        self._plain: set[str] = set()  # peers that refused a gzip'd batch (415): sent as it is since
        self.counts: dict[str, int] = {}
        self.counters = OutboxCounts()
        # peer -> the id of the last row its outbox held after the last sweep that handed it
        # something (every peer after a full one, cluster.sweep) or a reroute that sent it rows:
        # until that row is acknowledged, a handback may still be owed to it.
        # Ids are reused only once the highest rows are gone, so while that row is here every
        # row put for the peer after it has a higher id: an acknowledged id at or past the
        # mark means the mark's row was delivered too (a peer's rows go in id order).
        self._handback: dict[str, int] = {}

    # ----------------------------------------------------------------- questions
    def total(self) -> int:
        return sum(self.counts.values())

    def full(self, peers: Collection[str]) -> bool:
        if not peers:
            return False  # one node, or nothing outboxed: the common case
        return any(self.counts.get(peer, 0) >= self._capacity for peer in peers)

    def needs_backout(self) -> bool:
        return self.full(self.counts)

    async def wait_for_space(self, peers: Collection[str]) -> None:
        await self._space.wait_until(lambda: not self.full(peers))

    def owed_to_live(self) -> int:
        """Rows waiting for peers that are not down (those can still be delivered)."""
        membership = self._membership
        return sum(n for peer, n in self.counts.items()
                   if n and (member := membership.get(peer)) is not None and member.state is not PeerState.DOWN)

    async def flush(self, timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until nothing is owed to a live peer; True if so.

        For a stop: the rows of the last pages stored (their fetched and queued replicas, the
        links found for other members) are still in the outbox when the stages have drained.
        Left there, they wait for this member's next start, and if it comes back later than its
        peers, its successor, covering for it, fetches again what it had fetched
        (tests/test_cluster_stop.py). The senders keep going meanwhile; an acknowledgement or a
        reroute notifies ``space``, and a peer found down stops counting."""
        return await self._space.wait_until(lambda: self.owed_to_live() == 0, timeout_s)

    def mark_handback(self, last_ids: Mapping[str, int]) -> None:
        """What each peer is owed right after a sweep or a reroute: the id of its outbox's last row."""
        for peer, last in last_ids.items():
            if self.counts.get(peer):
                self._handback[peer] = last

    def owes_handback(self, peer: str) -> bool:
        """Rows that were owed to ``peer`` at its last mark are not all acknowledged yet."""
        return peer in self._handback

    def snapshot(self) -> OutboxSnapshot:
        c = self.counters
        return OutboxSnapshot(
            counts={peer: n for peer, n in self.counts.items() if n}, total=self.total(), capacity=self._capacity,
            senders=tuple(sorted(self._senders)),
            counters=OutboxCounters(
                forwarded=c.forwarded, sent_seen=c.sent_seen, forward_batches=c.forward_batches,
                forward_throttled=c.forward_throttled, forward_failed=c.forward_failed,
                forward_misdirected=c.forward_misdirected, rerouted=c.rerouted, sent_replica=c.sent_replica,
                sent_bytes=c.sent_bytes, sent_msgpack_bytes=c.sent_msgpack_bytes,
                forward_gzip_refused=c.forward_gzip_refused))

    # ----------------------------------------------------------------- lifecycle
    async def start(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self.counts = await self._frontier.outbox_counts()
        for member in self._membership.peers():
            self.ensure_sender(member.node_id)
        for peer in self.counts:
            self.ensure_sender(peer)

    def ensure_sender(self, peer: str) -> None:
        if peer == self._node_id or peer in self._senders or self._session is None:
            return
        self._senders.add(peer)
        self._wake[peer] = Wakeup()
        self._supervisor.recurring(f"outbox:{peer}", lambda: self._send_round(peer))

    def note_outboxed(self, counts: Mapping[str, int]) -> None:
        for peer, count in counts.items():
            self.counts[peer] = self.counts.get(peer, 0) + count
            self.ensure_sender(peer)
            wake = self._wake.get(peer)
            if wake is not None:
                wake.notify()

    def wake_all(self) -> None:
        for wake in self._wake.values():
            wake.notify()

    # ----------------------------------------------------------------- one sender's round
    async def _send_round(self, peer: str) -> None:
        if not self.counts.get(peer):
            await self._wake[peer].wait()
            await asyncio.sleep(self._linger_s)  # let a batch fill
        pause = self._pause.pop(peer, 0.0)
        if pause:
            await asyncio.sleep(pause)
        member = self._membership.get(peer)
        if member is None or member.state is PeerState.DOWN:
            await self.reroute(peer)
            return
        self._pause[peer] = await self._send_batch(peer, member.url)

    async def _send_batch(self, peer: str, url: str) -> float:
        """Send one batch; returns how long this peer's sender should wait before the next."""
        assert self._session is not None
        rows = await self._frontier.outbox_peek(peer, self._batch)
        if not rows:
            self.counts[peer] = 0
            self._handback.pop(peer, None)
            return 0.0
        payload = msgpack.packb(encode_batch(rows))
        body, coding = gzipped(payload) if peer not in self._plain else (payload, None)
        try:
            headers = {"Content-Type": MSGPACK, FORWARDED_BY: self._node_id, ADDRESSED_TO: peer}
            if coding is not None:
                headers["Content-Encoding"] = coding
            async with self._session.post(f"{url}/v1/urls", data=body, headers=headers) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.counters.forward_failed += 1
            self._on_down(peer, f"forward failed: {type(exc).__name__}")
            return self._failure_pause_s
        if status == 202:
            await self._acknowledged(peer, rows)
            seen_rows = sum(1 for row in rows if row.seen)
            # (the end of a refresh is a replica row with no URL: counted with the replicas)
            replica_rows = sum(1 for row in rows if row.replica and not row.seen)
            # "forwarded": URLs for the peer to crawl; "sent_seen": replicas and handed-back
            # fetched URLs, which it only records; "sent_replica": replicas of queued URLs;
            # "sent_bytes": the bodies' as sent, gzip'd; "sent_msgpack_bytes": before gzip
            # (what the replicas cost, bench/replica_cost.py; the cost model, bench/cost_model.py).
            self.counters.forwarded += len(rows) - seen_rows - replica_rows
            self.counters.sent_seen += seen_rows
            self.counters.sent_replica += replica_rows
            self.counters.sent_bytes += len(body)
            self.counters.sent_msgpack_bytes += len(payload)
            self.counters.forward_batches += 1
            self._on_alive(peer)
            return 0.0
        if status == 429:
            # The peer's inbound is full: slow this peer's outbox only.
            self.counters.forward_throttled += 1
            try:
                return min(30.0, max(0.1, float(retry_after or 1)))
            except ValueError:
                return 1.0
        if status == 421:
            # The address is another member's now (a restart moved addresses): nothing was
            # taken. A failure of this peer, as a heartbeat answered by another id is; the rows
            # wait for its new address, which its join or its answer to this node's join
            # through DNS brings (a member list passed on by others changes no known URL).
            self.counters.forward_misdirected += 1
            if self.counters.forward_misdirected in (1, 10, 100) or self.counters.forward_misdirected % 1000 == 0:
                log.warning("%s's address %s is another member's now; its batch waits for its new address "
                            "(%d misdirected so far)", peer, url, self.counters.forward_misdirected)
            self._on_down(peer, "its address answers as another member")
            return self._failure_pause_s
        if status == 415 and coding is not None:
            # Every version of this node takes gzip (aiohttp decodes it); something else on the
            # way does not. Nothing was taken: the same rows go again, as they are.
            self._plain.add(peer)
            self.counters.forward_gzip_refused += 1
            log.warning("%s refused a gzip'd batch (415); sending it its batches uncompressed", peer)
            return 0.0
        if status == 400:
            log.error("%s refused a batch as malformed; dropping %d URLs", peer, len(rows))
            await self._acknowledged(peer, rows)
            return 0.0
        log.warning("%s answered HTTP %s to a forward; will retry", peer, status)
        return 2.0

    async def _acknowledged(self, peer: str, rows: list[OutboxRow]) -> None:
        await self._frontier.outbox_ack(peer, [(row.id, row.entry.url) for row in rows])
        self.counts[peer] = max(0, self.counts.get(peer, 0) - len(rows))
        mark = self._handback.get(peer)
        if mark is not None and (not self.counts[peer] or max(row.id for row in rows) >= mark):
            del self._handback[peer]
        self._space.notify()

    async def reroute(self, peer: str) -> None:
        """Re-decide where a peer's pending URLs go (it is down, or no longer their owner)."""
        # What comes here is replicated to its successor, as what this node queues always is.
        result = await self._frontier.outbox_reroute(peer, self._router.route, successor_of=self._router.successor_for)
        self._handback.pop(peer, None)  # down, or no longer the owner: what it was owed went elsewhere
        counts = await self._frontier.outbox_counts()
        moved = self.counts.get(peer, 0) - counts.get(peer, 0)
        self.counters.rerouted += max(0, moved)
        grown = [target for target, n in counts.items() if target != peer and n > self.counts.get(target, 0)]
        self.counts = counts
        if grown:  # what was owed to `peer` may be a handback its new target is waiting for
            last = await self._frontier.outbox_last_ids()
            self.mark_handback({target: last[target] for target in grown if target in last})
        for target in counts:
            self.ensure_sender(target)
            wake = self._wake.get(target)
            if wake is not None:
                wake.notify()
        self._on_taken(result)
        self._space.notify()
