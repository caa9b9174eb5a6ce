"""The per-host table: every host's state, which host sends next, and the only writer of both.

The durable frontier (SQLite) holds the URLs; this table holds one small record per host that
has had work lately, and decides without I/O which host may send its next request: it has
work, its politeness time has come, and its adaptive limiter has a free slot. Hosts rotate
round-robin, so a slow host waits on its own limiter and never blocks the others (rule 3).

A host is in exactly one place (:class:`Place`):

- IDLE: no known work (nothing queued in the frontier, nothing leased into its buffer);
- READY: in the round-robin deque: it has work, its time has come, its limiter has room;
- WAITING: in the time heap: it has work, but its next-eligible time is still to come;
- BLOCKED: it has work but cannot send now (limiter full, IP gate full, robots.txt being
  fetched, a lease on its way); a release or a refill re-places it;
- BUSY: taken by the dispatcher (``next_host``), which re-places it (``settle``) after its step.

Other components never write a host's fields; they call the methods below (its robots.txt
records are kept for the table by node.host_robots). Verdicts
(core.verdict) are applied by :meth:`HostTable.finish_page`. Idle hosts, and hosts whose turn
is over while others wait on disk, leave memory (node.host_memory). Their politeness (pauses,
Crawl-delay) is in the frontier's hosts table, handed back by the frontier when such a host
gets work again; its robots.txt answer stays in a bounded cache for a day.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from crawler_node.config import PolitenessConfig
from crawler_node.core.backoff import BackoffState, HostBackoffPolicy
from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.core.robots import AuthorityRobots, RobotsCache, RobotsPolicy, RobotsStatus, scheme_of
from crawler_node.core.verdict import RobotsAnswer, Verdict
from crawler_node.frontier import AddResult, HostPoliteness, HostQueue, Lease
from crawler_node.node.host_memory import HostMemory
from crawler_node.node.host_politeness import UnsavedPoliteness
from crawler_node.node.host_robots import HostRobots
from crawler_node.node.host_snapshot import HeldHost, HeldHosts, HostTableSnapshot
from crawler_node.node.host_state import HostState, Place, Step, tally
from crawler_node.node.rotation import Rotation
from crawler_node.runtime.wakeup import Wakeup

if TYPE_CHECKING:
    from crawler_node.node.admission import IpGate

__all__ = ["HostState", "HostTable", "Place", "Step"]

LEASE_AHEAD = 2  # a host's lease buffer is topped up below this many windows (limit) of URLs


class HostTable:
    def __init__(self, *, config: PolitenessConfig, new_limiter: Callable[[], AimdLimiter],
                 backoff_policy: HostBackoffPolicy, work: Wakeup, started_at: float,
                 robots_cache: RobotsCache | None = None, robots_policy: RobotsPolicy | None = None) -> None:
        """``work`` is notified when a host may have become ready; ``started_at`` is when this
        process started (no request of an earlier run can have ended later); ``robots_cache``
        keeps their robots.txt answers; ``robots_policy`` says when to ask again. From
        ``config``: hosts idle for ``host_idle_s`` leave memory, sooner while more than
        ``host_memory_target`` are in it; a host with work ends its turn after ``host_turn_s``
        when asked (``end_turns``; 0: never); every host is paced at least ``min_host_delay_s``,
        as a Crawl-delay (one request at a time, spaced from the end of the last), whatever its
        robots.txt says."""
        self._new_limiter = new_limiter
        self._work = work
        self._started_at = started_at
        self._min_delay_s = config.min_host_delay_s
        self._robots = HostRobots(
            cache=robots_cache if robots_cache is not None else RobotsCache(agent="*", max_bytes=0),
            policy=robots_policy if robots_policy is not None else RobotsPolicy())
        self._hosts: dict[str, HostState] = {}
        self.dropped: set[str] = set()  # by an operator: leases of these hosts end unfetched
        # Notified when a host runs out of work: the frontier may have room for a parked one.
        self.went_idle = Wakeup()
        self._rotation = Rotation(work=work, went_idle=self.went_idle)
        self._memory = HostMemory(states=self._hosts, idle=self._rotation.idle, backoff_policy=backoff_policy,
                                  idle_s=config.host_idle_s, memory_target=config.host_memory_target,
                                  turn_s=config.host_turn_s)
        self.unsaved = UnsavedPoliteness()  # durable politeness to save in the frontier (node.upkeep)

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._hosts)

    def __iter__(self) -> Iterator[HostState]:
        return iter(self._hosts.values())

    def get(self, host: str) -> HostState | None:
        return self._hosts.get(host)

    def busiest(self, n: int) -> list[HostState]:
        return heapq.nlargest(n, self._hosts.values(), key=lambda s: (s.limiter.in_flight, s.queued))

    def snapshot(self, top: int = 20, *, now: float = 0.0) -> HostTableSnapshot:
        places, health, worst = tally(self._hosts.values(), now)  # ``now``: the clock the pauses are in
        held = [(state.host, reason) for state in self._hosts.values()
                if state.robots is not None and (reason := state.held_reason()) is not None]
        return HostTableSnapshot(
            in_memory=len(self._hosts), collected=self.collected, places=places, robots_cache=self._robots.snapshot(),
            held=HeldHosts(count=len(held), hosts=tuple(HeldHost(host, reason) for host, reason in held[:top])),
            busiest=tuple(state.snapshot(now) for state in self.busiest(top)), health=health, worst=worst)

    # ----------------------------------------------------------------- work
    def drop(self, host: str) -> None:
        """An operator dropped the host: what is leased for it from now on ends unfetched."""
        self.dropped.add(host)
        if (state := self._hosts.get(host)) is not None:
            state.dropped = True

    def _state(self, host: str, now: float, politeness: HostPoliteness | None = None) -> HostState:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = HostState(host=host, limiter=self._new_limiter(),
                                                  dropped=host in self.dropped)
            state.crawl_delay = self._min_delay_s
            if politeness is not None:
                self._restore(state, politeness)
        return state

    def _restore(self, state: HostState, politeness: HostPoliteness) -> None:
        """A host's durable politeness, saved by an earlier run or before it left memory."""
        state.paused_until = politeness.next_eligible
        state.crawl_delay = max(politeness.crawl_delay, self._min_delay_s)
        # A request of an earlier run may have ended just before it died: the first one of this
        # run keeps the Crawl-delay from this run's start.
        spacing = self._started_at + politeness.crawl_delay if politeness.crawl_delay else 0.0
        state.next_eligible = max(state.next_eligible, politeness.next_eligible, spacing)
        if politeness.backoff_level:
            state.backoff = BackoffState(politeness.backoff_level, politeness.last_throttle, politeness.next_eligible)

    def add_work(self, host: str, count: int, now: float, politeness: HostPoliteness | None = None) -> None:
        state = self._state(host, now, politeness)
        if not state.has_work():
            state.active_since, state.turn_over = now, False  # a new turn starts (node.host_memory)
        state.queued += count
        if state.place is Place.IDLE or state.place is Place.BLOCKED:
            self.settle(state, now)

    def add_queued(self, result: AddResult, now: float) -> None:
        """URLs the frontier has just queued (an add, a reroute, a restore)."""
        queued = result.queued
        if not queued:
            return
        counts: dict[str, int] = {}
        for entry in queued:
            counts[entry.host] = counts.get(entry.host, 0) + 1
        politeness = result.politeness
        for host, count in counts.items():
            self.add_work(host, count, now, politeness.get(host) if politeness else None)

    def load(self, records: Iterable[HostQueue], now: float) -> None:
        """The hosts with work in the frontier (at start, and the parked ones it makes active
        later), and their durable politeness."""
        for record in records:
            self.add_work(record.host, record.queued, now, record.politeness)

    def resync(self, records: Iterable[HostQueue], now: float, *, serves: Callable[[str], bool]) -> None:
        """Correct the queued estimates from the frontier's counts: rows can reappear behind
        the table's back (expired leases, a host given back after a member left), and a host
        whose count says zero would never be looked at again."""
        for record in records:
            if not serves(record.host):
                continue
            state = self._state(record.host, now, record.politeness)
            missing = record.queued - state.queued
            if missing > 0 and not state.refilling:
                state.queued += missing
                if state.place is Place.IDLE or state.place is Place.BLOCKED:
                    self.settle(state, now)

    def deferred(self, per_host: Mapping[str, int]) -> None:
        """Load shedding parked these URLs in the frontier."""
        for host, count in per_host.items():
            state = self._hosts.get(host)
            if state is not None:
                state.queued = max(0, state.queued - count)

    # ----------------------------------------------------------------- scheduling
    def next_host(self, now: float) -> HostState | None:
        """Take the next host that may send now (BUSY); the caller must ``settle`` it afterwards."""
        return self._rotation.next_host(now)

    def next_wakeup(self) -> float | None:
        return self._rotation.next_wakeup()

    def settle(self, state: HostState, now: float) -> None:
        """Put a host where its current state says it belongs."""
        self._rotation.settle(state, now)

    def wake(self, states: Iterable[HostState], now: float) -> None:
        """Hosts that waited for a slot (an IP gate) may go again."""
        for state in states:
            if state.place is Place.BLOCKED:
                self._rotation.settle(state, now)

    # ----------------------------------------------------------------- dispatch steps
    def next_step(self, state: HostState, now: float) -> tuple[Step, Lease | None]:
        """What to do with a BUSY host: wait for a refill, fetch the robots.txt of its next
        lease's authority (the lease stays buffered), fetch a lease, or finish one unfetched
        (robots.txt forbids it, or could not be had). The caller then settles the host."""
        if not state.buffer:
            return Step.REFILL, None
        if state.dropped:
            return Step.DROPPED, state.buffer.pop(0)
        lease = state.buffer[0]
        robots = self.robots_of(state, scheme_of(lease.url), now)
        if self._robots.start_if_due(state, robots, now):
            return Step.ROBOTS, lease
        state.buffer.pop(0)
        if robots.status is RobotsStatus.UNAVAILABLE:
            return Step.UNAVAILABLE, lease
        if robots.rules is not None and not robots.rules.allowed(lease.url):
            return Step.DISALLOWED, lease
        return Step.FETCH, lease

    def robots_of(self, state: HostState, scheme: str, now: float) -> AuthorityRobots:
        """The robots.txt record of one of the host's authorities (node.host_robots)."""
        robots, restored = self._robots.lookup(state, scheme, now)
        if restored:
            self._set_crawl_delay(state)
        return robots

    def start_request(self, state: HostState, now: float) -> int:
        """Take the host's limiter slot for one request; returns its ticket."""
        ticket = state.limiter.acquire()
        if state.crawl_delay:
            state.next_eligible = now + state.crawl_delay
        return ticket

    def bind_ip_gate(self, state: HostState, gate: IpGate[HostState] | None) -> None:
        state.ip_gate = gate

    def robots_not_sent(self, state: HostState, scheme: str, ticket: int, now: float) -> None:
        """A robots.txt request that never went out (cancelled, IP gate full): ask again."""
        self._robots.not_sent(state, scheme, now)
        state.limiter.release(ticket, Outcome.NEUTRAL)
        self.settle_after_release(state, now)

    def cancel_request(self, state: HostState, ticket: int, now: float) -> None:
        state.limiter.release(ticket, Outcome.NEUTRAL)
        self.settle_after_release(state, now)

    def settle_after_release(self, state: HostState, now: float) -> None:
        if state.place is Place.BLOCKED or state.place is Place.IDLE:
            self.settle(state, now)

    # ----------------------------------------------------------------- leases
    def wants_refill(self, state: HostState) -> bool:
        return state.queued > 0 and len(state.buffer) < LEASE_AHEAD * state.limiter.limit and not state.turn_over

    def request_refill(self, state: HostState) -> bool:
        """True when a lease request for the host should go to the frontier now."""
        if state.refilling:
            return False
        if state.queued > 0:
            state.refilling = True
            return True
        return False

    @staticmethod
    def lease_size(state: HostState) -> int:
        if state.crawl_delay > 0:
            return 1 if not state.buffer else 0
        # Enough for the next rounds of the host's window, so its requests never wait for a
        # frontier round trip (which may queue behind a store commit); never more than a few
        # windows: a leased URL sitting in memory is a URL another node cannot take over.
        return max(1, 2 * LEASE_AHEAD * state.limiter.limit - len(state.buffer))

    def refilled(self, state: HostState, leases: list[Lease], next_ready: float | None, now: float) -> None:
        """A lease request came back."""
        state.refilling = False
        state.queued = max(0, state.queued - len(leases))
        state.buffer.extend(leases)
        if not leases:
            if next_ready is not None:
                self._rotation.delay(state, next_ready, now)  # its rows wait for a retry time
            elif not state.buffer:
                state.queued = 0  # nothing left
        if state.place is Place.BLOCKED or state.place is Place.IDLE:
            self.settle(state, now)

    def release_host(self, state: HostState, now: float) -> list[int]:
        """This node no longer serves the host: its buffered leases go back (unattempted) and
        the cluster's sweep hands its queue to the owner. Returns the lease ids."""
        returned = [lease.id for lease in state.buffer]
        state.buffer.clear()
        state.queued = 0
        if state.place is not Place.BUSY:
            self.settle(state, now)
        return returned

    def release_unserved(self, serves: Callable[[str], bool], now: float) -> list[int]:
        """After a membership change: release every host with work this node no longer serves."""
        returned: list[int] = []
        for state in list(self._hosts.values()):
            if state.has_work() and not serves(state.host):
                returned.extend(self.release_host(state, now))
        return returned

    def take_back_buffers(self) -> list[int]:
        """Empty every host's lease buffer (the API is paused, or the node stops); the ids go
        back to the frontier unattempted and stay counted as queued."""
        returned: list[int] = []
        for state in self._hosts.values():
            if state.buffer:
                returned.extend(lease.id for lease in state.buffer)
                state.queued += len(state.buffer)
                state.buffer.clear()
        return returned

    # ----------------------------------------------------------------- outcomes
    def finish_page(self, state: HostState, ticket: int, verdict: Verdict, now: float, url: str | None = None) -> None:
        """Apply a page's verdict: the limiter learns, the politeness times move, the counters
        count. The caller releases the global slots (admission) itself. ``url``: the page's
        (a refusal is counted against it)."""
        decreases = state.limiter.decreases
        state.limiter.release(ticket, verdict.limiter)
        state.observe_health(verdict, now, halved=state.limiter.decreases != decreases)
        if state.learn(verdict, url):
            self.unsaved.mark(state)
        if verdict.reached_host and verdict.next_eligible > state.next_eligible:
            self._rotation.delay(state, verdict.next_eligible, now)
        self._space_from_end(state, now)
        self.settle_after_release(state, now)

    def finish_robots(self, state: HostState, scheme: str, ticket: int, answer: RobotsAnswer, now: float) -> None:
        state.limiter.release(ticket, answer.limiter)
        self._robots.answered(state, scheme, answer, now)
        if answer.ready:
            self._set_crawl_delay(state)
        self._rotation.delay(state, answer.next_eligible, now)
        self._space_from_end(state, now)
        self.settle_after_release(state, now)

    def _space_from_end(self, state: HostState, now: float) -> None:
        """A Crawl-delay counts from the end of the last request, as Heritrix's does: a slow
        answer or a reused connection cannot bring two requests closer than the delay."""
        if state.crawl_delay > 0:
            self._rotation.delay(state, now + state.crawl_delay, now)

    def _set_crawl_delay(self, state: HostState) -> None:
        """After an authority's rules became known: the host's Crawl-delay follows them."""
        delay = max(HostRobots.crawl_delay(state), self._min_delay_s)
        if delay != state.crawl_delay:
            state.crawl_delay = delay
            self.unsaved.mark(state)

    # ----------------------------------------------------------------- between members
    def politeness_to_send(self, host: str, now: float) -> HostPoliteness | None:
        """What another member that crawls ``host`` next (a successor's takeover, the owner
        after a handback) must honour: when its next request may go, and the Crawl-delay.
        With a request still in flight here, its end is not known: from now, at the least.
        None: nothing to honour."""
        state = self._hosts.get(host)
        if state is None or not (state.crawl_delay > 0 or state.paused_until > now):
            return None
        spaced = now + state.crawl_delay if state.limiter.in_flight else 0.0
        return HostPoliteness(host, max(state.next_eligible, state.paused_until, spaced), state.crawl_delay)

    def regained(self, since: float, now: float) -> None:
        """This member's quorum came back at ``since`` (cluster.fencing rule 3): the members it
        heard from had heard it, and started no request to its hosts after; each host with a
        Crawl-delay waits it out from then."""
        for state in self._hosts.values():
            if state.crawl_delay > 0:
                self._rotation.delay(state, since + state.crawl_delay, now)

    def honour(self, records: Iterable[HostPoliteness], now: float) -> None:
        """Another member's politeness for hosts this node crawls (a handback; a member that
        still crawled a host here while the two disagreed on its owner): its later
        next-eligible time and longer Crawl-delay hold here too."""
        for record in records:
            state = self._hosts.get(record.host)
            if state is None:
                self._state(record.host, now, record)  # in memory, with it, until it is collected
                continue
            state.crawl_delay = max(state.crawl_delay, record.crawl_delay)
            self._rotation.delay(state, record.next_eligible, now)

    # ----------------------------------------------------------------- memory
    def collect(self, now: float) -> int:
        """Idle hosts leave memory (node.host_memory); returns how many left."""
        return self._memory.collect(now)

    def end_turns(self, now: float, limit: int) -> tuple[list[str], list[int]]:
        """Hosts with work whose turn is over leave memory, for the frontier to park
        (node.host_memory); returns them and the ids of their buffered leases."""
        return self._memory.end_turns(now, limit)

    def keep_turns(self, now: float) -> None:
        """Nobody waits on disk any more: hosts whose turn was ending send again."""
        self.wake(self._memory.keep_turns(), now)

    @property
    def collected(self) -> int:
        return self._memory.collected
