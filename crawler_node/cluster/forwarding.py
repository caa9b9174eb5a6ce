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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import msgpack

from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import PeerClient, PeerUnreachable
from crawler_node.cluster.routing import Router
from crawler_node.cluster.wire import encode_batch, gzipped
from crawler_node.core.stats import Indexed, counter, stat
from crawler_node.frontier import AddResult, FrontierService
from crawler_node.frontier.outbox import OutboxRow
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.cluster")


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
                 client: PeerClient, supervisor: Supervisor, capacity: int, batch: int, linger_s: float,
                 failure_pause_s: float,
                 on_taken: Callable[[AddResult], None], on_down: Callable[[str, str], None],
                 on_alive: Callable[[str], None], space: Wakeup, clock: Callable[[], float]) -> None:
        """``on_taken``: URLs a reroute brought into this node's own frontier; ``on_down(peer,
        why)`` / ``on_alive(peer)``: a forward's failure or success is evidence of liveness;
        ``space`` is notified whenever an outbox shrinks."""
        self._frontier = frontier
        self._router = router
        self._membership = membership
        self.client = client  # every request to a member goes through it
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
        self._started = False
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
    async def start(self) -> None:
        self._started = True
        self.counts = await self._frontier.outbox_counts()
        for member in self._membership.peers():
            self.ensure_sender(member.node_id)
        for peer in self.counts:
            self.ensure_sender(peer)

    def ensure_sender(self, peer: str) -> None:
        if peer == self._node_id or peer in self._senders or not self._started:
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
        rows = await self._frontier.outbox_peek(peer, self._batch)
        if not rows:
            self.counts[peer] = 0
            self._handback.pop(peer, None)
            return 0.0
        payload = msgpack.packb(encode_batch(rows))
        body, coding = gzipped(payload) if peer not in self._plain else (payload, None)
        try:
            reply = await self.client.send_batch(url, body, to=peer, sender=self._node_id, coding=coding)
        except PeerUnreachable as exc:
            self.counters.forward_failed += 1
            self._on_down(peer, f"forward failed: {exc.kind}")
            return self._failure_pause_s
        status, retry_after = reply.status, reply.headers.get("Retry-After")
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
