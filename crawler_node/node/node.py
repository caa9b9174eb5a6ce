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
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

from crawler_node.cluster.cluster import Cluster, ClusterConfig
from crawler_node.cluster.fencing import FencedFetcher
from crawler_node.cluster.ipshare import ip_shares_for
from crawler_node.cluster.readiness import StartupHold
from crawler_node.core.backoff import HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.robots import RobotsCache, RobotsPolicy
from crawler_node.core.scope import Scope
from crawler_node.core.shedding import ShedPolicy
from crawler_node.core.signals import LatencyModel
from crawler_node.core.verdict import ResponseRules
from crawler_node.fetch.dns import Resolver
from crawler_node.fetch.fetcher import Fetcher
from crawler_node.frontier import AddResult, FrontierService
from crawler_node.node.admission import ApiGate, FetchAdmission, IpGates, PressureSource
from crawler_node.node.budget import HeldBytes
from crawler_node.node.dispatch import Dispatcher
from crawler_node.node.fetch_stage import FetchStage
from crawler_node.node.hosts import HostTable
from crawler_node.node.intake import Intake, Prepared
from crawler_node.node.leases import LeaseKeeper
from crawler_node.node.operator import OperatorControl
from crawler_node.node.parse_stage import ParseStage
from crawler_node.node.pipeline import SEED_PRIORITY
from crawler_node.node.snapshot import NodeSnapshot, gather
from crawler_node.node.store_stage import StoreStage
from crawler_node.node.upkeep import Upkeep
from crawler_node.runtime.datadir import DiskFull
from crawler_node.runtime.frontier_guard import Watermark
from crawler_node.runtime.malloctune import release_free_heap
from crawler_node.runtime.supervisor import Supervisor, cut_short
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.settings import Settings
from crawler_node.store.worker import StoreWorker
from crawler_node.store.writer import CrawlInfo

log = logging.getLogger("crawler_node.node")

HANDOFF_RECHECK_S = 0.1
# A stop waits this long at most for the outboxes to reach the live peers (Outboxes.flush):
# batches of 256 rows take milliseconds; a peer that stops at the same moment answers until its
# own stop closes its frontier, and one that does not answer is found down or waited out.
OUTBOX_FLUSH_S = 5.0


def build_rules(s: Settings, *, rng: random.Random | None = None) -> ResponseRules:
    """What a response means, as these settings say (core.verdict)."""
    rng = rng if rng is not None else random.Random()
    return ResponseRules(
        retry=RetryPolicy(budget=s.retry_budget, base_s=s.retry_base_s, cap_s=s.retry_cap_s,
                          retry_after_cap_s=s.retry_after_cap_s, rng=rng),
        host_backoff=HostBackoffPolicy(initial_s=s.host_backoff_initial_s, cap_s=s.host_backoff_cap_s,
                                       forgive_after_s=s.host_backoff_forgive_s, rng=rng),
        host_backoff_after=s.host_backoff_after,
        retry_after_cap_s=s.retry_after_cap_s,
        latency=LatencyModel(factor=s.latency_rise_factor, min_rise_s=s.latency_rise_min_s)
        if s.latency_rise_factor else None,
        through_api=s.proxy is not None,
        api_limit_header=s.api_limit_header,
        robots_agent=s.robots_agent,
        max_crawl_delay_s=s.max_crawl_delay_s,
        robots_max_bytes=s.robots_max_bytes,
        robots=RobotsPolicy(ttl_s=s.robots_ttl_s, retry_s=s.robots_error_retry_s, retry_cap_s=s.robots_retry_cap_s,
                            max_attempts=s.robots_max_attempts),
    )


def build_admission(s: Settings, *, pressure: list[PressureSource], resolver: Resolver | None = None) -> FetchAdmission:
    """The global gates of rule 5: the fetch-through API's limiter, per-IP gates, pressure."""
    api = None
    if s.proxy:
        # Until the API says otherwise, assume it takes everything we send.
        start = s.api_limit_start or s.global_inflight
        api = ApiGate(limiter=AimdLimiter(start=start, floor=1, ceiling=s.global_inflight),
                      quota_reset_s=s.api_quota_reset_s)
    ip_gates = None
    if not s.proxy and s.ip_inflight_limit:
        # With a proxy we never learn the sites' addresses: no per-IP limit there.
        # The fetcher's resolver: a gate and the fetch it admits agree on the address, and
        # the name is asked once. IpGates keeps its own small cache, asked once per host (at
        # its first contact): cache_s is the resolver's cap, so the two agree.
        ip_gates = IpGates(limit=s.ip_inflight_limit, cache_s=s.dns_cache_s, clock=time.monotonic,
                           resolve=resolver.first_address if resolver is not None else None,
                           shares=ip_shares_for(s))
    return FetchAdmission(api=api, ip_gates=ip_gates, pressure=pressure)


class Node:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        s = settings
        self.settings = settings
        self.node_id = s.node_id
        self._clock = clock
        self.data_dir = Path(s.data_dir)
        self.started_at = time.monotonic()
        self.fatal_error: BaseException | None = None
        self._stop_requested = asyncio.Event()
        self._disk_full = asyncio.Event()  # a write found no room: nothing more can be stored
        self._stopping = False
        work, pressure = Wakeup(), Wakeup()  # a host may be ready; a stage may have drained
        self._pressure = pressure
        self.supervisor = Supervisor(on_fatal=self._fatal)
        self.frontier = FrontierService(path=self.data_dir / "frontier.sqlite3", lease_timeout_s=s.lease_timeout_s,
                                        clock=clock, max_pages_per_host=s.max_pages_per_host,
                                        resident_hosts=s.active_hosts, urgent_priority=SEED_PRIORITY)
        scope = Scope.from_settings(s)
        rules = build_rules(s)
        recrawl = s.recrawl_policy()
        self.hosts = HostTable(
            new_limiter=lambda: AimdLimiter(start=s.host_limit_start, floor=s.host_limit_floor,
                                            ceiling=s.host_limit_ceiling),
            backoff_policy=rules.host_backoff, work=work, started_at=clock(), idle_s=s.host_idle_s,
            memory_target=s.host_memory_target, turn_s=s.host_turn_s,
            robots_cache=RobotsCache(agent=s.robots_agent, max_bytes=s.robots_cache_bytes, ttl_s=s.robots_ttl_s),
            robots_policy=rules.robots, min_delay_s=s.min_host_delay_s)
        self.cluster = Cluster(config=ClusterConfig.from_settings(s), frontier=self.frontier,
                               supervisor=self.supervisor, on_change=self._membership_changed,
                               on_taken=self._taken, outbox_space=pressure, clock=clock,
                               politeness_of=lambda host: self.hosts.politeness_to_send(host, clock()))
        self.held = HeldBytes(limit=s.pipeline_max_bytes, released=pressure)
        self.store = StoreStage(
            worker=StoreWorker(self.data_dir, node_id=s.node_id, warc_max_bytes=s.warc_max_bytes,
                               in_process=s.store_in_process, nice=s.worker_nice,
                               crawl_log_max_bytes=s.crawl_log_max_bytes, dedup_max_entries=s.dedup_max_entries,
                               items_max_bytes=s.items_max_bytes,
                               info=CrawlInfo(crawl_name=s.crawl_name, operator=s.operator, user_agent=s.user_agent,
                                              robots=f"obey (RFC 9309) as {s.robots_agent}")),
            frontier=self.frontier, hosts=self.hosts, router=self.cluster.router, outboxes=self.cluster.outboxes,
            held=self.held, node_id=s.node_id, queue_size=s.store_queue, lag_s=s.store_lag_s, taken=pressure,
            clock=clock, recrawl=recrawl)
        # After the store: URLs that come in past their host's page cap get their lines there.
        self.intake = Intake(frontier=self.frontier, hosts=self.hosts, ring=self.cluster.router,
                             outboxes=self.cluster.outboxes, scope=scope, capacity=s.inbound_capacity,
                             max_hops=s.max_hops, clock=clock, crawl_log=self.store)
        self.parse = ParseStage(scope=scope, max_links=s.max_links_per_page, workers=s.parse_workers,
                                nice=s.worker_nice, queue_size=s.parse_queue, store=self.store,
                                ring_generation=lambda: self.cluster.membership.version, taken=pressure,
                                max_parse_bytes=s.max_parse_bytes, read_sitemaps=s.sitemaps != "off",
                                sitemap_max_urls=s.sitemap_max_urls, sitemap_max_bytes=s.sitemap_max_bytes,
                                delay_s=s.parse_delay_s, crash_url=s.parse_crash_url,
                                outlinks=s.warc_metadata == "on", pipelines=tuple(s.pipelines),
                                pipeline_budget_s=s.pipeline_budget_s)
        # Direct fetches resolve through the node's resolver (fetch.dns); through a proxy, the proxy does.
        self.resolver = None if s.proxy else Resolver(server=s.dns_server, allow_private=s.allow_private,
                                                      cache_hosts=s.dns_cache_hosts, cache_s=s.dns_cache_s)
        self.admission = build_admission(s, pressure=[self.parse, self.store, self.held, self.cluster.outboxes],
                                         resolver=self.resolver)
        if self.admission.ip_gates is not None and self.admission.ip_gates.shares is not None:
            # Per-IP shares agreed through the heartbeats; hosts parked on a grown share go again.
            self.admission.ip_gates.wake_with(lambda states: self.hosts.wake(states, clock()))
            self.cluster.share_ips(self.admission.ip_gates)
        self.leases = LeaseKeeper(frontier=self.frontier, hosts=self.hosts, admission=self.admission,
                                  pressure=pressure, on_returned=self._leases_returned, clock=clock,
                                  store=self.store)
        self.operator = OperatorControl(admission=self.admission, leases=self.leases, hosts=self.hosts,
                                        frontier=self.frontier, pressure=pressure, data_dir=self.data_dir,
                                        clock=clock)
        self.fetcher = Fetcher(user_agent=s.user_agent, proxy=s.proxy, allow_private=s.allow_private,
                               connect_timeout_s=s.connect_timeout_s, fetch_timeout_s=s.fetch_timeout_s,
                               max_body_bytes=s.max_body_bytes, max_connections=s.global_inflight + 8,
                               keepalive_hosts=s.keepalive_hosts, ca_bundle=s.ca_bundle, resolver=self.resolver,
                               cookies=s.cookies == "on")
        # Asked once more just before each request: a member frozen after the dispatch sends nothing on waking.
        fenced_fetcher = FencedFetcher(self.fetcher, fencing=self.cluster.fencing)
        self.cluster.fencing.on_regained = self.hosts.regained
        self.fetch = FetchStage(fetcher=fenced_fetcher, hosts=self.hosts, admission=self.admission, rules=rules,
                                held=self.held, parse=self.parse, store=self.store, scope=scope,
                                robots_max_bytes=s.robots_max_bytes, sitemaps=s.sitemaps,
                                on_api_paused=self.leases.api_paused,
                                returned=lambda lease_id: self.leases.give_back([lease_id]), clock=clock,
                                max_redirects=s.max_redirects, cookies=s.cookies == "on")
        self.dispatcher = Dispatcher(hosts=self.hosts, admission=self.admission, leases=self.leases,
                                     fetch=self.fetch, serves=self.cluster.serves, global_inflight=s.global_inflight,
                                     work=work, pressure=pressure, on_fatal=self._fatal, clock=clock,
                                     fence=self.cluster.fencing.blocked_until)
        self.upkeep = Upkeep(frontier=self.frontier, hosts=self.hosts,
                             shed_policy=ShedPolicy(high_water=s.shed_high_water, low_water=s.shed_low_water,
                                                    after_s=s.shed_after_s),
                             serves=self.cluster.serves, lease_timeout_s=s.lease_timeout_s, clock=clock,
                             release_memory=release_free_heap, recrawl=recrawl.enabled,
                             recrawl_priority=s.recrawl_priority,
                             watermark=Watermark(self.data_dir, self.data_dir / "frontier.sqlite3"),
                             successor_of=self.cluster.router.successor_if_served,
                             outboxed=self.cluster.outboxes.note_outboxed,
                             turn_s=s.host_turn_s if s.active_hosts else 0.0)

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self.frontier.open()
        self.operator.restore()
        self.hosts.load(await self.frontier.hosts_with_work(), self._clock())
        await self.fetcher.start()
        await self.parse.start(self.supervisor)
        await self.store.start(self.supervisor)
        restarted = (await self.frontier.totals())["hosts"] > 0  # before the seeds: they are not a past
        await self.cluster.start()
        if not self.cluster.is_single or self.cluster.peer_dns is not None:
            # Hear from the peers before leasing, no longer than the grace: who else is alive, and,
            # for a restarted member, what its successor fetched for it (cluster.readiness).
            # No await from cluster.start to here: no heartbeat answer is missed.
            until = self._clock() + self.settings.startup_grace_s
            hold = StartupHold(restarted=restarted, joining=self.cluster.joining, deadline=until,
                               release=self.dispatcher.release_hold, alone_is_enough=self.cluster.peer_dns is None)
            self.dispatcher.hold(until, hold)
            self.cluster.watch_startup(hold)
        self.leases.start(self.supervisor)
        self.dispatcher.start(self.supervisor)
        self.upkeep.start(self.supervisor)
        if self.settings.seeds:
            result, prepared = await self.intake.submit(self.settings.seeds, priority=SEED_PRIORITY)
            for _, raw, reason in prepared.invalid:
                log.warning("seed %r rejected: %s", raw, reason)
            for url, reason in prepared.out_of_scope:
                log.warning("seed %s rejected: out of scope (%s)", url, reason)
            log.info("seeds: %d accepted, %d already known, %d rejected", len(result.accepted), result.duplicates,
                     len(prepared.invalid) + len(prepared.out_of_scope))

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

    async def stop(self, *, grace_s: float = 10.0) -> None:
        """Ordered shutdown: stop leasing, let fetches finish (or hand them back), drain the
        parse and store stages, write back what was never attempted, close in reverse. On a full
        disk (before or while draining) fetches are cancelled and nothing is waited for or written
        back: unstored pages keep their leases, which return to their queues at the next start."""
        self.request_stop()
        if self.settings.handoff_on_exit and not self.cluster.is_single:
            await self._unless_disk_full(self._hand_everything_off(grace_s))
        await self._unless_disk_full(self.dispatcher.drain(grace_s))
        drained = await self._pressure.wait_until(
            lambda: self._disk_full.is_set() or (self.parse.idle() and self.store.idle()), grace_s + 30)
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
        """What this node shows (GET /v1/status, /metrics): its components' snapshots, gathered."""
        return gather(self, await self.frontier.snapshot())

    def pipeline_idle(self) -> bool:
        """Nothing in flight in any stage of this node (the frontier's counts aside)."""
        return (self.dispatcher.idle() and self.intake.idle() and self.parse.idle() and self.store.idle()
                and self.leases.idle() and self.cluster.idle())
