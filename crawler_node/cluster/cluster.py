"""The node's view of the cluster and the traffic between members.

- routing: which member crawls a host right now (the ring's owner if live, else the next live
  member clockwise), cached per host and recomputed when the live set changes;
- heartbeats: active liveness evidence, plus anti-entropy of the member list (a joiner told to
  one member reaches all the others through their next heartbeat);
- outboxes: one sender per peer drains that peer's durable outbox in msgpack batches; a 429
  slows only that peer's sender, a down peer's URLs are rerouted clockwise;
- sweeps: hosts this node holds but no longer owns (handback after a takeover, a join) are
  handed to their owner through the same acknowledged outbox.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp
import msgpack

from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.ring import Ring, ring_key
from crawler_node.settings import Settings

if TYPE_CHECKING:
    from crawler_node.frontier.frontier import Frontier
    from crawler_node.runtime.workers import SyncWorker

log = logging.getLogger("crawler_node.cluster.cluster")

MSGPACK = "application/msgpack"
ROUTE_CACHE_MAX = 200_000


class Cluster:
    def __init__(self, settings: Settings, *, frontier_thread: SyncWorker, frontier: Callable[[], Frontier],
                 on_change: Callable[[], None], on_taken: Callable[[list], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self._clock = clock
        peers = settings.peer_map()
        self.joining = bool(peers) and self.node_id not in peers
        self.membership = Membership(
            self.node_id, settings.advertise_url, peers, now=clock(),
            suspect_after_s=settings.suspect_after_s, down_after_s=settings.down_after_s,
        )
        self._frontier_thread = frontier_thread
        self._frontier = frontier
        self._on_change = on_change
        self._on_taken = on_taken  # URLs a reroute brought into this node's own frontier
        self._weights = settings.weight_map()
        self._ring = Ring(self._ring_members(), vnodes=settings.ring_vnodes)
        self._ring_version = self.membership.version
        self._routes: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._senders: dict[str, asyncio.Task] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._sweep_needed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self.outbox_counts: dict[str, int] = {}
        self.outbox_space = asyncio.Condition()
        self.counters: dict[str, int] = {
            "forwarded": 0, "sent_seen": 0, "forward_batches": 0, "forward_throttled": 0, "forward_failed": 0,
            "handed_off": 0, "rerouted": 0, "received_forwarded_on": 0, "hop_limit_kept": 0,
        }
        self.started_at = clock()
        self.leaving = False  # --handoff-on-exit in progress: heartbeats say so
        self.leaving_done = False  # drained: refuse new URLs
        self.events: list[dict] = []  # membership changes, newest last (bounded)

    # ---------------------------------------------------------------- routing (pure)
    @property
    def is_single(self) -> bool:
        return len(self.membership.ids()) == 1

    @property
    def ring(self) -> Ring:
        return self._ring

    def route(self, host: str) -> str | None:
        """The member that should crawl ``host`` now; None when that is this node."""
        self._refresh()
        owner = self._routes.get(host)
        if owner is None:
            owner = self._ring.owner_among(ring_key(host, by=self.settings.ring_key_by),
                                           self.membership.live_ids())
            if owner is None:  # everyone is down, even this node (leaving): keep it
                owner = self.node_id
            if len(self._routes) >= ROUTE_CACHE_MAX:
                self._routes.clear()
            self._routes[host] = owner
        return None if owner == self.node_id else owner

    def successor_for(self, host: str) -> str | None:
        """Who would take ``host`` over if this node went away: it keeps a replica of what
        was fetched here, so a takeover does not fetch it all again."""
        live = self.membership.live_ids() - {self.node_id}
        return self._ring.owner_among(ring_key(host, by=self.settings.ring_key_by), live) if live else None

    def serves(self, host: str) -> bool:
        return self.route(host) is None

    def owner_of(self, host: str) -> dict:
        key = ring_key(host, by=self.settings.ring_key_by)
        return {"host": host, "owner": self._ring.owner(key), "successors": self._ring.successors(key),
                "live_owner": self._ring.owner_among(key, self.membership.live_ids())}

    def _refresh(self) -> None:
        if self._ring_version != self.membership.version:
            ids = self.membership.ids()
            if set(ids) != set(self._ring.nodes):
                self._ring = Ring(self._ring_members(), vnodes=self.settings.ring_vnodes)
            self._ring_version = self.membership.version
            self._routes.clear()

    def _ring_members(self) -> dict[str, int]:
        return {node_id: self._weights.get(node_id, 1) for node_id in self.membership.ids()}

    def _changed(self, why: str) -> None:
        self._refresh()
        self.events.append({"at": self._clock(), "event": why,
                            "live": sorted(self.membership.live_ids())})
        del self.events[:-50]
        log.info("membership: %s; live members now %s", why, sorted(self.membership.live_ids()))
        self._sweep_needed.set()
        for event in self._wake.values():
            event.set()
        self._on_change()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self.is_single and not self.joining:
            return
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10, sock_connect=self.settings.heartbeat_timeout_s * 2),
            trust_env=False,
            headers=self._auth_headers(),
        )
        self.membership.reset_clocks(self._clock())  # startup time is not silence
        if self.joining:
            await self._join()
        self.outbox_counts = await self._frontier_thread.call(lambda: self._frontier().outbox_counts())
        for member in self.membership.peers():
            self._ensure_sender(member.node_id)
        for peer in self.outbox_counts:
            self._ensure_sender(peer)
        self._spawn(self._heartbeat_loop(), "heartbeats")
        self._spawn(self._sweep_loop(), "handoff-sweep")
        self._sweep_needed.set()

    async def close(self) -> None:
        for task in list(self._tasks) + list(self._senders.values()):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._senders.values(), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._supervised(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _supervised(coro, name: str) -> None:
        # Recurring cluster jobs log and go on: a failed round must not end the node's
        # membership or forwarding for good.
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cluster task %s failed", name)
            raise

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.settings.secret}"} if self.settings.secret else {}

    # ---------------------------------------------------------------- membership traffic
    async def _join(self) -> None:
        """Ask the configured members, in turn, to let this node in; adopt their view."""
        body = {"id": self.node_id, "url": self.settings.advertise_url}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for member in self.membership.peers():
                try:
                    async with self._session.post(f"{member.url}/v1/join", json=body,
                                                  timeout=aiohttp.ClientTimeout(total=2)) as response:
                        if response.status == 200:
                            view = (await response.json())["members"]
                            self.membership.merge(view, self._clock())
                            self.membership.observe_ok(member.node_id, self._clock())
                            self._changed(f"joined through {member.node_id}")
                            return
                        log.warning("join through %s refused: HTTP %s", member.node_id, response.status)
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    log.warning("join through %s failed: %s", member.node_id, exc)
            await asyncio.sleep(1.0)
        log.error("could not join through any of %s; running with the configured view", self.membership.ids())

    def accept_join(self, node_id: str, url: str) -> list[dict]:
        now = self._clock()
        if self.membership.add(node_id, url, now):
            self.membership.observe_ok(node_id, now)
            self._ensure_sender(node_id)
            self._changed(f"{node_id} joined")
            for member in self.membership.peers():
                if member.node_id != node_id:
                    self._spawn(self._announce(member.url, node_id, url), f"announce:{member.node_id}")
        return self.membership.view()

    async def _announce(self, peer_url: str, node_id: str, url: str) -> None:
        try:
            async with self._session.post(f"{peer_url}/v1/join", json={"id": node_id, "url": url},
                                          timeout=aiohttp.ClientTimeout(total=2)):
                pass
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass  # the heartbeat's anti-entropy will carry it

    def accept_leave(self, node_id: str) -> None:
        if self.membership.observe_leave(node_id, self._clock()):
            self._changed(f"{node_id} left")

    async def announce_leave(self) -> None:
        if self._session is None:
            return
        body = {"id": self.node_id, "url": self.settings.advertise_url}
        await asyncio.gather(*(self._post_quietly(f"{m.url}/v1/leave", body)
                               for m in self.membership.peers() if m.state is not PeerState.DOWN))

    async def _post_quietly(self, url: str, body: dict) -> None:
        try:
            async with self._session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=2)):
                pass
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_s
        while True:
            started = time.monotonic()
            await asyncio.gather(*(self._heartbeat(m.node_id, m.url) for m in self.membership.peers()))
            if self.membership.tick(self._clock()):
                self._changed("liveness changed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _heartbeat(self, node_id: str, url: str) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.heartbeat_timeout_s)
        try:
            async with self._session.get(f"{url}/v1/members", timeout=timeout) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                answer = await response.json()
                view = answer["members"]
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            if self.membership.observe_failure(node_id, self._clock()):
                self._changed(f"{node_id} is down")
            return
        now = self._clock()
        if answer.get("leaving"):
            # Still answering while it drains, but its arc is already its successors'.
            if self.membership.observe_leave(node_id, now):
                self._changed(f"{node_id} is leaving")
            return
        if self.membership.observe_ok(node_id, now, returning=True):
            self._changed(f"{node_id} is alive")
        new = self.membership.merge(view, now)
        for peer in new:
            self._ensure_sender(peer)
        if new:
            self._changed(f"learnt {', '.join(new)} from {node_id}")

    # ---------------------------------------------------------------- outboxes
    def outbox_total(self) -> int:
        return sum(self.outbox_counts.values())

    def note_outboxed(self, peers: dict[str, int]) -> None:
        for peer, count in peers.items():
            self.outbox_counts[peer] = self.outbox_counts.get(peer, 0) + count
            self._ensure_sender(peer)
            self._wake[peer].set()

    def outbox_full(self, peers) -> bool:
        if not peers:
            return False  # one node, or nothing outboxed: the common case, asked per dispatch
        return any(self.outbox_counts.get(peer, 0) >= self.settings.outbox_capacity for peer in peers)

    def _ensure_sender(self, peer: str) -> None:
        if peer == self.node_id or peer in self._senders or self._session is None:
            return
        self._wake[peer] = asyncio.Event()
        self._senders[peer] = asyncio.get_running_loop().create_task(self._sender_loop(peer), name=f"outbox:{peer}")

    async def _sender_loop(self, peer: str) -> None:
        backoff = 0.0
        while True:
            if not self.outbox_counts.get(peer):
                self._wake[peer].clear()
                await self._wake[peer].wait()
                await asyncio.sleep(self.settings.forward_linger_s)  # let a batch fill
            if backoff:
                await asyncio.sleep(backoff)
            member = self.membership.get(peer)
            live_owner_elsewhere = member is None or member.state is PeerState.DOWN
            if live_owner_elsewhere:
                await self._reroute(peer)
                continue
            try:
                backoff = await self._send_batch(peer, member.url)
            except Exception:  # noqa: BLE001 - one bad round must not kill the peer's sender
                log.exception("sending to %s failed", peer)
                backoff = 1.0

    async def _reroute(self, peer: str) -> None:
        frontier = self._frontier()
        result = await self._frontier_thread.call(frontier.outbox_reroute, peer, self.route)
        counts = await self._frontier_thread.call(frontier.outbox_counts)
        moved = self.outbox_counts.get(peer, 0) - counts.get(peer, 0)
        self.counters["rerouted"] += max(0, moved)
        self.outbox_counts = counts
        for target in counts:
            self._ensure_sender(target)
            if target in self._wake:
                self._wake[target].set()
        self._on_taken(result.queued)
        await self._signal_space()

    async def _send_batch(self, peer: str, url: str) -> float:
        """Send one batch; returns how long this peer's sender should wait before the next."""
        frontier = self._frontier()
        rows = await self._frontier_thread.call(frontier.outbox_peek, peer, self.settings.forward_batch)
        if not rows:
            self.outbox_counts[peer] = 0
            return 0.0
        payload = msgpack.packb({"urls": [
            {"url": e.url, "depth": e.depth, "priority": e.priority, "hops": e.hops, "seen": seen}
            for _, e, seen in rows]})
        try:
            async with self._session.post(f"{url}/v1/urls", data=payload,
                                          headers={"Content-Type": MSGPACK}) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.counters["forward_failed"] += 1
            if self.membership.observe_failure(peer, self._clock()):
                self._changed(f"{peer} is down (forward failed: {type(exc).__name__})")
            return min(1.0, self.settings.heartbeat_interval_s)
        if status == 202:
            await self._frontier_thread.call(frontier.outbox_ack, peer, [(row_id, e.url) for row_id, e, _ in rows])
            self.outbox_counts[peer] = max(0, self.outbox_counts.get(peer, 0) - len(rows))
            # "forwarded": URLs for the peer to crawl; "sent_seen": replicas and handed-back
            # fetched URLs, which it only records.
            seen_rows = sum(1 for _, _, seen in rows if seen)
            self.counters["forwarded"] += len(rows) - seen_rows
            self.counters["sent_seen"] += seen_rows
            self.counters["forward_batches"] += 1
            if self.membership.observe_ok(peer, self._clock()):
                self._changed(f"{peer} is alive")
            await self._signal_space()
            return 0.0
        if status == 429:
            # The peer's inbound is full: slow this peer's outbox only.
            self.counters["forward_throttled"] += 1
            try:
                return min(30.0, max(0.1, float(retry_after or 1)))
            except ValueError:
                return 1.0
        if status == 400:
            log.error("%s refused a batch as malformed; dropping %d URLs", peer, len(rows))
            await self._frontier_thread.call(frontier.outbox_ack, peer, [(row_id, e.url) for row_id, e, _ in rows])
            self.outbox_counts[peer] = max(0, self.outbox_counts.get(peer, 0) - len(rows))
            return 0.0
        log.warning("%s answered HTTP %s to a forward; will retry", peer, status)
        return 2.0

    async def _signal_space(self) -> None:
        async with self.outbox_space:
            self.outbox_space.notify_all()

    async def wait_for_outbox_space(self, peers) -> None:
        async with self.outbox_space:
            await self.outbox_space.wait_for(lambda: not self.outbox_full(peers))

    # ---------------------------------------------------------------- sweeps (handback / join)
    def request_sweep(self) -> None:
        self._sweep_needed.set()

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._sweep_needed.wait(), timeout=2.0)
            except TimeoutError:
                pass
            self._sweep_needed.clear()
            await self.sweep()

    async def sweep(self) -> int:
        """Hand every host this node holds but does not own to its owner; reroute outboxes
        whose peer no longer owns what they hold."""
        frontier = self._frontier()
        hosts = await self._frontier_thread.call(frontier.host_hosts)
        moved = 0
        per_peer: dict[str, int] = {}
        for record in hosts:
            target = self.route(record.host)
            if target is None or not (record.queued or record.done or record.failed):
                continue
            count = await self._frontier_thread.call(frontier.handoff_host, record.host, target)
            if count:
                moved += count
                per_peer[target] = per_peer.get(target, 0) + count
        if moved:
            self.counters["handed_off"] += moved
            log.info("handed %d URLs of hosts owned elsewhere to %s", moved, per_peer)
            self.note_outboxed(per_peer)
        for peer in list(self.outbox_counts):
            member = self.membership.get(peer)
            if member is None or member.state is PeerState.DOWN:
                await self._reroute(peer)
        return moved

    async def peer_statuses(self) -> dict[str, dict]:
        """Every reachable peer's own status (``scope=local``), fetched concurrently."""
        if self._session is None:
            return {}

        async def one(member) -> tuple[str, dict | None]:
            try:
                async with self._session.get(f"{member.url}/v1/status", params={"scope": "local"},
                                             timeout=aiohttp.ClientTimeout(total=2)) as response:
                    return member.node_id, (await response.json()) if response.status == 200 else None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                return member.node_id, None

        results = await asyncio.gather(*(one(m) for m in self.membership.peers() if m.state is not PeerState.DOWN))
        return {node_id: status for node_id, status in results if status is not None}

    # ---------------------------------------------------------------- views
    def members_status(self) -> list[dict]:
        shares = self._ring.arc_shares()
        return [{"id": m.node_id, "url": m.url, "state": m.state.value, "self": m.is_self, "left": m.left,
                 "arc_share": round(shares.get(m.node_id, 0.0), 4),
                 "outbox": self.outbox_counts.get(m.node_id, 0)} for m in self.membership.members()]

    def ring_status(self) -> dict:
        shares = self._ring.arc_shares()
        return {
            "node_id": self.node_id,
            "vnodes": self.settings.ring_vnodes,
            "key_by": self.settings.ring_key_by,
            "members": [{"id": m.node_id, "url": m.url, "state": m.state.value,
                         "arc_share": round(shares.get(m.node_id, 0.0), 6),
                         "points": sum(1 for _, owner in self._ring.points() if owner == m.node_id)}
                        for m in self.membership.members()],
        }
