"""The node: its components, wired in pipeline order.

    intake ─► frontier ─(lease keeper)─► dispatcher ─► fetch stage ─► parse stage ─► store stage
                 ▲                                                                        │
                 └──────────── outcomes and new links, one transaction per batch ─────────┘
                 (links owned elsewhere ─► cluster outboxes ─► their owners)

Every arrow is bounded. A full store queue blocks parsers, a full parse queue blocks fetch
tasks, blocked fetch tasks hold their global slots, and with no free slot nothing is leased
(rule 1). Each stage answers for itself whether it is too full (``needs_backout``); admission
asks them all and waits on their notifications.

The host table is the only writer of per-host state, the frontier service the only holder of
the frontier and its thread, the supervisor the owner of every task. ``Node`` builds the
components with their dependencies, opens their resources (frontier, fetcher, parse and store
workers, cluster) and starts their loops in pipeline order; ``stop`` stops leasing, lets the
pipeline drain front to back, and closes the resources in reverse.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from crawler_node.cluster.cluster import Cluster
from crawler_node.cluster.fencing import FencedFetcher
from crawler_node.cluster.readiness import StartupHold
from crawler_node.config import NodeConfig
from crawler_node.core.adaptive_recrawl import Recrawler
from crawler_node.core.crawl_totals import CrawlTotals
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.robots import RobotsCache
from crawler_node.core.shed_policy import ShedPolicy
from crawler_node.datadir_layout import FRONTIER_FILENAME
from crawler_node.fetch.dns import Resolver
from crawler_node.fetch.fetcher import Fetcher
from crawler_node.frontier import AddResult, FrontierService
from crawler_node.node.budget import HeldBytes
from crawler_node.node.builders import build_admission, build_ip_gates, build_refusal_rules, build_rules
from crawler_node.node.dispatch import Dispatcher
from crawler_node.node.fetch_stage import FetchStage
from crawler_node.node.hosts import HostTable
from crawler_node.node.intake import Intake, Prepared
from crawler_node.node.leases import LeaseKeeper
from crawler_node.node.node_snapshot import (
    TOP_HOSTS,
    Admission,
    ClusterCountersSection,
    ClusterSection,
    Counters,
    NodeSnapshot,
    Queues,
    Rates,
    SheddingStatus,
    is_idle,
)
from crawler_node.node.operator import OperatorControl
from crawler_node.node.parse_stage import ParseStage
from crawler_node.node.queues import FrontierQueueSnapshot
from crawler_node.node.refusal_check import RefusalCheck
from crawler_node.node.seed_check import unfetchable_seed_hosts
from crawler_node.node.stage_items import SEED_PRIORITY
from crawler_node.node.store_stage import StoreStage
from crawler_node.node.upkeep import Upkeep
from crawler_node.runtime.datadir import DiskFull
from crawler_node.runtime.frontier_guard import Watermark
from crawler_node.runtime.malloctune import release_free_heap
from crawler_node.runtime.supervisor import Supervisor, cut_short
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.store.crawl_totals import count_crawl_logs
from crawler_node.store.worker import StoreWorker
from crawler_node.store.writer import CrawlInfo
from crawler_node.version import __version__

log = logging.getLogger("crawler_node.node")

HANDOFF_RECHECK_S = 0.1
# A stop waits this long at most for the outboxes to reach the live peers (Outboxes.flush):
# batches of 256 rows take milliseconds; a peer that stops at the same moment answers until its
# own stop closes its frontier, and one that does not answer is found down or waited out.
OUTBOX_FLUSH_S = 5.0


class Node:
    def __init__(self, config: NodeConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self.data_dir = config.data_dir
        self.started_at = time.monotonic()
        self.fatal_error: BaseException | None = None
        self._stop_requested = asyncio.Event()
        self._disk_full = asyncio.Event()  # a write found no room: nothing more can be stored
        self._stopping = False
        work, pressure = Wakeup(), Wakeup()  # a host may be ready; a stage may have drained
        self._pressure = pressure
        self.supervisor = Supervisor(on_fatal=self._fatal)
        self.totals = CrawlTotals()  # every crawl.log line's counts, ever: rebuilt at start
        self._build_frontier_and_hosts(work)
        self._build_pipeline(work, pressure)

    def _build_frontier_and_hosts(self, work: Wakeup) -> None:
        config, clock = self.config, self._clock
        frontier, polite = config.frontier, config.politeness
        self.frontier = FrontierService(path=self.data_dir / FRONTIER_FILENAME,
                                        lease_timeout_s=frontier.lease_timeout_s, clock=clock,
                                        max_pages_per_host=frontier.max_pages_per_host,
                                        resident_hosts=frontier.active_hosts, urgent_priority=SEED_PRIORITY)
        self.rules = build_rules(config)
        self.hosts = HostTable(
            config=polite,
            new_limiter=lambda: AimdLimiter(start=polite.host_limit_start, floor=polite.host_limit_floor,
                                            ceiling=polite.host_limit_ceiling),
            backoff_policy=self.rules.host_backoff, work=work, started_at=clock(),
            robots_cache=RobotsCache(agent=polite.robots_agent, max_bytes=polite.robots_cache_bytes,
                                     ttl_s=polite.robots_ttl_s),
            robots_policy=self.rules.robots)

    def _build_pipeline(self, work: Wakeup, pressure: Wakeup) -> None:
        """The stages in pipeline order, each with its group of the configuration and its
        collaborators (the callbacks among them given here, at construction)."""
        config, clock, hosts, fetch = self.config, self._clock, self.hosts, self.config.fetch
        # Direct fetches resolve through the node's resolver (fetch.dns); through a proxy, the proxy does.
        self.resolver = None if fetch.proxy else Resolver(server=fetch.dns_server, allow_private=fetch.allow_private,
                                                          cache_hosts=fetch.dns_cache_hosts, cache_s=fetch.dns_cache_s,
                                                          timeout_s=fetch.dns_timeout_s)
        ip_gates = build_ip_gates(config, resolver=self.resolver, wake=lambda states: hosts.wake(states, clock()))
        self.cluster = Cluster(config=config.cluster, frontier=self.frontier, supervisor=self.supervisor,
                               on_change=self._membership_changed, on_taken=self._taken, outbox_space=pressure,
                               clock=clock, politeness_of=lambda host: hosts.politeness_to_send(host, clock()),
                               on_regained=hosts.regained,
                               ip_link=ip_gates if ip_gates is not None and ip_gates.shares is not None else None)
        self.held = HeldBytes(limit=config.admission.pipeline_max_bytes, released=pressure)
        info = CrawlInfo(crawl_name=config.store.crawl_name, operator=config.store.operator,
                         user_agent=fetch.user_agent, robots=f"obey (RFC 9309) as {config.politeness.robots_agent}")
        # when each fetched page is due again, from what its visits saw (--recrawl-*)
        self.recrawler = Recrawler(config.recrawl) if config.recrawl.enabled else None
        self.store = StoreStage(
            config=config.store,
            worker=StoreWorker(self.data_dir, node_id=self.node_id, config=config.store, info=info,
                               totals=self.totals),
            frontier=self.frontier, hosts=hosts, router=self.cluster.router, outboxes=self.cluster.outboxes,
            held=self.held, node_id=self.node_id, taken=pressure, clock=clock, recrawl=self.recrawler)
        # After the store: URLs that come in past their host's page cap get their lines there.
        self.intake = Intake(config=config.intake, frontier=self.frontier, hosts=hosts, router=self.cluster.router,
                             outboxes=self.cluster.outboxes, scope=config.scope, clock=clock, crawl_log=self.store)
        self.parse = ParseStage(config=config.parse, hooks=config.hooks, scope=config.scope, store=self.store,
                                ring_generation=lambda: self.cluster.membership.version, taken=pressure)
        self.admission = build_admission(config, ip_gates=ip_gates,
                                         pressure=[self.parse, self.store, self.held, self.cluster.outboxes])
        self.leases = LeaseKeeper(frontier=self.frontier, hosts=hosts, admission=self.admission,
                                  pressure=pressure, on_returned=self._leases_returned, clock=clock,
                                  store=self.store)
        self.operator = OperatorControl(admission=self.admission, leases=self.leases, hosts=hosts,
                                        frontier=self.frontier, pressure=pressure, data_dir=self.data_dir,
                                        clock=clock)
        self.fetcher = Fetcher(config=fetch, resolver=self.resolver)
        # Asked once more just before each request: a member frozen after the dispatch sends nothing on waking.
        self.fetch = FetchStage(config=fetch, fetcher=FencedFetcher(self.fetcher, fencing=self.cluster.fencing),
                                hosts=hosts, admission=self.admission, rules=self.rules, held=self.held,
                                parse=self.parse, store=self.store, scope=config.scope,
                                on_api_paused=self.leases.api_paused,
                                returned=lambda lease_id: self.leases.give_back([lease_id]), clock=clock,
                                refusals=RefusalCheck(rules=build_refusal_rules(config)))
        self.dispatcher = Dispatcher(hosts=hosts, admission=self.admission, leases=self.leases,
                                     fetch=self.fetch, serves=self.cluster.serves,
                                     global_inflight=fetch.global_inflight, work=work, pressure=pressure,
                                     on_fatal=self._fatal, clock=clock, fence=self.cluster.fencing.blocked_until)
        frontier = config.frontier
        self.upkeep = Upkeep(frontier=self.frontier, hosts=hosts,
                             shed_policy=ShedPolicy(high_water=frontier.shed_high_water,
                                                    low_water=frontier.shed_low_water, after_s=frontier.shed_after_s),
                             serves=self.cluster.serves, lease_timeout_s=frontier.lease_timeout_s, clock=clock,
                             release_memory=release_free_heap, recrawl=config.recrawl.enabled,
                             recrawl_priority=frontier.recrawl_priority,
                             watermark=Watermark(self.data_dir, self.data_dir / FRONTIER_FILENAME),
                             successor_of=self.cluster.router.successor_if_served,
                             outboxed=self.cluster.outboxes.note_outboxed,
                             turn_s=config.politeness.host_turn_s if frontier.active_hosts else 0.0)

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self.frontier.open()
        self.operator.restore()
        self.hosts.load(await self.frontier.hosts_with_work(), self._clock())
        await self.fetcher.start()
        await self.parse.start(self.supervisor)
        # Before the store writes a line: the lines there are, counted once (store.crawl_totals).
        await asyncio.to_thread(count_crawl_logs, self.data_dir, self.totals)
        await self.store.start(self.supervisor)
        restarted = (await self.frontier.totals())["hosts"] > 0  # before the seeds: they are not a past
        await self.cluster.start()
        if not self.cluster.is_single or self.cluster.peer_dns is not None:
            # Hear from the peers before leasing, no longer than the grace: who else is alive, and,
            # for a restarted member, what its successor fetched for it (cluster.readiness).
            # No await from cluster.start to here: no heartbeat answer is missed.
            until = self._clock() + self.config.cluster.startup_grace_s
            hold = StartupHold(restarted=restarted, joining=self.cluster.joining, deadline=until,
                               release=self.dispatcher.release_hold, alone_is_enough=self.cluster.peer_dns is None)
            self.dispatcher.hold(until, hold)
            self.cluster.watch_startup(hold)
        self.leases.start(self.supervisor)
        self.dispatcher.start(self.supervisor)
        self.upkeep.start(self.supervisor)
        if self.config.seeds:
            result, prepared = await self.intake.submit(self.config.seeds, priority=SEED_PRIORITY)
            for _, raw, reason in prepared.invalid:
                log.warning("seed %r rejected: %s", raw, reason)
            for url, reason in prepared.out_of_scope:
                log.warning("seed %s rejected: out of scope (%s)", url, reason)
            log.info("seeds: %d accepted, %d already known, %d rejected", len(result.accepted), result.duplicates,
                     len(prepared.invalid) + len(prepared.out_of_scope))
            if self.resolver is not None:
                for host, why in await unfetchable_seed_hosts((entry.host for entry in prepared.entries),
                                                              self.resolver):
                    fix = "; give --allow-private to crawl private addresses" if "private" in why else ""
                    log.warning("seed host %s %s: its URLs will not be fetched%s", host, why, fix)

    def _fatal(self, exc: BaseException) -> None:
        # A pipeline stage died: the node cannot keep its promises, so it stops loudly. A full
        # disk is said here, once, in one line (the supervisor does not), and cuts the stop short.
        if isinstance(exc, DiskFull):
            exc = exc.at(self.data_dir)
            if self.fatal_error is None:
                log.error("%s", exc)
            self._disk_full.set()
            self._pressure.notify()  # a stop waiting for the stages to drain waits no more
        if self.fatal_error is None:
            self.fatal_error = exc
        self.request_stop()

    def fail(self, exc: BaseException) -> None:
        """A fatal error met outside the node's tasks (its start): the node stops as on its own."""
        self._fatal(exc)

    def request_stop(self) -> None:
        self._stopping = True
        self.supervisor.closing()
        self.dispatcher.stop()
        self._stop_requested.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    async def stop(self, *, grace_s: float = 10.0, hand_off: bool = False) -> None:
        """Ordered shutdown: stop leasing, let fetches finish (or hand them back), drain the
        parse and store stages, write back what was never attempted, close in reverse. On a full
        disk (before or while draining) fetches are cancelled and nothing is waited for or written
        back: unstored pages keep their leases, which return to their queues at the next start.
        ``hand_off``: leave the ring drained as --handoff-on-exit does (batch mode's end)."""
        self.request_stop()
        if (hand_off or self.config.cluster.handoff_on_exit) and not self.cluster.is_single:
            await self._unless_disk_full(self._hand_everything_off(grace_s))
        await self._unless_disk_full(self.dispatcher.drain(grace_s))
        drained = await self._pressure.wait_until(
            lambda: self._disk_full.is_set() or (self.parse.idle() and self.store.idle())
            or not self.supervisor.running("store"), grace_s + 30)  # a dead store drains nothing
        if self._disk_full.is_set():
            await self.dispatcher.drain(0)  # cancelled: their pages could not be stored
        elif not drained:
            log.error("the parse and store stages did not drain in time; their pages are fetched again next run")
        if not self._disk_full.is_set() and not self.cluster.is_single:
            await self._unless_disk_full(self._flush_outboxes())
        self.leases.stop()
        await self.supervisor.stop()
        if not self._disk_full.is_set():
            await self._unless_disk_full(self.leases.flush())
        if not self._disk_full.is_set():
            await self._unless_disk_full(self.upkeep.flush())
        await self.cluster.close()
        await self.store.close(write_nothing=self._disk_full.is_set())
        await self.parse.close()
        await self.fetcher.close()
        try:
            await self.frontier.close()
        except DiskFull as exc:  # its last checkpoint: the WAL it leaves is read at the next start
            self._fatal(exc)

    async def _flush_outboxes(self) -> None:
        """Deliver what the last pages owe the live peers before the senders stop (bounded)."""
        outboxes = self.cluster.outboxes
        if not await outboxes.flush(OUTBOX_FLUSH_S):
            log.warning("%d rows owed to live peers were not delivered in %g s: they wait here for the next start",
                        outboxes.owed_to_live(), OUTBOX_FLUSH_S)

    async def _unless_disk_full(self, step: Coroutine[Any, Any, None]) -> None:
        """A step of the stop, cut short by a full disk; a full disk it meets stops the node too."""
        error = await cut_short(step, self._disk_full, name="stop-step")
        if isinstance(error, DiskFull):
            self._fatal(error)
        elif error is not None:
            raise error

    async def _hand_everything_off(self, grace_s: float) -> None:
        """--handoff-on-exit: this node leaves the ring, its queue drains to the successors
        through the acknowledged outboxes, then it says goodbye."""
        log.info("leaving the cluster: handing the queue to the successors")
        # "Leaving" first, so the others stop routing this node's hosts here while it drains;
        # "drained" only once the queue and the outbox are handed on and acknowledged, so that
        # a drain cut short (a kill) leaves a member the others count as down with work, and
        # whose queue resumes when it comes back.
        await self.cluster.begin_leaving()
        await self.dispatcher.drain(grace_s)
        # Nothing fetches here any more: no lease round from now on, and what a round under way
        # leases comes back (node.leases), as do the buffers (flushed below), so that every row
        # is queued, and swept, before this node says it is drained.
        self.leases.stop()
        deadline = time.monotonic() + grace_s + 20
        sweeper, outboxes = self.cluster.sweeper, self.cluster.outboxes
        full, drained = True, False
        while time.monotonic() < deadline:
            # Woken by the stages draining and the outboxes' acknowledgements; the timeout
            # bounds the wait for what notifies nobody (the frontier's counts).
            await self._pressure.wait(HANDOFF_RECHECK_S)
            if not (self.parse.idle() and self.store.idle()):
                continue
            await self.leases.flush()  # buffered leases, and a last round's, back to the queue
            moved = await sweeper.sweep(full=full)
            full = False
            totals = await self.frontier.totals()
            if not moved and totals["queued"] == 0 and totals["leased"] == 0 and outboxes.total() == 0:
                self.cluster.leaving_done = True
                # one more round: what arrived while the API was still open
                if await sweeper.sweep(full=True) == 0 and outboxes.total() == 0:
                    drained = True
                    break
        if not drained:
            log.warning("the queue could not be handed on in time (%d URLs in the outbox): it waits here for the "
                        "next start, and the others count this node as down with work", outboxes.total())
        await self.cluster.end_leaving(drained=drained)

    # ----------------------------------------------------------------- wiring callbacks
    def _membership_changed(self) -> None:
        self.leases.give_back(self.hosts.release_unserved(self.cluster.serves, self._clock()))
        self.upkeep.request_resync()

    def _taken(self, result: AddResult) -> None:
        self.hosts.add_queued(result, self._clock())

    def _leases_returned(self) -> None:
        self.cluster.sweeper.request()
        self.upkeep.request_resync()

    # ----------------------------------------------------------------- asked by the API
    async def submit(self, urls: Iterable[str | Mapping[str, Any]], *,
                     priority: int = SEED_PRIORITY) -> tuple[AddResult, Prepared]:
        return await self.intake.submit(urls, priority=priority)

    def resume_api(self) -> bool:
        """Resume fetching through the API now (POST /v1/resume); False if it was not paused."""
        api = self.admission.api
        resumed = api is not None and api.resume(self._clock(), by="POST /v1/resume")
        self._pressure.notify()
        return resumed

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def snapshot(self) -> NodeSnapshot:
        """What this node shows (GET /v1/status, /metrics): its components' snapshots, gathered
        (the frontier's read on its thread)."""
        frontier = await self.frontier.snapshot()
        now = time.time()
        uptime = time.monotonic() - self.started_at
        totals, shed = frontier.totals, frontier.shedding
        store, fetch, intake = self.store.snapshot(), self.fetch.snapshot(), self.intake.snapshot()
        upkeep, cluster = self.upkeep.snapshot(), self.cluster.snapshot()
        hosts = self.hosts.snapshot(TOP_HOSTS, now=self._clock())
        admission = self.admission.snapshot(now)
        deferred = dict(shed.counts)
        restored = deferred.pop("restored", 0)
        return NodeSnapshot(
            node_id=self.node_id, url=self.config.advertise_url,
            idle=is_idle(totals.queued, totals.leased, totals.deferred, self.pipeline_idle()), stopping=self.stopping,
            paused=admission.gate.pause.paused, pause=admission.gate.pause, uptime_s=round(uptime, 3),
            last_stored_at=self.store.last_stored_at,
            counters=Counters(store=store, fetch=fetch.counters, intake=intake.counters, leases=self.leases.snapshot(),
                              parse=self.parse.snapshot(), upkeep=upkeep.counters),
            rates=Rates(fetched_per_s=round(store.fetched / uptime, 2) if uptime > 0 else 0.0),
            frontier=totals,
            queues=Queues(inbound=intake.queue,
                          frontier=FrontierQueueSnapshot(depth=totals.queued,
                                                         oldest_age_s=round(totals.oldest_queued_age_s or 0.0, 3)),
                          fetch=self.dispatcher.snapshot(), parse=self.parse.queue.snapshot(),
                          store=self.store.queue.snapshot()),
            admission=Admission(gate=admission.gate, held=self.held.snapshot()),
            api=admission.api,
            shedding=SheddingStatus(policy=upkeep.shedding, deferred_now=totals.deferred,
                                    deferred_total=sum(deferred.values()), deferred_by_reason=deferred,
                                    restored_total=restored, cut_priority=shed.cut),
            retries=fetch.retries, ip=admission.ip, hosts=hosts.busiest, host_table=hosts, members=cluster.members,
            cluster=ClusterSection(counters=ClusterCountersSection(cluster=cluster.counters, intake=intake.peers),
                                   events=cluster.events, heartbeats=cluster.heartbeats,
                                   outbox_total=cluster.outbox_total, peer_dns=cluster.peer_dns),
            dns=self.resolver.snapshot() if self.resolver is not None else None,
            supervisor=self.supervisor.snapshot(), leases_expired=upkeep.leases_expired, fetches=fetch.fetches,
            totals=self.totals.snapshot(),
            frontier_calls=self.frontier.call_snapshot(), start_time_s=round(now - uptime, 3), version=__version__)

    def pipeline_idle(self) -> bool:
        """Nothing in flight in any stage of this node (the frontier's counts aside)."""
        return (self.dispatcher.idle() and self.intake.idle() and self.parse.idle() and self.store.idle()
                and self.leases.idle() and self.cluster.idle())
