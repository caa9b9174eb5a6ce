"""Self-fencing: a member that may no longer own its hosts starts no request to them.

The invariant: *a host is sent requests by at most one member at a time*, and the gap between
two members' requests to it is at least the fence margin below. It rests on three rules,
with every member on one clock (loopback, or machines kept in step by NTP):

1. **Fence.** A member starts a request only while it has a quorum: it heard, within
   ``suspect_after_s``, from a majority of the members, itself counted (cluster.membership
   :meth:`~crawler_node.cluster.membership.Membership.quorum`; with an even count, the half
   with the smallest id). A member cut off, or one that wakes after a SIGSTOP (its evidence is
   as old as the pause, and what it reads just after waking does not count), stops at once.
   One member alone is never fenced; of two members that lost each other, the smaller id goes
   on and the other one stops (it cannot tell a dead peer from a cut link).
2. **Takeover.** A successor takes a host over only when its owner has been silent for
   ``down_after_s``, which settings require to be at least ``suspect_after_s`` plus a heartbeat
   round: the owner fenced itself (rule 1) a round or more before, and that round is the margin
   for the owner's last requests to end and for its last request's Crawl-delay.
3. **Handback.** A member whose quorum comes back after it was lost (a partition healed, a
   pause ended) waits ``handback_delay_s`` more before its first request: meanwhile its
   successors hear it again, stop leasing its hosts and finish the requests they have under way.
   And each of its hosts with a Crawl-delay waits that delay from the moment the quorum came
   back: the members it heard from then had heard it, so had stopped starting requests to its
   hosts (the handback's politeness, which says exactly when their last one ended, comes
   through the outbox and may come later than the hold ends: with the successors' outboxes
   lingering 3 s, the owner's first request came 2.2 s after a successor's under a 4 s delay).
   A member that starts (a restart) is held by cluster.readiness instead, for the same reason.

The check runs twice: in the dispatcher before a host is picked (:meth:`Fencing.blocked_until`)
and again in the fetch task just before its request goes out (:class:`FencedFetcher`), so a
member frozen between the two sends nothing after it wakes: that request goes back unsent.

Limits (what the rules cannot see):
- A request already on the wire when its member froze or was cut off goes on at the host; the
  successor's first request comes ``down_after_s - suspect_after_s`` after the owner's fence,
  so only a request longer than that margin overlaps one request of the successor. A process
  frozen in the middle of a request cannot be fenced at all: when it wakes it reads the answer
  the host wrote long ago (harmless), but a request it had started writing (a new connection
  being opened, a body being sent) reaches the host after the wake, alongside the successor's:
  at most one such request per request slot that was under way, once per pause.
- Asymmetric partitions (a member heard by some peers and not others) can give two members the
  same host; so can clocks that disagree by more than the margin.
- A Crawl-delay longer than the margins is kept across a takeover only through the host's
  next-eligible time, which travels with the replica of its fetched URLs.
- A cluster that lost its majority fetches nothing until it has one again: with three members,
  two must be up; with two, the one with the smaller id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from crawler_node.cluster.membership import Membership
from crawler_node.core.response import FetchResult, PageFetcher
from crawler_node.core.stats import Indexed

log = logging.getLogger("crawler_node.cluster")

FENCED_RECHECK_S = 0.1  # while fenced, ask again this often (evidence arrives with heartbeats)


class NotSent(asyncio.CancelledError):  # noqa: N818 - the name says what happened to the request
    """A request not sent because its member is fenced: the fetch stage gives its lease back
    unattempted, as for any fetch cancelled before its answer."""


class Fencing:
    """May this member start a request now? Pure: it reads the membership's evidence and the
    clock it is given; it keeps only what it last said, to log the changes once."""

    def __init__(self, *, membership: Membership, handback_delay_s: float, clock: Callable[[], float],
                 on_regained: Callable[[float, float], None] | None = None) -> None:
        """``on_regained(regained_at, now)``: told once per quorum regained, before any request
        after it: the node's host table spaces this member's hosts from then
        (node.hosts.HostTable.regained)."""
        if handback_delay_s < 0:
            raise ValueError(f"handback_delay_s must be >= 0, got {handback_delay_s}")
        self._membership = membership
        self._handback_delay_s = handback_delay_s
        self._clock = clock
        self._said: str | None = None  # the reason last logged, None: leasing
        self.fenced_count = 0  # times leasing stopped for want of a quorum
        self.held_count = 0  # handback holds
        self._on_regained = on_regained
        self._regained_told: float | None = None

    def blocked_until(self, now: float) -> float | None:
        """None when this member may start a request now; else when to ask again."""
        membership = self._membership
        if not membership.quorum(now):
            self._say("fenced", "no majority heard from within %.1f s: starting no request",
                      membership.suspect_after_s)
            return now + FENCED_RECHECK_S
        regained = membership.quorum_regained_at
        if regained is not None and regained != self._regained_told:
            self._regained_told = regained
            if self._on_regained is not None:
                self._on_regained(regained, now)
        if regained is not None and now < regained + self._handback_delay_s:
            self._say("handback", "a majority heard again: starting requests in %.1f s, once the successors "
                      "have let go of this member's hosts", regained + self._handback_delay_s - now)
            return regained + self._handback_delay_s
        self._say(None, "leasing again")
        return None

    def may_send(self) -> bool:
        return self.blocked_until(self._clock()) is None

    def _say(self, reason: str | None, message: str, *args: float) -> None:
        if reason == self._said:
            return
        if reason == "fenced":
            self.fenced_count += 1
        elif reason == "handback":
            self.held_count += 1
        if reason is not None or self._said is not None:
            log.log(logging.WARNING if reason == "fenced" else logging.INFO, message, *args)
        self._said = reason

    def snapshot(self) -> FencingSnapshot:
        return FencingSnapshot(blocked=self._said, fenced=self.fenced_count, handback_holds=self.held_count,
                               pauses=self._membership.pauses)


@dataclass(frozen=True, slots=True)
class FencingSnapshot(Indexed):
    """As of the last check: ``blocked`` is "fenced", "handback" or None (leasing)."""

    blocked: str | None
    fenced: int
    handback_holds: int
    pauses: int  # times this process was found to have stood still



class FencedFetcher:
    """A fetcher that asks the fence once more just before each request: a fetch task created
    before a pause runs its first step after the wake, and there, with no await between this
    check and the request on a pooled connection, it finds the member fenced."""

    def __init__(self, fetcher: PageFetcher, *, fencing: Fencing) -> None:
        self._fetcher = fetcher
        self._fencing = fencing

    async def fetch(self, url: str, *, max_body_bytes: int | None = None,
                    headers: dict[str, str] | None = None) -> FetchResult:
        if not self._fencing.may_send():
            raise NotSent(f"not sent: this member is fenced ({url})")
        return await self._fetcher.fetch(url, max_body_bytes=max_body_bytes, headers=headers)
