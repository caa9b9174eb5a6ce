"""The cluster's side of the neighbours' replica (frontier.replica): when a neighbour's hosts
come here, its queued URLs are queued here; when a neighbour comes back with an empty frontier
(a new incarnation in its heartbeat answers), it gets back what is kept of it, and a replica of
this node's queue for the hosts it is the successor of; when a successor seen down is live
again, it is sent a refresh of that replica (frontier.replica), as what this node queued and
fetched meanwhile went to another successor: it is owed one durably from the moment it is
seen down, so a refresh cut short by this node's own restart is sent after it.

All run in one recurring job, woken by a membership change (takeover) or by a heartbeat that
heard a peer's incarnation change; a round that fails is logged and the job runs again, and a
give-back not finished is done again (the peer deduplicates).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from crawler_node.cluster.forwarding import Outboxes
from crawler_node.cluster.routing import Router
from crawler_node.core.stats import stat
from crawler_node.frontier import AddResult, FrontierService
from crawler_node.frontier.replica import FIRST, Cursor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.cluster")

PROMOTE_HOSTS_PER_CALL = 200
GIVE_BACK_ROWS_PER_CALL = 5_000
RESEND_HOSTS_PER_CALL = 500
RESEND_FINISHED_ROWS_PER_CALL = 5_000  # rows of the urls table read per call (most are not owed)
# What an incarnation may look like (schema.connect makes 16 hex digits): anything else a peer
# says is ignored, never stored.
_INCARNATION = re.compile(r"[0-9A-Za-z_-]{1,64}")


class ReplicaKeeper:
    def __init__(self, *, frontier: FrontierService, router: Router, outboxes: Outboxes,
                 on_taken: Callable[[AddResult], None]) -> None:
        """``on_taken``: URLs a takeover queued here (the node's host table learns of them)."""
        self._frontier = frontier
        self._router = router
        self._outboxes = outboxes
        self._on_taken = on_taken
        self._wanted = Wakeup()
        self._promote_wanted = True  # the first round looks: a takeover may predate this start
        self._heard: dict[str, str] = {}  # peer -> incarnation heard, not yet compared
        self._known: dict[str, str] = {}  # peer -> incarnation compared with the stored one
        self._owed: set[str] | None = None  # peers owed a refresh (as stored; read at the first round)
        self._seen_down: set[str] = set()  # peers seen down since the last round (to be owed a refresh)
        self._went_down: Counter[str] = Counter()  # times each peer was seen down (a refresh under way is void)
        self._in_round = False
        self.counters = ReplicaCounts()

    def membership_changed(self) -> None:
        # Synchronously, with no await: a peer seen down for a moment between two rounds still
        # counts (what this node queued meanwhile went to another successor).
        membership = self._router.membership
        live = membership.live_ids()
        for peer in membership.ids():
            if peer not in live and peer != membership.self_id:
                self._seen_down.add(peer)
                self._went_down[peer] += 1
        self._promote_wanted = True
        self._wanted.notify()

    def heard(self, peer: str, incarnation: str) -> None:
        """A peer's heartbeat answer named its incarnation (cheap: compared in memory first)."""
        if self._known.get(peer) != incarnation and _INCARNATION.fullmatch(incarnation):
            self._heard[peer] = incarnation
            self._wanted.notify()

    def idle(self) -> bool:
        """Nothing to compare, promote or give back, and no round under way: what a round
        queues or outboxes is counted there, but between a heartbeat that heard a new
        incarnation and the give-back in the outbox, only here (a node idle then would let
        the cluster say it is idle while a returned peer's queue is still to be given back)."""
        return not (self._in_round or self._promote_wanted or self._heard)

    async def round(self) -> None:
        if not self._promote_wanted and not self._heard:
            await self._wanted.wait()
        self._in_round = True
        try:
            await self._round()
        finally:
            self._in_round = False

    async def _round(self) -> None:
        if self._promote_wanted:
            self._promote_wanted = False
            await self._promote()
            await self._refresh_returned()
        for peer, incarnation in list(self._heard.items()):
            # Taken off first: a round that fails does not spin on it (the next answer brings it
            # back, and a give-back cut short is given again; the peer deduplicates).
            del self._heard[peer]
            if await self._frontier.replica_heard(peer, incarnation):
                log.warning("%s came back with an empty frontier (incarnation %s): giving it back its replica",
                            peer, incarnation)
                await self._give_back(peer)
                await self._resend(peer)  # a refresh, too: whatever it was owed is sent
                await self._frontier.replica_record(peer, incarnation)  # only now: a give-back cut short is redone
            self._known[peer] = incarnation

    async def _refresh_returned(self) -> None:
        """Owe a refresh to the peers seen down; send it to those owed one that are live."""
        if self._owed is None:
            self._owed = await self._frontier.replica_owed()
        new = sorted(self._seen_down - self._owed)
        if new:
            await self._frontier.replica_owe(new)  # durable first: this node may die before they are back
            self._owed.update(new)
        self._seen_down -= self._owed
        live = self._router.membership.live_ids()
        for peer in sorted(self._owed & live):
            log.info("%s is back: refreshing its replica of this node's queue", peer)
            await self._resend(peer)
            self.counters.refreshed += 1

    async def _sent_refresh(self, peer: str, went_down: int) -> None:
        """`peer` has its refresh in the outbox; seen down since it began, it is still owed one
        (the outbox dropped what it had for it)."""
        if self._went_down[peer] == went_down and peer in self._router.membership.live_ids():
            await self._frontier.replica_refreshed(peer)
            if self._owed is not None:
                self._owed.discard(peer)

    async def _promote(self) -> None:
        router = self._router
        after: str | None = ""
        while after is not None:
            # what is queued here is replicated to its successor in turn (the next loss loses nothing)
            result, after = await self._frontier.replica_promote(router.serves, after, PROMOTE_HOSTS_PER_CALL,
                                                                 router.successor_for)
            if result.accepted:
                self.counters.promoted += len(result.accepted)
                log.info("took over %d queued URLs of a neighbour from its replica", len(result.accepted))
                self._on_taken(result)
                replicated = Counter(successor for entry in result.accepted
                                     if (successor := router.successor_for(entry.host)) is not None)
                if replicated:
                    self._outboxes.note_outboxed(replicated)

    async def _give_back(self, peer: str) -> None:
        route = self._router.route
        after: Cursor | None = FIRST
        while after is not None:
            owed, after = await self._frontier.replica_give_back(peer, route, after, GIVE_BACK_ROWS_PER_CALL)
            if owed:
                self.counters.given_back += owed
                self._outboxes.note_outboxed({peer: owed})

    async def _resend(self, peer: str) -> None:
        successor_of = self._router.successor_if_served
        went_down = self._went_down[peer]
        token = secrets.token_hex(8)  # names this refresh at the peer (its stale rows lack it)
        after: str | None = ""
        while after is not None:
            owed, after = await self._frontier.replica_resend(peer, successor_of, after, RESEND_HOSTS_PER_CALL,
                                                              token)
            if owed:
                self.counters.resent += owed
                self._outboxes.note_outboxed({peer: owed})
        # then what this node finished of those hosts: a takeover does not fetch it again
        after_id: int | None = 0
        while after_id is not None:
            owed, after_id = await self._frontier.replica_resend_finished(peer, successor_of, after_id,
                                                                          RESEND_FINISHED_ROWS_PER_CALL)
            if owed:
                self.counters.resent_finished += owed
                self._outboxes.note_outboxed({peer: owed})
        await self._sent_refresh(peer, went_down)

    def snapshot(self) -> ReplicaCounters:
        c = self.counters
        return ReplicaCounters(replica_refreshed=c.refreshed, replica_promoted=c.promoted,
                               replica_given_back=c.given_back, replica_resent=c.resent,
                               replica_resent_finished=c.resent_finished)


@dataclass(slots=True)
class ReplicaCounts:
    refreshed: int = 0  # peers back, sent this node's queue again
    promoted: int = 0  # URLs of a lost neighbour's replica taken over
    given_back: int = 0  # replica rows owed back to their owner
    resent: int = 0
    resent_finished: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaCounters:
    """The replicas' part of the status's ``cluster.counters``: each shown once it has moved."""

    replica_refreshed: int = field(metadata=stat(when="replica_refreshed"))
    replica_promoted: int = field(metadata=stat(when="replica_promoted"))
    replica_given_back: int = field(metadata=stat(when="replica_given_back"))
    replica_resent: int = field(metadata=stat(when="replica_resent"))
    replica_resent_finished: int = field(metadata=stat(when="replica_resent_finished"))
