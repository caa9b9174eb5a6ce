"""The node's view of the cluster, wired from its parts:

- routing (cluster.routing.Router): which member crawls a host right now;
- heartbeats, join and leave (cluster.heartbeats.Heartbeats): who is alive;
- outboxes (cluster.outbox.Outboxes): the URLs owed to each peer, one sender per peer;
- sweeps (cluster.sweep.Sweeper): hosts held here but owned elsewhere go to their owner.

Every change of the live set goes through :meth:`Cluster._changed`, which refreshes the
routes, wakes the senders and the sweeper, and tells the node (``on_change``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from crawler_node.cluster.activity import PeerActivity
from crawler_node.cluster.fencing import Fencing
from crawler_node.cluster.heartbeats import Heartbeats, IpShareLink
from crawler_node.cluster.known_members import KNOWN_MEMBERS_FILENAME, KnownMembers
from crawler_node.cluster.membership import ADDRESSED_TO, Membership, PeerState
from crawler_node.cluster.outbox import Outboxes
from crawler_node.cluster.peerdns import PeerDns, advertised_url, own_addresses, parse_peer_dns
from crawler_node.cluster.readiness import StartupHold
from crawler_node.cluster.replica import ReplicaKeeper
from crawler_node.cluster.routing import Router
from crawler_node.cluster.snapshot import ClusterCounters, ClusterEvent, ClusterSnapshot, MemberSnapshot
from crawler_node.cluster.sweep import Sweeper
from crawler_node.frontier import AddResult, FrontierService, HostPoliteness
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.settings import Settings

log = logging.getLogger("crawler_node.cluster")

EVENTS_KEPT = 50


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """What the cluster's parts are built from; read from Settings in one place."""

    node_id: str
    advertise_url: str
    peers: dict[str, str]
    weights: dict[str, int]
    secret: str | None
    vnodes: int
    key_by: str
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    suspect_after_s: float
    down_after_s: float
    outbox_capacity: int
    forward_batch: int
    forward_linger_s: float
    peer_dns: str | None = None  # NAME[:PORT] to find members by (cluster.peerdns)
    peer_dns_interval_s: float = 5.0
    handback_delay_s: float = 1.0
    known_members_file: Path | None = None  # members found by DNS, kept across restarts (cluster.known_members)

    @classmethod
    def from_settings(cls, s: Settings) -> ClusterConfig:
        # Found by DNS with no --advertise: this machine's address, not the 0.0.0.0 listened on.
        advertise_url = advertised_url(s.advertise_url) if s.peer_dns and not s.advertise else s.advertise_url
        return cls(node_id=s.node_id, advertise_url=advertise_url, peers=s.peer_map(), weights=s.weight_map(),
                   secret=s.secret, vnodes=s.ring_vnodes, key_by=s.ring_key_by,
                   heartbeat_interval_s=s.heartbeat_interval_s, heartbeat_timeout_s=s.heartbeat_timeout_s,
                   suspect_after_s=s.suspect_after_s, down_after_s=s.down_after_s,
                   outbox_capacity=s.outbox_capacity, forward_batch=s.forward_batch,
                   forward_linger_s=s.forward_linger_s, peer_dns=s.peer_dns,
                   peer_dns_interval_s=s.peer_dns_interval_s, handback_delay_s=s.handback_delay_s,
                   known_members_file=s.data_dir / KNOWN_MEMBERS_FILENAME if s.peer_dns else None)


PEER_STATUS_MAX_BYTES = 4_000_000  # a peer's /v1/status read for the cluster view, at most


class Cluster:
    def __init__(self, *, config: ClusterConfig, frontier: FrontierService, supervisor: Supervisor,
                 on_change: Callable[[], None], on_taken: Callable[[AddResult], None], outbox_space: Wakeup,
                 clock: Callable[[], float],
                 politeness_of: Callable[[str], HostPoliteness | None] = lambda host: None) -> None:
        """``on_change``: the live set changed (the node releases hosts it no longer serves);
        ``on_taken``: URLs a reroute brought into this node's own frontier; ``politeness_of``:
        a host's politeness here, handed over with it."""
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self._on_change = on_change
        self.joining = bool(config.peers) and config.node_id not in config.peers
        self.membership = Membership(config.node_id, config.advertise_url, config.peers, now=clock(),
                                     suspect_after_s=config.suspect_after_s, down_after_s=config.down_after_s)
        self._known: KnownMembers | None = None
        if config.known_members_file is not None:
            self._known = KnownMembers(config.known_members_file)
            remembered = self._known.load(config.node_id)
            for node_id, url in remembered:
                self.membership.add(node_id, url, clock())
            if remembered:
                log.info("remembered members %s from %s", ", ".join(sorted(i for i, _ in remembered)),
                         config.known_members_file.name)
        self.router = Router(membership=self.membership, weights=config.weights, vnodes=config.vnodes,
                             key_by=config.key_by)
        self.fencing = Fencing(membership=self.membership, handback_delay_s=config.handback_delay_s, clock=clock)
        self.outboxes = Outboxes(frontier=frontier, router=self.router, membership=self.membership,
                                 supervisor=supervisor, capacity=config.outbox_capacity, batch=config.forward_batch,
                                 linger_s=config.forward_linger_s,
                                 failure_pause_s=min(1.0, config.heartbeat_interval_s),
                                 on_taken=on_taken, on_down=self._forward_failed, on_alive=self._forward_ok,
                                 space=outbox_space, clock=clock)
        self.heartbeats = Heartbeats(membership=self.membership, advertise_url=config.advertise_url,
                                     interval_s=config.heartbeat_interval_s, timeout_s=config.heartbeat_timeout_s,
                                     supervisor=supervisor, on_changed=self._changed,
                                     on_member=self.outboxes.ensure_sender, clock=clock)
        self.sweeper = Sweeper(frontier=frontier, router=self.router, membership=self.membership,
                               outboxes=self.outboxes, politeness_of=politeness_of)
        self.replicas = ReplicaKeeper(frontier=frontier, router=self.router, outboxes=self.outboxes,
                                      on_taken=on_taken)
        self.heartbeats.watch_incarnations(self.replicas.heard)
        self._supervisor = supervisor
        self._session: aiohttp.ClientSession | None = None
        self._asked: Counter[str] = Counter()  # member -> heartbeats it sent here since this start (up to 2)
        self.leaving = False  # --handoff-on-exit in progress: heartbeats say so
        self.leaving_done = False  # drained: refuse new URLs
        self.drained = False  # ... and all of it handed on and acknowledged (heartbeats say so)
        self.events: list[ClusterEvent] = []  # membership changes, newest last (bounded)
        self.received = 0  # URLs peers' outboxes forwarded here to crawl (the other end of "forwarded")
        self._ip: IpShareLink | None = None
        self.peer_dns: PeerDns | None = None
        if config.peer_dns:
            name, port = parse_peer_dns(config.peer_dns, default_port=urlsplit(config.advertise_url).port or 8080)
            self.peer_dns = PeerDns(name=name, port=port, interval_s=config.peer_dns_interval_s,
                                    node_id=config.node_id, advertise_url=config.advertise_url,
                                    membership=self.membership, learn=self._learnt, supervisor=supervisor,
                                    own=own_addresses())

    def share_ips(self, link: IpShareLink) -> None:
        """Agree per-IP shares with the peers through the heartbeats (cluster.ipshare)."""
        self._ip = link
        self.heartbeats.share_ips(link)
        link.peers_live(self.membership.live_ids() - {self.node_id})

    def ip_announcement(self, for_peer: str | None = None) -> dict[str, Any] | None:
        """The ``ips`` of this node's heartbeat answers (None: it does not share); ``for_peer``:
        the answer is for that member, which reads only its own acknowledgement in ``seen``."""
        announcement = self._ip.announcement() if self._ip is not None else None
        if announcement is not None and for_peer is not None:
            seen = announcement.get("seen", {})
            announcement["seen"] = {for_peer: seen[for_peer]} if for_peer in seen else {}
        return announcement

    def note_asked(self, peer: str | None) -> None:
        """A member's heartbeat asked this node for its members (``GET /v1/members?from=``)."""
        if peer is not None and self._asked[peer] < 2 and peer != self.node_id and peer in self.membership.ids():
            self._asked[peer] += 1

    def heard_by_peers(self) -> bool:
        """Every live peer has read this node's incarnation since it started, and acted on it:
        a second heartbeat from a peer begins after it handled the answer to its first (one
        peer's heartbeats follow each other), and handling it is where a peer that holds a
        replica of this node's queue hears that this start is empty (cluster.replica) and
        stops being idle until it has given it back."""
        return all(self._asked[peer] >= 2 for peer in self.membership.live_ids() if peer != self.node_id)

    def owes_handback(self, peer: str) -> bool:
        """This node may still owe ``peer`` hosts it held for it (cluster.readiness rule 3):
        ``peer`` is not live in its view (its arc is crawled elsewhere, here maybe), a full
        sweep is wanted or under way, a host handed to ``peer`` still has a fetch under way
        here, or what its outbox held for ``peer`` at the end of the last sweep is not all
        acknowledged."""
        return (peer not in self.membership.live_ids() or self.sweeper.settling
                or self.sweeper.in_flight_for(peer) or self.outboxes.owes_handback(peer))

    def idle(self) -> bool:
        """Nothing this node's cluster side still has to hand to a peer, or hear from one."""
        return self.outboxes.total() == 0 and self.replicas.idle() and self.heard_by_peers()

    # ----------------------------------------------------------------- routing
    @property
    def is_single(self) -> bool:
        return self.router.is_single

    def route(self, host: str) -> str | None:
        return self.router.route(host)

    def serves(self, host: str) -> bool:
        return self.router.serves(host)

    def successor_for(self, host: str) -> str | None:
        return self.router.successor_for(host)

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        # A session even for one node: a member may join it at any time.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10, sock_connect=self.config.heartbeat_timeout_s * 2),
            trust_env=False,
            headers={"Authorization": f"Bearer {self.config.secret}"} if self.config.secret else {},
        )
        self.membership.reset_clocks(self._clock())  # startup time is not silence
        if self.joining:
            await self.heartbeats.join(self._session)
        await self.outboxes.start(self._session)
        if self.peer_dns is not None:  # the first lookup before the first lease: find the others
            await self.peer_dns.start(self._session)
        self.heartbeats.start(self._session)
        self._supervisor.recurring("handoff-sweep", self.sweeper.round)
        self._supervisor.recurring("replica", self.replicas.round)

    def watch_startup(self, hold: StartupHold) -> None:
        """A starting member's hold: heartbeats report to it, and peer DNS looks more often
        while it holds."""
        self.heartbeats.watch_startup(hold)
        if self.peer_dns is not None:
            self.peer_dns.watch_startup(lambda: hold.holding)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ----------------------------------------------------------------- changes
    def _changed(self, why: str) -> None:
        self.router.refresh()
        if self._ip is not None:  # a peer down releases its shares; one back is waited for
            self._ip.peers_live(self.membership.live_ids() - {self.node_id})
        live = sorted(self.membership.live_ids())
        self.events.append(ClusterEvent(at=self._clock(), event=why, live=tuple(live)))
        del self.events[:-EVENTS_KEPT]
        log.info("membership: %s; live members now %s", why, live)
        self.sweeper.request(full=True)
        self.replicas.membership_changed()
        self.outboxes.wake_all()
        if self._known is not None:
            self._known.save(self.membership)
        self._on_change()

    def _learnt(self, members: list[tuple[str, str]], via: str) -> None:
        """A member list answered to a join through DNS (cluster.peerdns)."""
        now = self._clock()
        new = self.membership.merge(members, now)
        for peer in new:
            self.outboxes.ensure_sender(peer)
        # What `via` says of its own URL is its address now: the one remembered from before
        # a restart may be another member's (members.json; docker hands addresses out again).
        own_url = dict(members).get(via)
        moved = via not in new and own_url is not None and self.membership.add(via, own_url, now)
        alive = self.membership.observe_ok(via, now)
        if new or alive or moved:
            self._changed(f"found {', '.join(new) or via} through DNS ({via} answered"
                          + (f", at {own_url} now)" if moved else ")"))

    def _forward_failed(self, peer: str, why: str) -> None:
        if self.membership.observe_failure(peer, self._clock()):
            self._changed(f"{peer} is down ({why})")

    def _forward_ok(self, peer: str) -> None:
        if self.membership.observe_ok(peer, self._clock()):
            self._changed(f"{peer} is alive")

    def note_received(self, count: int) -> None:
        """A peer's batch of ``count`` URLs to crawl (not seen ones) was taken in and answered
        202: once every batch is acknowledged, the members' forwarded totals sum to their
        received totals (a batch whose 202 was lost is sent, and received, again)."""
        self.received += count

    # ----------------------------------------------------------------- membership API
    def accept_join(self, node_id: str, url: str) -> list[dict[str, str]]:
        """Raises ValueError for an id or URL that cannot be a member."""
        return self.heartbeats.accept_join(node_id, url)

    def accept_leave(self, node_id: str, *, drained: bool = False) -> None:
        self.heartbeats.accept_leave(node_id, drained=drained)

    async def begin_leaving(self) -> None:
        """--handoff-on-exit: stop owning an arc; the others route this node's hosts elsewhere."""
        self.leaving = True
        await self.heartbeats.announce_leave()
        self.membership.set_self_leaving()
        self._changed("leaving the cluster")

    async def end_leaving(self, *, drained: bool) -> None:
        """The drain is over: ``drained``, everything was handed on and acknowledged, and the
        peers are told so (they stop counting this node's work); else they are told nothing
        more, and count this node as down with work until it comes back."""
        self.leaving_done = True
        if drained:
            self.drained = True
            await self.heartbeats.announce_leave(drained=True)

    async def peer_statuses(self) -> dict[str, dict[str, Any]]:
        """Every reachable peer's own status (``scope=local``), fetched concurrently."""
        session = self._session
        if session is None:
            return {}

        async def one(node_id: str, url: str) -> tuple[str, dict[str, Any] | None]:
            try:
                async with session.get(f"{url}/v1/status", params={"scope": "local"}, headers={ADDRESSED_TO: node_id},
                                       timeout=aiohttp.ClientTimeout(total=2)) as response:
                    if response.status != 200:
                        return node_id, None
                    # Bounded, and parsed without letting a hostile peer's nesting or size
                    # reach past this call: a status is some tens of kB.
                    raw = await response.content.read(PEER_STATUS_MAX_BYTES + 1)
                    body = json.loads(raw) if len(raw) <= PEER_STATUS_MAX_BYTES else None
                    return node_id, body if isinstance(body, dict) else None
            except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError):
                return node_id, None

        results = await asyncio.gather(*(one(m.node_id, m.url) for m in self.membership.peers()
                                         if m.state is not PeerState.DOWN))
        return {node_id: status for node_id, status in results if status is not None}

    # ----------------------------------------------------------------- views
    def peer_activity(self) -> list[PeerActivity]:
        """Each peer's state and last heartbeat's activity (cluster.activity)."""
        activity = self.heartbeats.activity
        return [PeerActivity(m.node_id, m.state.value, m.left and m.drained, activity.get(m.node_id))
                for m in self.membership.peers()]

    def members_status(self) -> tuple[MemberSnapshot, ...]:
        shares = self.router.ring.arc_shares()
        counts = self.outboxes.counts
        failures = self.heartbeats.failures
        now = self._clock()
        members = []
        for m in self.membership.members():
            drained = m.drained or (m.is_self and self.drained)
            members.append(MemberSnapshot(
                id=m.node_id, url=m.url, state=m.state.value, is_self=m.is_self, left=m.left and drained,
                leaving=m.left and not drained, arc_share=round(shares.get(m.node_id, 0.0), 4),
                outbox=counts.get(m.node_id, 0),
                heartbeat_age_s=0.0 if m.is_self else round(max(0.0, now - m.last_ok), 1),
                up=None if m.left and drained else int(m.state is PeerState.ALIVE),
                peer_outbox=None if m.is_self else counts.get(m.node_id, 0),
                heartbeat_failures=None if m.is_self else failures.get(m.node_id, 0)))
        return tuple(members)

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            members=self.members_status(),
            counters=ClusterCounters(outbox=self.outboxes.snapshot().counters, handed_off=self.sweeper.handed_off,
                                     replica=self.replicas.snapshot(), received=self.received),
            events=tuple(self.events[-10:]), outbox_total=self.outboxes.total(), heartbeats=self.heartbeats.snapshot(),
            leaving=self.leaving, fencing=self.fencing.snapshot(),
            peer_dns=self.peer_dns.snapshot() if self.peer_dns is not None else None)
