"""The node's recurring jobs around the frontier and the host table. Each runs under the
supervisor as a recurring job: a round that fails is logged and the job runs again.

- lease expiry: a lease older than its timeout goes back to its queue (rule 2);
- host resync: the host table's queued estimates are corrected from the frontier's counts;
- unparking: as hosts run out of work, the frontier makes parked ones active (it keeps at most
  --active-hosts in memory), and the host table takes them in; and while hosts wait on disk,
  those active for --host-turn-s end their turn and are parked in their place;
- politeness: per-host pauses and Crawl-delays are saved in the frontier, batched, so a
  restart keeps them;
- host collection: hosts idle for a while leave memory;
- load shedding (rule 7): the lowest-priority URLs are deferred while the queue stays over its
  high-water mark, and restored once it has drained (the policy is core.shed_policy.ShedPolicy);
- recrawl: URLs due again go back to their queues, in bounded batches and only while the
  queue is below the shedding low-water mark, at a priority below discovery's (--recrawl-*).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from crawler_node.core.shed_policy import ShedPolicy, ShedPolicySnapshot
from crawler_node.core.stats import counter
from crawler_node.frontier import FrontierService
from crawler_node.node.hosts import HostTable
from crawler_node.node.stage_items import SEED_PRIORITY
from crawler_node.runtime.frontier_guard import Watermark
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup

log = logging.getLogger("crawler_node.upkeep")

RESYNC_EVERY_S = 5.0
COLLECT_EVERY_S = 1.0
RELEASE_EVERY_S = 30.0  # heap pages freed by the collector go back to the kernel this often at most
RECRAWL_EVERY_S = 1.0
WATERMARK_EVERY_S = 2.0
RECRAWL_BATCH = 2000  # URLs due again moved back to their queues per round, at most
UNPARK_EVERY_S = 0.5  # the frontier is asked for parked hosts this often, and when a host went idle
UNPARK_BATCH = 1000  # parked hosts made active per round, at most (each costs two index counts)
TURNS_EVERY_S = 5.0  # hosts whose turn is over are looked for this often, while others wait


@dataclass(slots=True)
class UpkeepCounts:
    leases_expired: int = 0
    recrawl_queued: int = 0  # URLs due again, queued again
    hosts_unparked: int = 0  # parked hosts given their turn (--active-hosts)
    turns_ended: int = 0  # active hosts parked for others (--host-turn-s)


@dataclass(frozen=True, slots=True)
class UpkeepCounters:
    """The upkeep's part of the status's ``counters``."""

    recrawl_queued: int = field(metadata=counter("crawler_recrawl_queued", "URLs queued again for their recrawl"))
    hosts_unparked: int = field(metadata=counter("crawler_hosts_unparked", "Parked hosts given their turn"))
    turns_ended: int


@dataclass(frozen=True, slots=True)
class UpkeepSnapshot:
    counters: UpkeepCounters
    leases_expired: int
    shedding: ShedPolicySnapshot


class Upkeep:
    def __init__(self, *, frontier: FrontierService, hosts: HostTable, shed_policy: ShedPolicy,
                 serves: Callable[[str], bool], lease_timeout_s: float, clock: Callable[[], float],
                 release_memory: Callable[[], object] = lambda: None, recrawl: bool = False,
                 recrawl_priority: int = -1000, watermark: Watermark | None = None,
                 successor_of: Callable[[str], str | None] = lambda host: None,
                 outboxed: Callable[[Mapping[str, int]], None] = lambda counts: None,
                 turn_s: float = 0.0) -> None:
        """``successor_of(host)``: the member a host crawled here would go to, which is sent
        its politeness as it changes (``outboxed`` is told of those rows);
        ``release_memory``: hands memory freed by the host collector back to the system;
        ``recrawl``: URLs due again (frontier due_at) are queued again, at ``recrawl_priority``;
        ``watermark``: kept up to date, so a frontier that loses committed rows is refused at
        the next start (runtime.frontier_guard); ``turn_s``: while hosts wait on disk, a host
        with work ends its turn after this long (0: never; node.host_memory)."""
        self._frontier = frontier
        self._hosts = hosts
        self._shed = shed_policy
        self._serves = serves
        self._successor_of = successor_of
        self._outboxed = outboxed
        self._lease_timeout_s = lease_timeout_s
        self._clock = clock
        self._resync_wanted = Wakeup()
        self._shed_active_in_frontier = False
        self._release_memory = release_memory
        self._recrawl = recrawl
        self._recrawl_priority = recrawl_priority
        self._watermark = watermark
        self._turn_s = turn_s
        self._ending = False  # end_turns may have left hosts with their turn over
        self._collected_since_release = 0
        self._released_at = time.monotonic()
        self.counters = UpkeepCounts()

    def request_resync(self) -> None:
        self._resync_wanted.notify()

    def start(self, supervisor: Supervisor) -> None:
        supervisor.recurring("lease-expiry", self._expire_leases, every_s=max(1.0, self._lease_timeout_s / 4))
        supervisor.recurring("host-resync", self._resync)
        supervisor.recurring("host-politeness", self._save_politeness)
        supervisor.recurring("host-unpark", self._unpark)
        if self._turn_s:
            # Often enough that a turn is not much longer than it should be.
            supervisor.recurring("host-turns", self._end_turns, every_s=min(TURNS_EVERY_S, max(0.05, self._turn_s / 4)))
        supervisor.recurring("host-collector", self._collect, every_s=COLLECT_EVERY_S)
        interval = min(1.0, max(0.05, self._shed.after_s / 4))
        supervisor.recurring("load-shedding", self._shed_round, every_s=interval)
        if self._recrawl:
            supervisor.recurring("recrawl", self._requeue_due, every_s=RECRAWL_EVERY_S)
        if self._watermark is not None:
            supervisor.recurring("frontier-watermark", self._update_watermark, every_s=WATERMARK_EVERY_S)

    async def flush(self) -> None:
        """At stop: what changed of the hosts' politeness is saved, and the watermark brought
        up to what the frontier holds."""
        if self._hosts.unsaved:
            await self._frontier.save_hosts(self._hosts.unsaved.take())
        if self._watermark is not None:
            await asyncio.to_thread(self._watermark.update)
            self._watermark.close()

    def snapshot(self) -> UpkeepSnapshot:
        counters = self.counters
        return UpkeepSnapshot(
            counters=UpkeepCounters(recrawl_queued=counters.recrawl_queued, hosts_unparked=counters.hosts_unparked,
                                    turns_ended=counters.turns_ended),
            leases_expired=counters.leases_expired, shedding=self._shed.snapshot())

    # ----------------------------------------------------------------- rounds
    async def _expire_leases(self) -> None:
        expired = await self._frontier.expire_leases()
        if expired:
            log.warning("%d leases expired and went back to their queues", expired)
            self.counters.leases_expired += expired
            self._resync_wanted.notify()

    async def _resync(self) -> None:
        # Rows can reappear behind the host table's back (a host given back to this node
        # after a member left, expired leases), and a host whose count says zero would never
        # be looked at again.
        await self._resync_wanted.wait(RESYNC_EVERY_S)
        records = await self._frontier.hosts_with_work()
        self._hosts.resync(records, self._clock(), serves=self._serves)

    async def _unpark(self) -> None:
        # A host that ran out of work here leaves the frontier's records at the commit of its
        # last page, a moment later: the wait's timeout catches that room too.
        totals = self._frontier.last_totals  # read within the second: no hop to the frontier's thread
        if totals is not None and not totals.get("parked_queued"):
            # Nobody waits on disk: no waiting on hosts going idle either, which they do page
            # after page in a crawl of small hosts (each wake a future and a timer).
            await asyncio.sleep(UNPARK_EVERY_S)
            return
        await self._hosts.went_idle.wait(UNPARK_EVERY_S)
        while records := await self._frontier.unpark(UNPARK_BATCH):
            self._hosts.load([record for record in records if self._serves(record.host)], self._clock())
            self.counters.hosts_unparked += len(records)
            if len(records) < UNPARK_BATCH:
                break

    async def _end_turns(self) -> None:
        # Only while hosts wait on disk: otherwise there is no one to give a place to.
        totals = self._frontier.last_totals
        if not totals or not totals.get("parked_queued"):
            if self._ending:
                self._hosts.keep_turns(self._clock())
                self._ending = False
            return
        self._ending = True
        # No more places than hosts wait (each has a queued URL at least): a turn ended for
        # nobody only sends a host to the back of the line.
        hosts, returned = self._hosts.end_turns(self._clock(), min(UNPARK_BATCH, int(totals["parked_queued"])))
        if not hosts:
            return
        parked = await self._frontier.park(hosts, returned)
        if len(parked) < len(hosts):
            self._resync_wanted.notify()  # a page of theirs was on its way: they stay active there
        self.counters.turns_ended += len(parked)
        self._hosts.went_idle.notify()  # their places go to parked hosts

    async def _save_politeness(self) -> None:
        # At once, not after a linger: a pause must be on disk before a crash can forget it.
        # Changes that come while one save is under way go together in the next.
        hosts = self._hosts
        if not hosts.unsaved:
            await hosts.unsaved.wanted.wait(1.0)
            return
        dirty, now = hosts.unsaved.take(), self._clock()
        # ... and sent to the host's successor: a Crawl-delay just learnt from robots.txt, or a
        # pause, holds there from now, not only from the host's next fetched page.
        owed = [(successor, politeness) for record in dirty
                if (successor := self._successor_of(record.host)) is not None
                and (politeness := hosts.politeness_to_send(record.host, now)) is not None]
        await self._frontier.save_hosts(dirty, owed)
        if owed:
            self._outboxed(Counter(successor for successor, _ in owed))

    async def _collect(self) -> None:
        dropped = self._hosts.collect(self._clock())
        if dropped:
            log.debug("%d idle hosts left memory", dropped)
        self._collected_since_release += dropped
        if self._collected_since_release and time.monotonic() - self._released_at >= RELEASE_EVERY_S:
            self._release_memory()
            self._collected_since_release = 0
            self._released_at = time.monotonic()

    async def _shed_round(self) -> None:
        policy = self._shed
        totals = await self._frontier.totals()
        action = policy.observe(queued=int(totals["queued"]), deferred=int(totals["deferred"]), now=time.monotonic())
        if action.defer:
            # Seeds and submitted URLs (SEED_PRIORITY) are never deferred.
            per_host = await self._frontier.defer_lowest(action.defer, below_priority=SEED_PRIORITY)
            # one warning when it starts; the steps that follow (core.shed_policy.DEFER_STEP_MAX) at debug
            log.log(logging.DEBUG if self._shed_active_in_frontier else logging.WARNING,
                    "load shedding: queue over %d for %.0f s; deferred %d lowest-priority URLs"
                    " (on to %d queued, in steps)", policy.high_water, policy.after_s, sum(per_host.values()),
                    policy.midpoint)
            self._shed_active_in_frontier = True
            self._hosts.deferred(per_host)
        if not action.active and self._shed_active_in_frontier:
            await self._frontier.stop_shedding()
            self._shed_active_in_frontier = False
        if action.restore:
            per_host = await self._frontier.restore_deferred(action.restore)
            now = self._clock()
            for host, count in per_host.items():
                self._hosts.add_work(host, count, now)
            log.info("load shedding: restored %d deferred URLs", sum(per_host.values()))

    async def _update_watermark(self) -> None:
        await asyncio.to_thread(self._watermark.update)  # type: ignore[union-attr]  # started only with one

    async def _requeue_due(self) -> None:
        # Recrawl is load like any other: it waits while the queue is deep (the shedding
        # low-water mark), so a node behind on discovery is not buried under old pages.
        policy = self._shed
        if policy.high_water:
            totals = await self._frontier.totals()
            if int(totals["queued"]) >= policy.low_water:
                return
        per_host = await self._frontier.requeue_due(time.time(), RECRAWL_BATCH, self._recrawl_priority)
        if not per_host:
            return
        now = self._clock()
        gone = 0
        for host, count in per_host.items():
            if self._hosts.get(host) is not None:
                self._hosts.add_work(host, count, now)
            else:
                gone += 1
        if gone:
            # A host that left memory comes back through the resync, which brings its stored
            # politeness (a pause, its Crawl-delay) along with its counts.
            self._resync_wanted.notify()
        self.counters.recrawl_queued += sum(per_host.values())
        log.debug("recrawl: %d URLs due again went back to their queues", sum(per_host.values()))
