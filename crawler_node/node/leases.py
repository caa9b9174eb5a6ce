"""The lease keeper: per-host lease buffers refilled in batched frontier calls, and leases
given back without an attempt.

The dispatcher never waits on the disk: it takes leases from the hosts' buffers, and asks
this keeper to top them up; one round trip to the frontier leases for up to ``REFILL_HOSTS``
hosts. While the pipeline is under pressure (or the API paused) nothing more is leased: the
URLs stay in the frontier, where they cost no memory and another node could take them over.
Leases that were never attempted (a host handed away, the API paused, a request cancelled
at stop) go back with the attempt not counted; leases robots.txt forbids, or whose robots.txt
could not be had, go to the store as unfetched pages (a crawl.log line each, then finished).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.stats import counter, stat
from crawler_node.frontier import FrontierBatch, FrontierService
from crawler_node.node.admission import API_QUOTA, PAUSED, FetchAdmission
from crawler_node.node.hosts import HostState, HostTable
from crawler_node.node.stage_items import URLS_TURNED_AWAY, PageResult
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.leases")

REFILL_HOSTS = 256  # hosts per batched lease round trip


class PageSink(Protocol):
    async def put(self, page: PageResult) -> None: ...


@dataclass(frozen=True, slots=True)
class LeaseSnapshot:
    """The lease keeper's part of the status's ``counters``: leases ended without a request."""

    robots_disallowed: int = field(metadata=counter("crawler_robots_disallowed",
                                                    "URLs skipped because robots.txt disallows them"))
    # URLs ended: their robots.txt was given up
    robots_unavailable: int = field(metadata=counter("crawler_robots_unavailable",
                                                     "URLs ended unfetched because their robots.txt could not be had"))
    # URLs ended unfetched: an operator dropped their host
    host_dropped: int = field(metadata=stat(URLS_TURNED_AWAY, at={"reason": FetchOutcome.HOST_DROPPED}))
    refill_wanted: int = field(metadata=stat(json=False))
    returned_pending: int = field(metadata=stat(json=False))
    unfetched_pending: int = field(metadata=stat(json=False))
    lease_held: Mapping[str, int] = field(metadata=stat(json=False))


class LeaseKeeper:
    def __init__(self, *, frontier: FrontierService, hosts: HostTable, admission: FetchAdmission,
                 pressure: Wakeup, on_returned: Callable[[], None], clock: Callable[[], float],
                 store: PageSink) -> None:
        """``pressure`` is notified when admission's answer may have changed;
        ``on_returned`` runs after leases went back (the cluster's sweep may move them);
        ``store`` takes the leases that end unfetched."""
        self._frontier = frontier
        self._store = store
        self._hosts = hosts
        self._admission = admission
        self._pressure = pressure
        self._on_returned = on_returned
        self._clock = clock
        self._wanted: dict[str, HostState] = {}
        self._returned: list[int] = []  # never attempted: back to the queue, attempt not counted
        # robots.txt forbids them, or could not be had: finished without a fetch, through the
        # store (one crawl.log line each); bounded by the leases handed out
        self._unfetched: list[PageResult] = []
        self._wake = Wakeup()
        self._stopping = False
        # leases that ended without a request, by outcome (robots.txt's, a dropped host's)
        self.unfetched_outcomes: Counter[FetchOutcome] = Counter()
        self.held: Counter[str] = Counter()  # lease rounds held back, by reason (admission's)

    # ----------------------------------------------------------------- asked by the dispatcher
    def want_refill(self, state: HostState) -> None:
        if self._hosts.request_refill(state):
            self._wanted[state.host] = state
            self._wake.notify()

    def give_back(self, lease_ids: list[int]) -> None:
        if lease_ids:
            self._returned.extend(lease_ids)
            self._wake.notify()

    def unfetched(self, page: PageResult) -> None:
        """A lease that ends without a request: to the store with the next round (a list
        bounded by the leases handed out, never a waiting task)."""
        self.unfetched_outcomes[page.verdict.signal.outcome] += 1
        self._unfetched.append(page)
        self._wake.notify()

    def api_paused(self) -> None:
        """The API's quota is spent, or an operator paused the crawl: hand the buffered leases
        back, so a long pause neither holds URLs in memory nor lets their leases expire (an
        expired lease counts an attempt)."""
        self.give_back(self._hosts.take_back_buffers())

    def idle(self) -> bool:
        return not self._returned and not self._unfetched

    def snapshot(self) -> LeaseSnapshot:
        outcomes = self.unfetched_outcomes
        return LeaseSnapshot(robots_disallowed=outcomes[FetchOutcome.ROBOTS_DISALLOWED],
                             robots_unavailable=outcomes[FetchOutcome.ROBOTS_UNAVAILABLE],
                             host_dropped=outcomes[FetchOutcome.HOST_DROPPED], refill_wanted=len(self._wanted),
                             returned_pending=len(self._returned), unfetched_pending=len(self._unfetched),
                             lease_held=dict(self.held))

    # ----------------------------------------------------------------- lifecycle
    def start(self, supervisor: Supervisor) -> None:
        supervisor.stage("lease-refill", self._refill_loop())

    def stop(self) -> None:
        self._stopping = True
        self._wake.notify()

    async def flush(self) -> None:
        """At stop, after the last fetch: every lease still in memory goes back."""
        self._returned.extend(self._hosts.take_back_buffers())
        await self._give_back_now()

    # ----------------------------------------------------------------- the loop
    async def _refill_loop(self) -> None:
        while not self._stopping:
            if not (self._wanted or self._returned or self._unfetched):
                await self._wake.wait()
                continue
            await self._give_back_now()
            await self._hold_while_under_pressure()
            await self._lease_round()

    async def _give_back_now(self) -> None:
        if self._unfetched:
            unfetched, self._unfetched = self._unfetched, []
            for page in unfetched:
                await self._store.put(page)
        if self._returned:
            returned, self._returned = self._returned, []
            await self._frontier.apply(FrontierBatch(returned=returned))
            self._on_returned()

    async def _hold_while_under_pressure(self) -> None:
        admission = self._admission
        reason = admission.hold_leasing(self._clock())
        if reason is None:
            return
        self.held[reason] += 1
        if reason == API_QUOTA or reason == PAUSED:
            # A lease round that was under way when the pause began has filled buffers since.
            self.give_back(self._hosts.take_back_buffers())
            await self._give_back_now()
        while not self._stopping and admission.hold_leasing(self._clock()) is not None:
            resume_at = admission.resume_at()
            await self._pressure.wait(None if resume_at is None else max(0.001, resume_at - self._clock()))

    async def _lease_round(self) -> None:
        wanted = list(self._wanted.values())[:REFILL_HOSTS]
        if not wanted or self._stopping:
            return
        for state in wanted:
            del self._wanted[state.host]
        hosts = self._hosts
        requests = [(state.host, hosts.lease_size(state)) for state in wanted]
        results = await self._frontier.lease_many(requests)
        if self._stopping:
            # Stopped while the round was under way (a leaving node hands its queue on meanwhile):
            # nothing will fetch these, and in a buffer they would stay leased past the handoff.
            self._returned.extend(lease.id for leases, _ in results for lease in leases)
            return
        now = self._clock()
        for state, (leases, next_ready) in zip(wanted, results, strict=True):
            hosts.refilled(state, leases, next_ready, now)
