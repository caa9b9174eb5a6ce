"""Sweeps: hosts this node holds but no longer owns (handback after a takeover, a join) are
handed to their owner through the same acknowledged outbox — their queued URLs to crawl, their
fetched ones as seen, so the owner never repeats them.

Ownership moves only when the membership does, so a full sweep (every host with rows, a page
at a time from the frontier's hosts table) runs after each membership change and at start;
in between, a light sweep looks only at the hosts with queued work (URLs can land here for a
host owned elsewhere: a hop limit reached, a view that disagreed for a moment), and, for a
while after a full sweep, at the hosts it found owned elsewhere: rows whose fetch was in
flight then are handed over once it has ended.

After each sweep the outboxes learn what they held for each peer it handed something to (every
peer, after a full sweep: Outboxes.mark_handback): until that is acknowledged, while a full sweep is wanted or running
(``settling``), and while a host handed to a peer still has a fetch under way here
(``in_flight_for``: its last rows follow once it ends), this node tells a starting member that
it may still owe it a handback (cluster.readiness rule 3). So the member's first request to
such a host comes after this node's last one has ended, and with its politeness. While such
fetches are under way the light sweep comes every ``IN_FLIGHT_RECHECK_S``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from crawler_node.cluster.forwarding import Outboxes
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.routing import Router
from crawler_node.frontier import FrontierService, HostPoliteness
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.cluster")

LIGHT_SWEEP_EVERY_S = 2.0
IN_FLIGHT_RECHECK_S = 0.25  # while a handed host still has a fetch under way here
HOSTS_PER_PAGE = 2_000
RECHECK_S = 60.0  # longer than the slowest fetch (fetch_timeout_s) that was in flight at a sweep


class Sweeper:
    def __init__(self, *, frontier: FrontierService, router: Router, membership: Membership, outboxes: Outboxes,
                 on_swept: Callable[[], None] | None = None,
                 politeness_of: Callable[[str], HostPoliteness | None] = lambda host: None) -> None:
        """``politeness_of(host)``: what the owner must honour of this node's requests to it."""
        self._frontier = frontier
        self._politeness_of = politeness_of
        self._router = router
        self._membership = membership
        self._outboxes = outboxes
        self._on_swept = on_swept
        self._wanted = Wakeup()
        self._full_wanted = True  # the first sweep after start looks at every host
        self._full_running = False
        self._recheck: set[str] = set()  # hosts the last full sweep found owned elsewhere
        self._recheck_until = 0.0
        self._in_flight: dict[str, str] = {}  # handed host with a fetch under way here -> its owner
        self.handed_off = 0  # URLs of hosts this node no longer owns, handed to their owners

    @property
    def settling(self) -> bool:
        """A full sweep is wanted or under way: what this node owes its peers is not all in
        its outboxes yet."""
        return self._full_wanted or self._full_running

    def in_flight_for(self, peer: str) -> bool:
        """A host handed to ``peer`` still has a fetch under way here."""
        return peer in self._in_flight.values()

    def request(self, *, full: bool = False) -> None:
        self._full_wanted = self._full_wanted or full
        self._wanted.notify()

    async def round(self) -> None:
        """One recurring round: wait for a request (or the light sweep's interval), sweep."""
        if not self._full_wanted:
            await self._wanted.wait(IN_FLIGHT_RECHECK_S if self._in_flight else LIGHT_SWEEP_EVERY_S)
        full, self._full_wanted = self._full_wanted, False
        self._full_running = full
        try:
            await self.sweep(full=full)
        finally:
            self._full_running = False

    async def sweep(self, *, full: bool) -> int:
        """Hand every host held here but owned elsewhere to its owner; reroute the outboxes of
        peers that are down. Returns how many URLs moved."""
        per_peer: Counter[str] = Counter()
        now = time.monotonic()
        if full:
            self._recheck, self._recheck_until = set(), now + RECHECK_S
            self._in_flight = {}
            after = ""
            while True:
                hosts = await self._frontier.hosts_after(after, HOSTS_PER_PAGE)
                if not hosts:
                    break
                self._recheck.update(await self._hand_off(hosts, per_peer))
                after = hosts[-1]
        else:
            if now > self._recheck_until:
                self._recheck.clear()
            with_work = {record.host for record in await self._frontier.hosts_with_work()} | self._recheck
            with_work |= self._in_flight.keys()
            await self._hand_off(sorted(with_work), per_peer)
        moved = sum(per_peer.values())
        if moved:
            self.handed_off += moved
            log.info("handed %d URLs of hosts owned elsewhere to %s", moved, dict(per_peer))
            self._outboxes.note_outboxed(per_peer)
        if full or per_peer:
            # What this sweep found owed to a peer is in its outbox now (after a full sweep,
            # with the rows left there from before a restart): its handback ends with the last.
            last = await self._frontier.outbox_last_ids()
            self._outboxes.mark_handback(last if full else {peer: last[peer] for peer in per_peer if peer in last})
        for peer in list(self._outboxes.counts):
            member = self._membership.get(peer)
            if member is None or member.state is PeerState.DOWN:
                await self._outboxes.reroute(peer)
        if self._on_swept is not None:
            self._on_swept()
        return moved

    async def _hand_off(self, hosts: list[str], per_peer: Counter[str]) -> list[str]:
        """Hand the hosts owned elsewhere to their owners; returns those hosts."""
        route = self._router.route
        elsewhere = []
        for host in hosts:
            target = route(host)
            if target is None:
                self._in_flight.pop(host, None)
                continue
            elsewhere.append(host)
            count = await self._frontier.handoff_host(host, target, politeness=self._politeness_of(host))
            if count:
                per_peer[target] += count
        if elsewhere:
            leased = await self._frontier.in_flight(elsewhere)
            for host in elsewhere:
                if host in leased:
                    self._in_flight[host] = route(host) or ""
                else:
                    self._in_flight.pop(host, None)
        return elsewhere
