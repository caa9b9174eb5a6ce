"""The node's view of the cluster, wired from its parts:

- routing (cluster.routing.Router): which member crawls a host right now;
- heartbeats, join and leave (cluster.heartbeats.Heartbeats): who is alive;
- outboxes (cluster.forwarding.Outboxes): the URLs owed to each peer, one sender per peer;
- sweeps (cluster.sweep.Sweeper): hosts held here but owned elsewhere go to their owner.

Every change of the live set goes through :meth:`Cluster._changed`, which refreshes the
routes, wakes the senders and the sweeper, and tells the node (``on_change``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from crawler_node.cluster.activity import PeerActivity
from crawler_node.cluster.cluster_snapshot import ClusterCounters, ClusterEvent, ClusterSnapshot, MemberSnapshot
from crawler_node.cluster.fencing import Fencing
from crawler_node.cluster.forwarding import Outboxes
from crawler_node.cluster.heartbeats import Heartbeats, IpShareLink
from crawler_node.cluster.known_members import KnownMembers
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import PeerClient, PeerTimeouts, PeerUnreachable
from crawler_node.cluster.peerdns import PeerDns, own_addresses, parse_peer_dns
from crawler_node.cluster.readiness import StartupHold
from crawler_node.cluster.replica_keeper import ReplicaKeeper
from crawler_node.cluster.routing import Router
from crawler_node.cluster.sweep import Sweeper
from crawler_node.config import ClusterConfig
from crawler_node.frontier import AddResult, FrontierService, HostPoliteness
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.cluster")

EVENTS_KEPT = 50


class Cluster:
    def __init__(self, *, config: ClusterConfig, frontier: FrontierService, supervisor: Supervisor,
                 on_change: Callable[[], None], on_taken: Callable[[AddResult], None], outbox_space: Wakeup,
                 clock: Callable[[], float],
                 politeness_of: Callable[[str], HostPoliteness | None] = lambda host: None,
                 on_regained: Callable[[float, float], None] | None = None,
                 ip_link: IpShareLink | None = None) -> None:
        """``on_change``: the live set changed (the node releases hosts it no longer serves);
        ``on_taken``: URLs a reroute brought into this node's own frontier; ``politeness_of``:
        a host's politeness here, handed over with it; ``on_regained``: this member heard a
        majority again (cluster.fencing); ``ip_link``: per-IP shares agreed with the peers
        through the heartbeats (cluster.ipshare; None: each node keeps its own limit)."""
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self._on_change = on_change
        self.joining = bool(config.peers) and config.node_id not in config.peers
        self.membership = Membership(config.node_id, config.advertise_url, dict(config.peers), now=clock(),
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
        self.router = Router(membership=self.membership, weights=config.weights, vnodes=config.ring_vnodes,
                             key_by=config.ring_key_by)
        self.fencing = Fencing(membership=self.membership, handback_delay_s=config.handback_delay_s, clock=clock,
                               on_regained=on_regained)
        # Every request to a member goes through it (a session even for one node: a member may
        # join it at any time).
        self.client = PeerClient(secret=config.secret, timeouts=PeerTimeouts(
            heartbeat_s=config.heartbeat_timeout_s, connect_s=config.heartbeat_timeout_s * 2))
        self.outboxes = Outboxes(frontier=frontier, router=self.router, membership=self.membership,
                                 client=self.client, supervisor=supervisor, capacity=config.outbox_capacity,
                                 batch=config.forward_batch,
                                 linger_s=config.forward_linger_s,
                                 failure_pause_s=min(1.0, config.heartbeat_interval_s),
                                 on_taken=on_taken, on_down=self._forward_failed, on_alive=self._forward_ok,
                                 space=outbox_space, clock=clock)
        self.sweeper = Sweeper(frontier=frontier, router=self.router, membership=self.membership,
                               outboxes=self.outboxes, politeness_of=politeness_of)
        self.replicas = ReplicaKeeper(frontier=frontier, router=self.router, outboxes=self.outboxes,
                                      on_taken=on_taken)
        self.heartbeats = Heartbeats(membership=self.membership, advertise_url=config.advertise_url,
                                     interval_s=config.heartbeat_interval_s, client=self.client,
                                     supervisor=supervisor, on_changed=self._changed,
                                     on_member=self.outboxes.ensure_sender, clock=clock, ip_link=ip_link,
                                     on_incarnation=self.replicas.heard)
        if ip_link is not None:
            ip_link.peers_live(self.membership.live_ids() - {self.node_id})
        self._supervisor = supervisor
        self._asked: Counter[str] = Counter()  # member -> heartbeats it sent here since this start (up to 2)
        self.leaving = False  # --handoff-on-exit in progress: heartbeats say so
        self.leaving_done = False  # drained: refuse new URLs
        self.drained = False  # ... and all of it handed on and acknowledged (heartbeats say so)
        self.events: list[ClusterEvent] = []  # membership changes, newest last (bounded)
        self.received = 0  # URLs peers' outboxes forwarded here to crawl (the other end of "forwarded")
        self._ip = ip_link
        self.peer_dns: PeerDns | None = None
        if config.peer_dns:
            name, port = parse_peer_dns(config.peer_dns, default_port=urlsplit(config.advertise_url).port or 8080)
            self.peer_dns = PeerDns(name=name, port=port, interval_s=config.peer_dns_interval_s,
                                    node_id=config.node_id, advertise_url=config.advertise_url,
                                    membership=self.membership, learn=self._learnt, client=self.client,
                                    supervisor=supervisor, own=own_addresses())

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
        replica of this node's queue hears that this start is empty (cluster.replica_keeper) and
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
        await self.client.start()
        self.membership.reset_clocks(self._clock())  # startup time is not silence
        if self.joining:
            await self.heartbeats.join()
        await self.outboxes.start()
        if self.peer_dns is not None:  # the first lookup before the first lease: find the others
            await self.peer_dns.start()
        self.heartbeats.start()
        self._supervisor.recurring("handoff-sweep", self.sweeper.round)
        self._supervisor.recurring("replica", self.replicas.round)

    def watch_startup(self, hold: StartupHold) -> None:
        """A starting member's hold: heartbeats report to it, and peer DNS looks more often
        while it holds."""
        self.heartbeats.watch_startup(hold)
        if self.peer_dns is not None:
            self.peer_dns.watch_startup(lambda: hold.holding)

    async def close(self) -> None:
        await self.client.close()

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
        async def one(node_id: str, url: str) -> tuple[str, dict[str, Any] | None]:
            try:
                reply = await self.client.status(url, to=node_id)
                # Parsed without letting a hostile peer's nesting reach past this call.
                body = reply.json() if reply.status == 200 else None
            except (PeerUnreachable, ValueError):
                return node_id, None
            return node_id, body if isinstance(body, dict) else None

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
