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
import concurrent.futures
import logging
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from crawler_node.admission import API_QUOTA, ApiGate, FetchAdmission, IpGates, Permit
from crawler_node.backoff import HostBackoff, RetryPolicy
from crawler_node.cluster import Cluster
from crawler_node.fetch import ErrorKind, Fetcher, FetchResult
from crawler_node.frontier import AddResult, Frontier, FrontierBatch, Lease, UrlEntry
from crawler_node.limiter import AimdLimiter, Outcome
from crawler_node.parse import parse_pages
from crawler_node.robots import RobotsRules, RobotsVerdict, verdict_for_status
from crawler_node.scheduler import HostScheduler, HostState, Robots
from crawler_node.settings import Settings
from crawler_node.shedding import ShedPolicy
from crawler_node.signals import ApiSignal, LatencyBaseline, Signal, classify
from crawler_node.stages import StageQueue
from crawler_node.store import FetchRecord, Store
from crawler_node.urls import InvalidURL, Scope, host_of, normalize_url

log = logging.getLogger("crawler_node.node")

SEED_PRIORITY = 100  # seeds and submitted URLs go before anything discovered
PARSE_BATCH = 16  # pages per round trip to a parser process
PARSE_BATCH_BYTES = 4_000_000  # ... unless they are big: then fewer
REFILL_HOSTS = 256  # hosts per batched lease round trip


def _take_in(frontier: Frontier, mine: list[UrlEntry], forward: list[tuple[str, UrlEntry]],
             seen: bool, replicas: list[str]) -> AddResult:
    """Runs on the frontier thread: outbox first, then the frontier, both committed before
    the caller acknowledges (a crash in between re-sends, and receivers deduplicate)."""
    if forward:
        frontier.outbox_put(forward, seen=seen)
    if replicas:
        frontier.replica_add(replicas)
    if seen:
        return AddResult(accepted=[], duplicates=len(mine) - frontier.mark_seen(mine))
    return frontier.add(mine)


def _lease_many(frontier: Frontier, requests: list[tuple[str, int]]) -> list[tuple[list[Lease], float | None]]:
    return [frontier.lease(host, n) if n > 0 else ([], None) for host, n in requests]


@dataclass(slots=True)
class PageResult:
    """One fetch attempt on its way from a fetch task to the store worker."""

    lease: Lease
    fetch: FetchResult | None  # None: decided without a request (robots.txt disallows it)
    signal: Signal | None
    retry_at: float | None = None  # set: back to the frontier, eligible then
    postponed: bool = False  # with retry_at: refused before the site (API limit), budget kept
    final_failure: bool = False
    links: list[UrlEntry] = field(default_factory=list)


class SyncWorker:
    """A dedicated thread for one synchronous component (SQLite, files): the event loop never
    waits on the disk, and the component never sees two threads."""

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.pending = 0

    async def call(self, fn, /, *args, **kwargs):
        self.pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args, **kwargs))
        finally:
            self.pending -= 1

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class InboundFull(Exception):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__("inbound queue is full")
        self.retry_after_s = retry_after_s


class Node:
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
        self._store_thread = SyncWorker("store")
        self.cluster = Cluster(settings, frontier_thread=self._frontier_thread, frontier=lambda: self.frontier,
                               on_change=self._membership_changed, on_taken=self._note_added, clock=clock)
        self.frontier: Frontier | None = None
        self.store: Store | None = None
        self._parse_pool: concurrent.futures.Executor | None = None
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
        self._refill_event = asyncio.Event()
        self._busy_parsers = 0
        self._store_busy = False
        self.started_at = time.monotonic()
        self.counters: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.fatal_error: BaseException | None = None

    # ----------------------------------------------------------------- lifecycle
    def _init_flow_control(self, s: Settings) -> None:
        """The global gates of rule 5 (admission.py) and the shedding policy of rule 7."""
        api = None
        if s.proxy:
            # Until the API says otherwise, assume it takes everything we send.
            start = s.api_limit_start or s.global_inflight
            api = ApiGate(limiter=AimdLimiter(start=start, floor=1, ceiling=s.global_inflight),
                          quota_reset_s=s.api_quota_reset_s)
        ip_gates = None
        if not s.proxy and s.ip_inflight_limit:
            # With a proxy we never learn the sites' addresses: no per-IP limit there.
            ip_gates = IpGates(limit=s.ip_inflight_limit, cache_s=s.dns_cache_s, clock=time.monotonic)
        self.admission = FetchAdmission(api=api, ip_gates=ip_gates)
        self.admission.add_pressure_source("parse", lambda: self.parse_queue.qsize() >= self.parse_queue.maxsize)
        self.admission.add_pressure_source("store", lambda: self.store_queue.qsize() >= self.store_queue.maxsize
                                           or self.store_queue.oldest_age_s() > s.store_lag_s)
        self.admission.add_pressure_source("memory", lambda: self.held_bytes > s.pipeline_max_bytes)
        # A peer not taking URLs as fast as we find them: fetch less rather than pile up.
        self.admission.add_pressure_source("outbox", lambda: self.cluster.outbox_full(self.cluster.outbox_counts))
        self.held_bytes = 0  # response bodies on their way from fetch to store
        self.shed_policy = ShedPolicy(high_water=s.shed_high_water, low_water=s.shed_low_water,
                                      after_s=s.shed_after_s)
        self._backoff_rng = random.Random()

    def _new_host_limiter(self) -> AimdLimiter:
        s = self.settings
        return AimdLimiter(start=s.host_limit_start, floor=s.host_limit_floor, ceiling=s.host_limit_ceiling)

    async def start(self) -> None:
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if s.parse_workers > 0:
            # spawn, not fork: the frontier and store threads must not be copied mid-lock.
            self._parse_pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=s.parse_workers, mp_context=multiprocessing.get_context("spawn")
            )
        else:
            self._parse_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")
        self.frontier = await self._frontier_thread.call(
            Frontier, self.data_dir / "frontier.sqlite3", lease_timeout_s=s.lease_timeout_s
        )
        self.store = await self._store_thread.call(
            Store, self.data_dir, node_id=self.node_id, warc_max_bytes=s.warc_max_bytes
        )
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
        for index in range(max(1, s.parse_workers) + 1):
            self._spawn(self._parse_loop(), f"parser-{index}")
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
            if self._returned:
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(returned=self._returned))
            await self._frontier_thread.call(self.frontier.close)
        if self.store is not None:
            await self._store_thread.call(self.store.close)
        await self.cluster.close()
        await self.fetcher.close()
        if self._parse_pool is not None:
            self._parse_pool.shutdown(wait=True, cancel_futures=True)
        self._frontier_thread.shutdown()
        self._store_thread.shutdown()
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
            result = await self._frontier_thread.call(_take_in, self.frontier, mine, forward, seen, replicas)
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

    # ----------------------------------------------------------------- dispatch
    async def _dispatch_loop(self) -> None:
        # The dispatcher never waits on the disk: leases come from per-host buffers that the
        # refill task keeps topped up in batched frontier calls.
        while not self._stopping:
            await self._global_slots.acquire()
            handed_off = False
            try:
                state = await self._next_host()
                if state is not None:
                    handed_off = self._dispatch(state)
            finally:
                if not handed_off:
                    self._global_slots.release()

    async def _next_host(self) -> HostState | None:
        while not self._stopping:
            now = self._clock()
            if now < self._hold_until:
                await asyncio.sleep(min(0.1, self._hold_until - now))
                continue
            blocked = self.admission.blocked(now)
            if blocked is not None:
                await self._wait_admission(blocked)
                continue
            # No await from here to the dispatch: what admission allowed still holds.
            state = self.scheduler.next_host(now)
            if state is not None:
                return state
            wake = self.scheduler.next_wakeup()
            timeout = 1.0 if wake is None else min(max(wake - now, 0.001), 1.0)
            self._work.clear()
            try:
                await asyncio.wait_for(self._work.wait(), timeout)
            except TimeoutError:
                pass
        return None

    def _dispatch(self, state: HostState) -> bool:
        """Start one request for the host; True when a task now owns the global slot."""
        now = self._clock()
        try:
            if not self.cluster.serves(state.host):
                self._release_host(state)
                return False
            if state.robots_state is Robots.UNKNOWN:
                state.robots_state = Robots.FETCHING
                permit = self.admission.acquire(state)
                self._start_task(self._fetch_robots(state, permit), f"robots:{state.host}")
                return True
            if not state.buffer:
                self._request_refill(state)
                return False
            lease = state.buffer.popleft()
            if state.robots is not None and not state.robots.allowed(lease.url):
                self.counters["robots_disallowed"] += 1
                self._hand_to_store_nowait(PageResult(lease=lease, fetch=None, signal=None, final_failure=True))
                return False
            permit = self.admission.acquire(state)
            state.next_eligible = now + state.crawl_delay
            self._start_task(self._fetch_page(state, lease, permit), f"fetch:{state.host}")
            if len(state.buffer) < state.limiter.limit and state.queued > 0:
                self._request_refill(state)
            return True
        finally:
            self.scheduler.settle(state, now)

    def _release_host(self, state: HostState) -> None:
        """Stop crawling a host this node no longer owns: buffered leases go back (unattempted)
        and the cluster's sweep hands the host's queue to its owner."""
        if state.buffer:
            self._returned_now.extend(lease.id for lease in state.buffer)
            state.buffer.clear()
            self._refill_event.set()
        state.queued = 0

    def _membership_changed(self) -> None:
        now = self._clock()
        for state in self.scheduler:
            if not self.cluster.serves(state.host):
                self._release_host(state)
                self.scheduler.settle(state, now)
        self._resync_needed.set()
        self._work.set()

    async def _resync_loop(self) -> None:
        """Re-read per-host queue counts from the frontier. The scheduler's counts are
        estimates kept in step with what passes through it; rows can reappear behind its back
        (a host given back to this node after a member left, expired leases), and a host
        whose count says zero would never be looked at again."""
        while True:
            try:
                await asyncio.wait_for(self._resync_needed.wait(), timeout=5.0)
            except TimeoutError:
                pass
            self._resync_needed.clear()
            records = await self._frontier_thread.call(lambda: list(self.frontier.hosts_with_work()))
            now = self._clock()
            for record in records:
                if not self.cluster.serves(record.host):
                    continue
                state = self.scheduler.host(record.host)
                missing = record.queued - state.queued
                if missing > 0 and not state.refilling:
                    self.scheduler.add_work(record.host, missing, now)
                    self._work.set()

    def _request_refill(self, state: HostState) -> None:
        if not state.refilling and state.queued > 0:
            state.refilling = True
            self._refill_wanted[state.host] = state
            self._refill_event.set()
        elif not state.refilling:
            state.queued = 0  # nothing left: settle() will mark the host idle

    async def _refill_loop(self) -> None:
        """Lease URLs for many hosts in one frontier round trip."""
        while True:
            await self._refill_event.wait()
            self._refill_event.clear()
            if self._returned_now:
                returned, self._returned_now = self._returned_now, []
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(returned=returned))
                self.cluster.request_sweep()
                self._resync_needed.set()
            await self._hold_leasing()
            wanted = list(self._refill_wanted.values())[:REFILL_HOSTS]
            for state in wanted:
                del self._refill_wanted[state.host]
            if not wanted:
                continue
            requests = [(state.host, self._lease_size(state)) for state in wanted]
            results = await self._frontier_thread.call(_lease_many, self.frontier, requests)
            now = self._clock()
            for state, (leases, next_ready) in zip(wanted, results):
                state.refilling = False
                state.queued = max(0, state.queued - len(leases))
                state.buffer.extend(leases)
                if not leases:
                    if next_ready is not None:
                        self.scheduler.delay(state, next_ready, now)
                    elif not state.buffer:
                        state.queued = 0
                self.scheduler.refilled(state, now)
            if self._refill_wanted:
                self._refill_event.set()
            self._work.set()

    @staticmethod
    def _lease_size(state: HostState) -> int:
        if state.crawl_delay > 0:
            return 1 if not state.buffer else 0
        # Enough for the next round of the host's window, never more than two windows: a
        # leased URL sitting in memory is a URL another node cannot take over.
        return max(1, 2 * state.limiter.limit - len(state.buffer))

    def _start_task(self, coro, name: str) -> None:
        self.in_flight += 1
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._fetch_tasks.add(task)
        task.add_done_callback(self._fetch_task_done)

    def _fetch_task_done(self, task: asyncio.Task) -> None:
        self._fetch_tasks.discard(task)
        self.in_flight -= 1
        self._global_slots.release()
        self._work.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("fetch task %s failed", task.get_name(), exc_info=task.exception())
            self.fatal_error = task.exception()
            self.request_stop()

    def _hand_to_store_nowait(self, item: PageResult) -> None:
        # Used from the dispatcher, which must not block on the store: a tiny side task waits.
        self._spawn(self.store_queue.put(item), "store-put")

    # ----------------------------------------------------------------- fetch
    async def _fetch_robots(self, state: HostState, permit: Permit) -> None:
        url = f"http://{state.host}/robots.txt"
        try:
            if self.admission.ip_gates is not None and state.ip_gate is None:
                if not await self._bind_ip_gate(state, permit):
                    return
            result = await self.fetcher.fetch(url, max_body_bytes=self.settings.robots_max_bytes)
        except asyncio.CancelledError:
            state.robots_state = Robots.UNKNOWN
            self._release(state, permit, Outcome.NEUTRAL, None, self._clock())
            self.scheduler.on_release(state, self._clock())
            raise
        now = self._clock()
        signal = self._classify(result, now)
        if signal.api is not ApiSignal.NONE:
            # The API refused it: robots.txt was never asked for. Ask again when it allows.
            state.robots_state = Robots.UNKNOWN
            self._release(state, permit, Outcome.NEUTRAL, signal, now)
            self.counters[f"api_{signal.api.value}"] += 1
            self.scheduler.delay(state, now + self._api_retry_delay(signal), now)
            self.scheduler.on_release(state, now)
            return
        self.counters["robots_fetched"] += 1
        if result.error == ErrorKind.NOT_ALLOWED:
            # The host itself may not be fetched; its pages will fail the same way, for good.
            verdict = RobotsVerdict.ALLOW_ALL
        else:
            verdict = verdict_for_status(result.status if result.error is None or result.truncated else None)
        agent = self.settings.robots_agent
        if verdict is RobotsVerdict.PARSE:
            state.robots = RobotsRules.parse(result.body, agent)
            state.robots_state = Robots.READY
        elif verdict is RobotsVerdict.ALLOW_ALL:
            state.robots = None
            state.robots_state = Robots.READY
        else:
            # RFC 9309: an unreachable robots.txt means "assume disallowed"; ask again later.
            state.robots_state = Robots.UNKNOWN
        self._release(state, permit, signal.host, signal, now)
        if state.robots_state is Robots.READY:
            state.crawl_delay = min(state.robots.crawl_delay() if state.robots else 0.0, self.settings.max_crawl_delay_s)
            self.scheduler.delay(state, now + state.crawl_delay, now)
        else:
            self.scheduler.delay(state, now + (signal.retry_after_s or self.settings.robots_error_retry_s), now)
        self.scheduler.on_release(state, now)

    async def _fetch_page(self, state: HostState, lease: Lease, permit: Permit) -> None:
        try:
            result = await self.fetcher.fetch(lease.url)
        except asyncio.CancelledError:
            self._release(state, permit, Outcome.NEUTRAL, None, self._clock())
            self._returned.append(lease.id)
            self.scheduler.on_release(state, self._clock())
            raise
        now = self._clock()
        signal = self._classify(result, now)
        cuts_before = state.limiter.decreases
        self._release(state, permit, self._host_outcome(state, signal, result), signal, now)
        if state.crawl_delay:
            # Crawl-delay counts from the end of the previous request, so a slow response never
            # lets two requests overlap or arrive closer together than the site asked for.
            self.scheduler.delay(state, now + state.crawl_delay, now)
        self._route_signal(state, signal, now, status=result.status, cut=state.limiter.decreases > cuts_before)
        self.scheduler.on_release(state, now)
        page = PageResult(lease=lease, fetch=result, signal=signal)
        self._decide_retry(state, page, now)
        if signal.outcome == "redirect":
            page.links = self._redirect_target(lease, result)
        # Counted until the store has written it: the memory pressure source reads this.
        self.held_bytes += len(result.body)
        if signal.outcome == "ok" and result.is_html and result.body:
            await self.parse_queue.put(page)
        else:
            await self.store_queue.put(page)

    def _route_signal(self, state: HostState, signal: Signal, now: float, *, status: int | None = None,
                      cut: bool = False) -> None:
        """The host's part of a response (its limiter has already learned from it): the
        next-eligible time for Retry-After and host backoff, and the host's counters."""
        self.outcomes[signal.outcome] += 1
        if signal.api is not ApiSignal.NONE:
            # The API's answer, not the host's: the host saw nothing (rule 5).
            self.counters[f"api_{signal.api.value}"] += 1
            return
        state.fetched += 1
        if signal.outcome == "throttled":
            state.throttled += 1
            if signal.retry_after_s is not None:  # "Retry-After: 0" is an answer too
                self.scheduler.delay(state, now + min(signal.retry_after_s, self.settings.retry_after_cap_s), now)
            elif status == 429:
                self._host_backoff(state, now, cut=cut)
        elif not signal.success:
            state.errors += 1
        else:
            state.throttle_streak = 0
            if state.backoff is not None:
                state.backoff.on_success(now)

    def _host_backoff(self, state: HostState, now: float, *, cut: bool) -> None:
        """A 429 without Retry-After. AIMD has already cut the limit; a host that keeps answering
        so (``host_backoff_after`` cuts in a row, no success between) is paused as a whole,
        longer each time (backoff.HostBackoff), until it has been quiet for a while."""
        if cut:
            state.throttle_streak += 1
        s = self.settings
        if state.throttle_streak < s.host_backoff_after:
            return
        if state.backoff is None:
            state.backoff = HostBackoff(initial_s=s.host_backoff_initial_s, cap_s=s.host_backoff_cap_s,
                                        forgive_after_s=s.host_backoff_forgive_s, rng=self._backoff_rng)
        until = state.backoff.on_throttle(now)
        state.throttle_streak = 0
        state.backoffs += 1
        self.counters["host_backoffs"] += 1
        self.scheduler.delay(state, until, now)
        log.info("%s keeps answering 429 without Retry-After: paused for %.1f s (level %d)",
                 state.host, until - now, state.backoff.level)

    def _classify(self, result: FetchResult, now: float) -> Signal:
        return classify(result, now=now, api_limit_header=self.settings.api_limit_header,
                        through_api=self.settings.proxy is not None)

    def _host_outcome(self, state: HostState, signal: Signal, result: FetchResult) -> Outcome:
        """What the host's limiter learns: the signal's verdict, except that a success far
        slower than the host's own normal is a slow-down signal too (rule 5)."""
        factor = self.settings.latency_rise_factor
        if signal.host is not Outcome.SUCCESS or not factor or result.headers_s is None:
            return signal.host
        if state.latency is None:
            state.latency = LatencyBaseline(factor=factor, min_rise_s=self.settings.latency_rise_min_s)
        if state.latency.observe(result.headers_s):
            state.latency_rises += 1
            return Outcome.THROTTLED
        return Outcome.SUCCESS

    def _api_retry_delay(self, signal: Signal) -> float:
        """When to try a URL again that the API refused: its Retry-After (capped), jittered."""
        asked = min(signal.retry_after_s or 0.0, self.settings.retry_after_cap_s)
        return max(asked, self.retry_policy.backoff_s(1))

    def _release(self, state: HostState, permit: Permit, outcome: Outcome, signal: Signal | None,
                 now: float) -> None:
        """Give back every slot of a request (host, API, IP); hosts that waited for the IP
        gate are re-placed. The caller re-places ``state`` itself, after its delays."""
        woken, paused = self.admission.release(state, permit, outcome, signal, now)
        for other in woken:
            if other is not state:
                self.scheduler.on_release(other, now)
        if paused:
            self._api_paused()

    def _decide_retry(self, state: HostState, page: PageResult, now: float) -> None:
        signal, result = page.signal, page.fetch
        if signal.api is not ApiSignal.NONE:
            # Refused by the API before it reached the site: again later, budget untouched.
            page.retry_at = now + self._api_retry_delay(signal)
            page.postponed = True
            state.api_refused += 1
            self.counters["api_postponed"] += 1
            return
        if signal.success or signal.outcome == "http_error" and result.status not in (408, 429):
            return
        decision = self.retry_policy.decide(
            attempt=page.lease.attempts, status=result.status, error=signal.error, retry_after_s=signal.retry_after_s
        )
        if decision.retry:
            page.retry_at = now + decision.delay_s
            state.retries += 1
            self.counters["retries"] += 1
        else:
            page.final_failure = True
            self.counters[f"gave_up_{decision.reason}"] += 1

    def _redirect_target(self, lease: Lease, result: FetchResult) -> list[UrlEntry]:
        location = result.header("Location")
        if not location:
            return []
        try:
            target = normalize_url(location, base=lease.url)
        except InvalidURL:
            return []
        # A redirect is not a step deeper into the site; keep the source's depth and priority.
        if self.scope.check(target, lease.depth) is not None:
            return []
        return [UrlEntry(url=target, host=host_of(target), depth=lease.depth, priority=lease.priority)]

    # ----------------------------------------------------------------- parse
    async def _parse_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.parse_queue.get()]
            batch_bytes = len(batch[0].fetch.body)
            # Bounded in bytes too: a batch is copied to the parser process whole.
            while len(batch) < PARSE_BATCH and batch_bytes < PARSE_BATCH_BYTES and not self.parse_queue.empty():
                batch.append(self.parse_queue.get_nowait())
                batch_bytes += len(batch[-1].fetch.body)
            self._busy_parsers += 1
            try:
                results = await loop.run_in_executor(
                    self._parse_pool, parse_pages, [(page.fetch.body, page.lease.url) for page in batch],
                    self.settings.max_links_per_page, self.settings.parse_delay_s,
                )
                for page, links in zip(batch, results):
                    if isinstance(links, str):
                        log.warning("could not parse %s: %s", page.lease.url, links)
                        self.counters["parse_errors"] += 1
                        links = []
                    page.links = self._scoped_links(page.lease, links)
                    await self.store_queue.put(page)
            finally:
                self._busy_parsers -= 1

    def _scoped_links(self, lease: Lease, links: list[str]) -> list[UrlEntry]:
        depth = lease.depth + 1
        entries = []
        for url in links:
            if self.scope.check(url, depth) is None:
                entries.append(UrlEntry(url=url, host=host_of(url), depth=depth, priority=-depth))
        self.counters["links_discovered"] += len(links)
        return entries

    # ----------------------------------------------------------------- store
    async def _store_loop(self) -> None:
        while True:
            batch = [await self.store_queue.get()]
            self._store_busy = True
            try:
                while len(batch) < 256 and not self.store_queue.empty():
                    batch.append(self.store_queue.get_nowait())
                await self._commit(batch)
            finally:
                self._store_busy = False
                self.held_bytes -= sum(len(page.fetch.body) for page in batch if page.fetch is not None)

    async def _commit(self, pages: list[PageResult]) -> None:
        records = [self._record(page) for page in pages if page.fetch is not None]
        if records:
            await self._store_thread.call(self.store.write, records)
        frontier_batch = FrontierBatch()
        links: list[UrlEntry] = []
        for page in pages:
            if page.retry_at is not None:
                (frontier_batch.postponed if page.postponed else frontier_batch.retry).append(
                    (page.lease.id, page.retry_at))
            elif page.final_failure:
                frontier_batch.failed.append(page.lease.id)
            else:
                frontier_batch.done.append(page.lease.id)
            if page.retry_at is None and not self.cluster.is_single:
                successor = self.cluster.successor_for(page.lease.host)
                if successor is not None:
                    lease = page.lease
                    frontier_batch.replicate.append(
                        (successor, UrlEntry(lease.url, lease.host, lease.depth, lease.priority, lease.hops)))
            links.extend(page.links)
        if self.cluster.is_single:
            frontier_batch.add = links
        else:
            for entry in links:
                owner = self.cluster.route(entry.host)
                if owner is None:
                    frontier_batch.add.append(entry)
                else:
                    frontier_batch.forward.append((owner, entry))
            peers = {peer for peer, _ in frontier_batch.forward}
            if peers and self.cluster.outbox_full(peers):
                # A peer is not taking URLs as fast as we find them: wait here, which blocks
                # the store queue, then parsing, then fetching (rule 1), never grows a buffer.
                self.counters["outbox_blocked"] += 1
                await self.cluster.wait_for_outbox_space(peers)
        result = await self._frontier_thread.call(self.frontier.apply, frontier_batch)
        if frontier_batch.forward or frontier_batch.replicate:
            self.cluster.note_outboxed(Counter(peer for peer, _ in frontier_batch.forward + frontier_batch.replicate))
        self.counters["fetched"] += len(records)
        self.counters["pages_done"] += len(frontier_batch.done)
        self.counters["failed"] += len(frontier_batch.failed)
        now = self._clock()
        retried_hosts = Counter(page.lease.host for page in pages if page.retry_at is not None)
        for host, count in retried_hosts.items():
            self.scheduler.add_work(host, count, now)
        self._note_added(result.queued)
        self._work.set()

    def _record(self, page: PageResult) -> FetchRecord:
        fetch = page.fetch
        return FetchRecord(
            url=page.lease.url,
            host=page.lease.host,
            node_id=self.node_id,
            attempt=page.lease.attempts,
            fetched_at=fetch.started_at,
            outcome=page.signal.outcome,
            status=fetch.status,
            request_headers=fetch.request_headers,
            response_headers=fetch.headers,
            body=fetch.body if page.signal.outcome in ("ok", "redirect", "http_error", "throttled", "server_error") else b"",
            content_type=fetch.content_type,
            error=fetch.error_detail,
            remote_addr=fetch.remote_addr,
            elapsed_s=fetch.elapsed_s,
        )

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

    # ----------------------------------------------------------------- status
    async def frontier_totals(self) -> dict:
        return await self._frontier_thread.call(self.frontier.totals)

    async def status(self) -> dict:
        totals = await self.frontier_totals()
        idle = (
            totals["queued"] == 0 and totals["leased"] == 0 and totals.get("deferred", 0) == 0 and self.in_flight == 0
            and self._inbound_pending == 0 and self.parse_queue.empty() and self.store_queue.empty()
            and not self._busy_parsers and not self._store_busy
            and self.cluster.outbox_total() == 0 and not self._returned_now
        )
        uptime = time.monotonic() - self.started_at
        fetched = self.counters["fetched"]
        return {
            "node_id": self.node_id,
            "url": self.settings.advertise_url,
            "idle": idle,
            "stopping": self._stopping,
            "uptime_s": round(uptime, 3),
            "counters": {
                "fetched": fetched,
                "pages_done": self.counters["pages_done"],
                "failed": self.counters["failed"],
                "retries": self.counters["retries"],
                "retry_ratio": round(self.counters["retries"] / fetched, 4) if fetched else 0.0,
                "submitted": self.counters["submitted"],
                "rejected": self.counters["rejected"],
                "robots_disallowed": self.counters["robots_disallowed"],
                "links_discovered": self.counters["links_discovered"],
                "outcomes": dict(self.outcomes),
            },
            "rates": {"fetched_per_s": round(fetched / uptime, 2) if uptime > 0 else 0.0},
            "frontier": totals,
            "queues": self.queue_snapshot(totals),
            **self.pressure_status(totals),
            "hosts": [self.host_snapshot(state) for state in self.scheduler.busiest(20)],
            "members": self.cluster.members_status(),
            "cluster": {"counters": dict(self.cluster.counters), "events": self.cluster.events[-10:]},
        }

    def queue_snapshot(self, totals: dict) -> dict:
        return {
            "inbound": {"depth": self._inbound_pending, "capacity": self.settings.inbound_capacity,
                        "oldest_age_s": 0.0, "blocked_puts": self.counters["inbound_rejected_batches"]},
            "frontier": {"depth": totals.get("queued", 0),
                         "oldest_age_s": round(totals.get("oldest_queued_age_s") or 0.0, 3)},
            "fetch": {"depth": self.in_flight, "capacity": self.settings.global_inflight, "oldest_age_s": 0.0},
            "parse": self.parse_queue.snapshot(),
            "store": self.store_queue.snapshot(),
        }

    @staticmethod
    def host_snapshot(state: HostState) -> dict:
        return {
            "host": state.host,
            "in_flight": state.limiter.in_flight,
            "limit": state.limiter.limit,
            "limit_decreases": state.limiter.decreases,
            "queued": state.queued + len(state.buffer),
            "fetched": state.fetched,
            "throttled": state.throttled,
            "errors": state.errors,
            "retries": state.retries,
            "retry_ratio": round(state.retries / state.fetched, 4) if state.fetched else 0.0,
            "crawl_delay_s": state.crawl_delay,
            "throttle_point": state.limiter.throttle_point,
            "latency_baseline_ms": round(state.latency.baseline_s * 1000, 1) if state.latency else None,
            "latency_rises": state.latency_rises,
            "backoffs": state.backoffs,
            "backoff_level": state.backoff.level if state.backoff else 0,
            "api_refused": state.api_refused,
            "ip": state.ip_gate.address if state.ip_gate else None,
        }

    # ----------------------------------------------------------------- pressure (rules 5-8)
    def pressure_status(self, totals: dict) -> dict:
        """The status sections of flow control: admission, the API, shedding, per-IP gates,
        retries. Also read by the metrics collector."""
        now = self._clock()
        api = self.admission.api
        gates = self.admission.ip_gates
        shed_counts = dict(self.frontier.shed_counts) if self.frontier is not None else {}
        restored = shed_counts.pop("restored", 0)
        fetched = sum(state.fetched for state in self.scheduler)
        return {
            "admission": {**self.admission.snapshot(now), "held_bytes": self.held_bytes,
                          "held_bytes_limit": self.settings.pipeline_max_bytes},
            "api": api.snapshot(now) if api is not None else {"enabled": False, "paused": False},
            "shedding": {
                **self.shed_policy.snapshot(),
                "deferred_now": totals.get("deferred", 0),
                "deferred_total": sum(shed_counts.values()),
                "deferred_by_reason": shed_counts,
                "restored_total": restored,
                "cut_priority": self.frontier.shed_cut if self.frontier is not None else None,
            },
            "retries": {
                "total": self.counters["retries"],
                "host_attempts": fetched,
                "ratio": round(self.counters["retries"] / fetched, 4) if fetched else 0.0,
                "api_postponed": self.counters["api_postponed"],
                "host_backoffs": self.counters["host_backoffs"],
                "gave_up": {key[len("gave_up_"):]: n for key, n in self.counters.items() if key.startswith("gave_up_")},
            },
            "ip": {
                "enabled": gates is not None,
                "limit": gates.limit if gates else None,
                "shared_addresses": gates.shared() if gates else 0,
                "refusals": gates.refusals if gates else 0,
                "busiest": [{"ip": g.address, "in_flight": g.in_flight, "hosts": g.hosts} for g in gates.busiest(10)]
                if gates else [],
            },
        }

    async def _wait_admission(self, reason: str) -> None:
        """No new fetch may start, because of ``reason``: wait until that changes. One
        rejection is counted per wait however long it lasts, and its time is added up."""
        self.admission.stats.rejections[reason] += 1
        started = time.monotonic()
        try:
            while not self._stopping and self.admission.blocked(self._clock()) == reason:
                self._work.clear()
                try:
                    await asyncio.wait_for(self._work.wait(), 0.05)
                except TimeoutError:
                    pass
        finally:
            self.admission.stats.blocked_s[reason] += time.monotonic() - started

    async def _hold_leasing(self) -> None:
        """While the pipeline is under pressure (or the API paused), lease nothing more:
        the URLs stay in the frontier, where they cost no memory and another node could take
        them over, instead of waiting in this node's buffers."""
        reason = self.admission.hold_leasing(self._clock())
        if reason is None:
            return
        self.counters[f"lease_held_{reason}"] += 1
        if reason == API_QUOTA:
            # A lease round that was under way when the pause began has filled buffers since.
            returned = self._take_back_buffers()
            if returned:
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(returned=returned))
        while not self._stopping and self.admission.hold_leasing(self._clock()) is not None:
            await asyncio.sleep(0.05)

    def _api_paused(self) -> None:
        """The API's quota is spent: hand the buffered leases back, so a long pause neither
        holds URLs in memory nor lets their leases expire (an expired lease counts an attempt)."""
        self._returned_now.extend(self._take_back_buffers())
        self._refill_event.set()

    def _take_back_buffers(self) -> list[int]:
        """Empty every host's lease buffer; the ids go back to the frontier, unattempted."""
        returned: list[int] = []
        for state in self.scheduler:
            if state.buffer:
                returned.extend(lease.id for lease in state.buffer)
                state.queued += len(state.buffer)
                state.buffer.clear()
        return returned

    def resume_api(self) -> bool:
        """Resume fetching through the API now (POST /v1/resume); False if it was not paused."""
        api = self.admission.api
        resumed = api is not None and api.resume(self._clock(), by="POST /v1/resume")
        self._work.set()
        return resumed

    async def _bind_ip_gate(self, state: HostState, permit: Permit) -> bool:
        """First contact with a host on a direct fetch: find the gate of its address. If that
        gate is full, give the slots back; the host then waits on the gate like any request."""
        gate = await self.admission.ip_gates.gate_for(state.host)
        state.ip_gate = gate
        if gate is None or gate.admits(state):
            if gate is not None:
                gate.acquire()
                permit.ip_gate = gate
            return True
        state.robots_state = Robots.UNKNOWN
        now = self._clock()
        self._release(state, permit, Outcome.NEUTRAL, None, now)
        self.scheduler.on_release(state, now)
        return False

    async def _shed_loop(self) -> None:
        """Rule 7: defer the lowest-priority URLs while the queue stays over its high-water
        mark, and bring them back once it has drained (the policy is shedding.ShedPolicy)."""
        policy = self.shed_policy
        interval = min(1.0, max(0.05, policy.after_s / 4))
        while True:
            await asyncio.sleep(interval)
            totals = await self._frontier_thread.call(self.frontier.totals)
            action = policy.observe(queued=totals["queued"], deferred=totals["deferred"], now=time.monotonic())
            if action.defer:
                # Seeds and submitted URLs (SEED_PRIORITY) are never deferred.
                per_host = await self._frontier_thread.call(
                    self.frontier.defer_lowest, action.defer, below_priority=SEED_PRIORITY)
                for host, count in per_host.items():
                    state = self.scheduler.get(host)
                    if state is not None:
                        state.queued = max(0, state.queued - count)
                log.warning("load shedding: queue over %d for %.0f s; deferred %d lowest-priority URLs",
                            policy.high_water, policy.after_s, sum(per_host.values()))
            if not action.active and self.frontier.shed_cut is not None:
                await self._frontier_thread.call(self.frontier.stop_shedding)
            if action.restore:
                per_host = await self._frontier_thread.call(self.frontier.restore_deferred, action.restore)
                now = self._clock()
                for host, count in per_host.items():
                    self.scheduler.add_work(host, count, now)
                log.info("load shedding: restored %d deferred URLs", sum(per_host.values()))
                self._work.set()
