"""Which hosts leave the host table's memory, and when: idle ones (the collector), and active
ones whose turn is over while others wait on disk (the frontier parks hosts past
--active-hosts: frontier.host_records).

The host table (node.hosts) owns this and calls it; it shares the table's dict of states and
the rotation's list of idle hosts, and removes states only through ``_drop``. A state leaves
only when nothing of it must stay in memory: nothing in flight or on its way, its durable
politeness saved, its Crawl-delay spacing over. What it leaves on disk (its pauses, backoff
level and Crawl-delay in the frontier's hosts table, its robots.txt answer in a bounded cache)
comes back with it.
"""

from __future__ import annotations

from collections import deque

from crawler_node.core.backoff import HostBackoffPolicy
from crawler_node.node.host_state import HostState, Place


class HostMemory:
    def __init__(self, *, states: dict[str, HostState], idle: deque[tuple[float, HostState]],
                 backoff_policy: HostBackoffPolicy, idle_s: float, memory_target: int, turn_s: float) -> None:
        """``states``: the table's states by host; ``idle``: (idle since, state) as hosts ran
        out of work, oldest first (node.rotation); ``turn_s``: how long a host with work keeps
        its place while others wait (0: until its queue is done)."""
        if idle_s < 0 or memory_target < 0 or turn_s < 0:
            raise ValueError(f"need idle_s, memory_target and turn_s >= 0, got {idle_s}, {memory_target}, {turn_s}")
        self._states = states
        self._idle = idle
        self._backoff_policy = backoff_policy
        self._idle_s = idle_s
        self._memory_target = memory_target
        self._turn_s = turn_s
        self.collected = 0
        self.turns_ended = 0

    def collect(self, now: float) -> int:
        """Drop hosts that hold nothing memory must keep, idle for ``idle_s`` (Scrapy's idle
        slot collector), or, while more than ``memory_target`` hosts are in memory, the ones
        idle longest whatever their age; returns how many left."""
        cutoff = now - self._idle_s
        idle = self._idle
        dropped = 0
        recheck: list[tuple[float, HostState]] = []
        for _ in range(len(idle)):
            if idle[0][0] > cutoff and len(self._states) <= self._memory_target:
                break
            since, state = idle.popleft()
            if state.place is not Place.IDLE or state.idle_since != since or self._states.get(state.host) is not state:
                continue  # it had work again since (a later entry stands for it), or is gone
            if not self._collectable(state, now):
                recheck.append((now, state))
                continue
            self._drop(state)
            dropped += 1
        for entry in recheck:
            entry[1].idle_since = entry[0]
            idle.append(entry)
        self.collected += dropped
        return dropped

    def end_turns(self, now: float, limit: int) -> tuple[list[str], list[int]]:
        """Up to ``limit`` hosts with work whose turn is over (active for ``turn_s``) leave
        memory, for the frontier to park: Heritrix's rotation of its active queues, so that
        hosts with long queues do not keep every place while others wait. A host whose turn is
        over sends nothing more (``turn_over``); it leaves at a later round if it is in the
        middle of something now (a request, a lease or robots.txt request on its way, a pause
        or backoff not yet saved, a Crawl-delay still running). Returns the hosts that left and
        the ids of the leases they had buffered (unattempted, for the frontier to take back)."""
        if not self._turn_s or limit <= 0:
            return [], []
        over = now - self._turn_s
        ending = [state for state in self._states.values()
                  if state.has_work() and state.active_since <= over and state.place is not Place.BUSY]
        ending.sort(key=lambda state: state.active_since)
        hosts: list[str] = []
        returned: list[int] = []
        for state in ending[:limit]:
            state.turn_over = True
            if not self._quiet(state, now):
                continue
            returned += [lease.id for lease in state.buffer]
            state.buffer.clear()
            state.queued = 0
            self._drop(state)
            hosts.append(state.host)
        self.turns_ended += len(hosts)
        return hosts, returned

    def keep_turns(self) -> list[HostState]:
        """Hosts whose turn was ending keep their place after all; returns them."""
        kept = [state for state in self._states.values() if state.turn_over]
        for state in kept:
            state.turn_over = False
        return kept

    def _collectable(self, state: HostState, now: float) -> bool:
        return (not state.has_work() and self._quiet(state, now) and now >= state.paused_until
                and self._backoff_policy.forgiven(state.backoff, now))

    def _quiet(self, state: HostState, now: float) -> bool:
        """Nothing of the host is on its way, unsaved or still spacing its requests."""
        return (not state.refilling and state.limiter.in_flight == 0 and not state.dirty
                and not state.robots_fetching and now >= state.next_eligible)

    def _drop(self, state: HostState) -> None:
        del self._states[state.host]
        state.place = Place.IDLE  # its entries in the rotation are stale from now on
        if state.ip_gate is not None:
            state.ip_gate.unbind(state)
