"""The node: wires frontier, scheduler, fetcher, parser pool, store and API into one pipeline.

    inbound ─► frontier ─(lease)─► dispatcher ─► fetch tasks ─► parse queue ─► parsers
                  ▲                                   │                          │
                  └───────── store worker ◄── store queue ◄──────────────────────┘

Every arrow is bounded. The store worker is the only place outcomes reach the frontier: it
writes WARC + crawl.log first and then, in one SQLite transaction, marks the leases done and
adds the discovered links, so a crash between the two re-fetches a page rather than losing it.
A full store queue blocks parsers, a full parse queue blocks fetch tasks, blocked fetch tasks
hold their global slots, and with no free slot the dispatcher stops leasing (rule 1).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from crawler_node.core.backoff import RetryPolicy
from crawler_node.cluster.cluster import Cluster
from crawler_node.node.dispatch import DispatchStage
from crawler_node.fetch.fetcher import Fetcher
from crawler_node.node.fetch_stage import FetchStage
from crawler_node.frontier.frontier import AddResult, Frontier, FrontierBatch, UrlEntry
from crawler_node.core.limiter import AimdLimiter
from crawler_node.api.status import StatusViews
from crawler_node.node.parse_stage import BATCHES_PER_PARSER, ParseStage
from crawler_node.node.pipeline import SEED_PRIORITY, InboundFull, PageResult, take_in
from crawler_node.node.pressure import PressureControl
from crawler_node.node.hosts import HostScheduler, HostState
from crawler_node.settings import Settings
from crawler_node.node.queues import StageQueue
from crawler_node.store.worker import StoreWorker
from crawler_node.node.store_stage import StoreStage
from crawler_node.core.urls import InvalidURL, Scope, host_of, normalize_url
from crawler_node.runtime.workers import SyncWorker

log = logging.getLogger("crawler_node.node.node")


class Node(DispatchStage, FetchStage, ParseStage, StoreStage, PressureControl, StatusViews):
    """One crawler node. Its stages live in their own modules (dispatch, fetch_stage,
    parse_stage, store_stage, pressure, node_status) as mixins over this one object's state;
    this module holds the state, the lifecycle and the inbound path."""

    def __init__(self, settings: Settings, *, clock=time.time) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self._clock = clock
        self.data_dir = Path(settings.data_dir)
        self.scope = Scope(allow_hosts=settings.allow_hosts, max_depth=settings.max_depth)
        self.retry_policy = RetryPolicy(
            budget=settings.retry_budget,
            base_s=settings.retry_base_s,
            cap_s=settings.retry_cap_s,
            retry_after_cap_s=settings.retry_after_cap_s,
            rng=random.Random(),
        )
        self.scheduler = HostScheduler(self._new_host_limiter)
        self.fetcher = Fetcher(
            user_agent=settings.user_agent,
            proxy=settings.proxy,
            allow_private=settings.allow_private,
            connect_timeout_s=settings.connect_timeout_s,
            fetch_timeout_s=settings.fetch_timeout_s,
            max_body_bytes=settings.max_body_bytes,
            max_connections=settings.global_inflight + 8,
        )
        self.parse_queue: StageQueue[PageResult] = StageQueue("parse", settings.parse_queue)
        self.store_queue: StageQueue[PageResult] = StageQueue("store", settings.store_queue)
        self._init_flow_control(settings)
        self._frontier_thread = SyncWorker("frontier")
        self.cluster = Cluster(settings, frontier_thread=self._frontier_thread, frontier=lambda: self.frontier,
                               on_change=self._membership_changed, on_taken=self._note_added, clock=clock)
        self.frontier: Frontier | None = None
        self.store: StoreWorker | None = None
        self._parsers: list = []
        self._parser_replacing = asyncio.Lock()
        self._global_slots = asyncio.Semaphore(settings.global_inflight)
        self.in_flight = 0
        self._work = asyncio.Event()
        self._stopping = False
        self._stop_requested = asyncio.Event()
        self._stopped = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._fetch_tasks: set[asyncio.Task] = set()
        self._returned: list[int] = []
        self._inbound_pending = 0
        self._refill_wanted: dict[str, HostState] = {}
        self._hold_until = 0.0
        self._resync_needed = asyncio.Event()
        self._returned_now: list[int] = []  # leases of hosts handed away, to give back now
        self._disallowed_now: list[int] = []  # leases robots.txt forbids, to finish now
        self._refill_event = asyncio.Event()
        self._busy_parsers = 0
        self._store_busy = False
        self.started_at = time.monotonic()
        # Wall-clock time of the last commit of fetch attempts (store and frontier): when a
        # crawl ended, or since when a node with work has made no progress.
        self.last_stored_at: float | None = None
        self.counters: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.fatal_error: BaseException | None = None

    # ----------------------------------------------------------------- lifecycle
    def _new_host_limiter(self) -> AimdLimiter:
        s = self.settings
        return AimdLimiter(start=s.host_limit_start, floor=s.host_limit_floor, ceiling=s.host_limit_ceiling)

    async def start(self) -> None:
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._parsers = self._new_parsers()
        for parser in self._parsers:
            await parser.start()
        self.frontier = await self._frontier_thread.call(
            Frontier, self.data_dir / "frontier.sqlite3", lease_timeout_s=s.lease_timeout_s
        )
        self.store = StoreWorker(self.data_dir, node_id=self.node_id, warc_max_bytes=s.warc_max_bytes,
                                 in_process=s.store_in_process, nice=s.worker_nice)
        await self.store.start()
        await self.fetcher.start()
        await self.cluster.start()
        now = self._clock()
        if not self.cluster.is_single:
            # Hear from the peers before leasing: a restarted member must learn what its
            # successor fetched for it while it was away, and who else is alive.
            self._hold_until = now + s.startup_grace_s
        for host_queue in await self._frontier_thread.call(lambda: list(self.frontier.hosts_with_work())):
            state = self.scheduler.host(host_queue.host)
            state.next_eligible = max(state.next_eligible, host_queue.next_eligible)
            self.scheduler.add_work(host_queue.host, host_queue.queued, now)
        self._spawn(self._dispatch_loop(), "dispatcher")
        self._spawn(self._refill_loop(), "lease-refill")
        for index, parser in enumerate(self._parsers):
            for loop in range(BATCHES_PER_PARSER):
                self._spawn(self._parse_loop(index), f"{parser.name}-loop-{loop}")
        self._spawn(self._store_loop(), "store-worker")
        self._spawn(self._lease_expiry_loop(), "lease-expiry")
        self._spawn(self._resync_loop(), "host-resync")
        self._spawn(self._shed_loop(), "load-shedding")
        if s.seeds:
            result = await self.submit(s.seeds, priority=SEED_PRIORITY)
            log.info("seeds: %d accepted, %d already known", len(result.accepted), result.duplicates)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # A pipeline stage died: the node cannot keep its promises, so it stops loudly.
            log.error("task %s failed; stopping the node", task.get_name(), exc_info=exc)
            self.fatal_error = exc
            self.request_stop()

    def request_stop(self) -> None:
        self._stopping = True
        self._stop_requested.set()
        self._work.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    async def stop(self, *, grace_s: float = 10.0) -> None:
        """Ordered shutdown: stop leasing, let fetches finish (or hand them back), drain the
        parse and store stages, write back what was never attempted, close files."""
        self.request_stop()
        if self.settings.handoff_on_exit and not self.cluster.is_single:
            await self._hand_everything_off(grace_s)
        if self._fetch_tasks:
            _, pending = await asyncio.wait(set(self._fetch_tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        deadline = time.monotonic() + grace_s + 30
        while time.monotonic() < deadline and (
            not self.parse_queue.empty() or self._busy_parsers or not self.store_queue.empty() or self._store_busy
        ):
            await asyncio.sleep(0.05)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for state in self.scheduler:
            self._returned.extend(lease.id for lease in state.buffer)
            state.buffer.clear()
        if self.frontier is not None:
            returned = self._returned + self._returned_now
            if returned or self._disallowed_now:
                await self._frontier_thread.call(
                    self.frontier.apply, FrontierBatch(returned=returned, failed=self._disallowed_now))
            await self._frontier_thread.call(self.frontier.close)
        if self.store is not None:
            await self.store.close()
        await self.cluster.close()
        await self.fetcher.close()
        for parser in self._parsers:
            await parser.close()
        self._frontier_thread.shutdown()
        self._stopped.set()

    async def _hand_everything_off(self, grace_s: float) -> None:
        """--handoff-on-exit: this node leaves the ring, its queue drains to the successors
        through the acknowledged outboxes, then it says goodbye."""
        log.info("leaving the cluster: handing the queue to the successors")
        # Goodbye first, so the others stop routing this node's hosts here while it drains.
        self.cluster.leaving = True
        await self.cluster.announce_leave()
        self.cluster.membership.set_self_leaving()
        self.cluster.request_sweep()
        self._membership_changed()
        if self._fetch_tasks:
            await asyncio.wait(set(self._fetch_tasks), timeout=grace_s)
        deadline = time.monotonic() + grace_s + 20
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            idle_pipeline = self.parse_queue.empty() and self.store_queue.empty() and not self._store_busy
            if idle_pipeline and not self._returned_now:
                moved = await self.cluster.sweep()
                totals = await self.frontier_totals()
                if not moved and totals["queued"] == 0 and self.cluster.outbox_total() == 0:
                    self.cluster.leaving_done = True
                    # one more round: what arrived while the API was still open
                    if await self.cluster.sweep() == 0 and self.cluster.outbox_total() == 0:
                        break
        self.cluster.leaving_done = True
        await self.cluster.announce_leave()

    # ----------------------------------------------------------------- inbound
    def make_entries(self, urls: Iterable[str | dict], *, priority: int = SEED_PRIORITY) -> tuple[list[UrlEntry], list[tuple[str, str]]]:
        """Normalise and scope-check submitted URLs: (entries, [(url, reason), ...] rejected)."""
        entries: list[UrlEntry] = []
        rejected: list[tuple[str, str]] = []
        for item in urls:
            if isinstance(item, str):
                item = {"url": item}
            raw = item["url"]
            try:
                url = normalize_url(raw)
            except InvalidURL as exc:
                rejected.append((raw, exc.reason))
                continue
            depth = int(item.get("depth") or 0)
            reason = self.scope.check(url, depth)
            if reason is not None:
                rejected.append((url, reason))
                continue
            entries.append(
                UrlEntry(url=url, host=host_of(url), depth=depth,
                         priority=int(item.get("priority", priority)), hops=int(item.get("hops") or 0))
            )
        return entries, rejected

    async def submit(self, urls: Iterable[str | dict], *, priority: int = SEED_PRIORITY) -> AddResult:
        entries, rejected = self.make_entries(urls, priority=priority)
        result = await self.add_entries(entries)
        self.counters["rejected"] += len(rejected)
        return result

    async def add_entries(self, entries: list[UrlEntry], *, seen: bool = False) -> AddResult:
        """Durably take URLs in: this node's own go to its frontier, the others to the owner's
        outbox. Returns only after the commit, which is what lets the API (and peers)
        acknowledge. Raises InboundFull instead of queueing more."""
        if self._inbound_pending + len(entries) > self.settings.inbound_capacity and self._inbound_pending:
            self.counters["inbound_rejected_batches"] += 1
            raise InboundFull(retry_after_s=1.0)
        if seen:
            # Fetched elsewhere: recorded where it lands, never forwarded — in the frontier
            # for hosts served here (handback, join), as a replica for the others.
            mine = [e for e in entries if self.cluster.serves(e.host)]
            replicas = [e.url for e in entries if not self.cluster.serves(e.host)]
            forward: list[tuple[str, UrlEntry]] = []
        else:
            mine, forward = self._route_received(entries)
            replicas = []
        self._inbound_pending += len(entries)
        try:
            result = await self._frontier_thread.call(take_in, self.frontier, mine, forward, seen, replicas)
        finally:
            self._inbound_pending -= len(entries)
        if forward:
            self.cluster.note_outboxed(Counter(peer for peer, _ in forward))
        self._note_added(result.queued)
        self.counters["submitted"] += len(result.accepted)
        return result

    def _route_received(self, entries: list[UrlEntry]) -> tuple[list[UrlEntry], list[tuple[str, UrlEntry]]]:
        """Split URLs that arrived here: keep this node's, pass the rest on — at most
        ``max_hops`` times, after which a URL stays where it is (views that disagree for a
        moment must neither drop a URL nor bounce it forever)."""
        if self.cluster.is_single:
            return entries, []
        mine: list[UrlEntry] = []
        forward: list[tuple[str, UrlEntry]] = []
        for entry in entries:
            owner = self.cluster.route(entry.host)
            if owner is None:
                mine.append(entry)
            elif entry.hops >= self.settings.max_hops:
                self.cluster.counters["hop_limit_kept"] += 1
                mine.append(entry)
            else:
                entry.hops += 1
                forward.append((owner, entry))
        self.cluster.counters["received_forwarded_on"] += len(forward)
        return mine, forward

    def _note_added(self, accepted: list[UrlEntry]) -> None:
        if not accepted:
            return
        now = self._clock()
        for host, count in Counter(entry.host for entry in accepted).items():
            self.scheduler.add_work(host, count, now)
        self._work.set()

    # ----------------------------------------------------------------- housekeeping
    async def _lease_expiry_loop(self) -> None:
        interval = max(1.0, self.settings.lease_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            expired = await self._frontier_thread.call(self.frontier.expire_leases)
            if expired:
                log.warning("%d leases expired and went back to their queues", expired)
                self.counters["leases_expired"] += expired
                self._resync_needed.set()
