"""The store stage: WARC + crawl.log first, then one frontier transaction per batch that marks
leases done, routes discovered links (this node's frontier or a peer's outbox) and replicates
fetched URLs to the successor. A crash between the two re-fetches a page rather than losing it.

This is the one place where fetch outcomes reach the frontier. (Leases that were never
attempted go back through the lease keeper: node.leases.)
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler_node.config import StoreConfig
from crawler_node.core.adaptive_recrawl import Recrawler, http_date, payload_digest
from crawler_node.core.outcomes import SCOPE_OUTCOMES, FetchOutcome
from crawler_node.core.stats import Indexed, Stat, counter, stat
from crawler_node.core.urls import host_of
from crawler_node.core.verdict import RetryAction
from crawler_node.frontier import FrontierBatch, FrontierService, UrlEntry
from crawler_node.node.budget import HeldBytes
from crawler_node.node.hosts import HostTable
from crawler_node.node.queues import StageQueue
from crawler_node.node.stage_items import URLS_TURNED_AWAY, PageResult, Routes
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.store.worker import StoreWorker

log = logging.getLogger("crawler_node.store")

STORE_BATCH = 256  # pages per store write and frontier transaction, at most

# The outcomes whose body is archived: an answer of the site (not an error of ours).
# A body cut by the size cap, a timeout or a lost connection is archived as far as it came,
# marked WARC-Truncated (the fetcher says why in FetchResult.truncated); before the headers
# these have no status, and no WARC record.
_ARCHIVED = frozenset({FetchOutcome.OK, FetchOutcome.REDIRECT, FetchOutcome.NOT_MODIFIED, FetchOutcome.HTTP_ERROR,
                       FetchOutcome.THROTTLED,
                       FetchOutcome.SERVER_ERROR, FetchOutcome.TOO_LARGE, FetchOutcome.TIMEOUT,
                       FetchOutcome.CONNECTION, FetchOutcome.TOO_MANY_REDIRECTS, FetchOutcome.BLOCKED_CHALLENGE,
                       FetchOutcome.BLOCKED_CAPTCHA, FetchOutcome.BLOCKED_SOFT, FetchOutcome.LOGIN_WALL,
                       FetchOutcome.REFUSED})





class OutboxGate(Protocol):
    def full(self, peers: Collection[str]) -> bool: ...
    async def wait_for_space(self, peers: Collection[str]) -> None: ...
    def note_outboxed(self, counts: Mapping[str, int]) -> None: ...


@dataclass(slots=True)
class StoreCounts:
    fetched: int = 0  # fetch attempts stored: the frontier's URLs a request was sent for
    pages_done: int = 0
    failed: int = 0
    cookie_refetches: int = 0
    outbox_blocked: int = 0  # batches that waited for a peer's outbox to have room
    unfetched: int = 0  # leases ended without a request (robots.txt, a dropped host)
    robots_records: int = 0
    recrawl_checks: int = 0  # recrawls of a page with a history: did it change?
    recrawl_changes: int = 0  # ... and it did (a new payload digest)


def _turned_away(reason: FetchOutcome) -> Mapping[str, Stat]:
    return stat(URLS_TURNED_AWAY, at={"reason": reason})


@dataclass(frozen=True, slots=True)
class StoreSnapshot(Indexed):
    """The store stage's part of the status's ``counters``."""

    fetched: int = field(metadata=counter("crawler_fetched", "Fetch attempts written to the store"))
    pages_done: int
    failed: int
    # redirects back into their own chain with cookies on: that URL fetched once more
    cookie_refetches: int = field(metadata=counter(
        "crawler_cookie_refetches",
        "URLs fetched once more after a redirect back into their own chain (a cookie check)"))
    outbox_blocked: int = field(metadata=stat(json=False))
    unfetched: int = field(metadata=stat(json=False))
    robots_records: int = field(metadata=stat(json=False))
    # URLs turned away by the scope or a trap guard, per outcome (a crawl.log line each)
    out_of_scope: int = field(metadata=_turned_away(FetchOutcome.OUT_OF_SCOPE))
    repeated_segments: int = field(metadata=_turned_away(FetchOutcome.REPEATED_SEGMENTS))
    path_too_deep: int = field(metadata=_turned_away(FetchOutcome.PATH_TOO_DEEP))
    too_many_query_params: int = field(metadata=_turned_away(FetchOutcome.TOO_MANY_QUERY_PARAMS))
    denied_url: int = field(metadata=_turned_away(FetchOutcome.DENIED_URL))
    host_page_cap: int = field(metadata=_turned_away(FetchOutcome.HOST_PAGE_CAP))  # past --max-pages-per-host
    calendar_trap: int = field(default=0, metadata=_turned_away(FetchOutcome.CALENDAR_TRAP))  # --max-future-years
    store_restarts: int = field(default=0, metadata=counter(
        "crawler_store_restarts", "Store processes replaced after they died or stopped answering"))
    # recrawls of a page with a history (--recrawl-after), and those that found a new payload
    # digest (a 304, or the same digest, is no change): core.adaptive_recrawl
    recrawl_checks: int = field(default=0, metadata=counter(
        "crawler_recrawl_checks", "Recrawls of a page fetched before: did it change?"))
    recrawl_changes: int = field(default=0, metadata=counter(
        "crawler_recrawl_changes", "Recrawls that found a new payload (a 304 or the same digest is no change)"))


class StoreStage:
    name = "store"  # the reason admission reports while the store is full or lagging

    def __init__(self, *, config: StoreConfig, worker: StoreWorker, frontier: FrontierService, hosts: HostTable,
                 router: Routes, outboxes: OutboxGate, held: HeldBytes, node_id: str, taken: Wakeup,
                 clock: Callable[[], float], recrawl: Recrawler | None = None) -> None:
        """``recrawl``: when a URL done with an answer of its site is due again (None: never);
        ``config``: the queue's bound (``store_queue``) and when the store lags (``store_lag_s``)."""
        self._worker = worker
        self._frontier = frontier
        self._hosts = hosts
        self._router = router
        self._outboxes = outboxes
        self._held = held
        self._node_id = node_id
        self._lag_s = config.store_lag_s
        self._clock = clock
        self._recrawler = recrawl
        self._idle = taken
        self.queue: StageQueue[PageResult] = StageQueue("store", config.store_queue, taken=taken)
        self._busy = False
        # Wall-clock time of the last commit of fetch attempts (store and frontier): when a
        # crawl ended, or since when a node with work has made no progress.
        self.last_stored_at: float | None = None
        self.counters = StoreCounts()
        # The Python API's hand-over (embedded.Crawl): awaited after each batch is committed, so
        # a slow consumer holds this stage, and behind it the pipeline (rule 1). None: none.
        self.deliver: Callable[[list[PageResult]], Awaitable[None]] | None = None
        self.turned_away: Counter[FetchOutcome] = Counter()  # URLs the scope or a trap guard ended, by outcome

    # ----------------------------------------------------------------- questions
    def needs_backout(self) -> bool:
        queue = self.queue
        return queue.full() or queue.oldest_age_s() > self._lag_s

    def idle(self) -> bool:
        return self.queue.empty() and not self._busy

    async def put(self, page: PageResult) -> None:
        await self.queue.put(page)

    def snapshot(self) -> StoreSnapshot:
        counters, turned_away = self.counters, self.turned_away
        return StoreSnapshot(
            fetched=counters.fetched, pages_done=counters.pages_done, failed=counters.failed,
            cookie_refetches=counters.cookie_refetches, outbox_blocked=counters.outbox_blocked,
            unfetched=counters.unfetched, robots_records=counters.robots_records,
            out_of_scope=turned_away[FetchOutcome.OUT_OF_SCOPE],
            repeated_segments=turned_away[FetchOutcome.REPEATED_SEGMENTS],
            path_too_deep=turned_away[FetchOutcome.PATH_TOO_DEEP],
            too_many_query_params=turned_away[FetchOutcome.TOO_MANY_QUERY_PARAMS],
            denied_url=turned_away[FetchOutcome.DENIED_URL], host_page_cap=turned_away[FetchOutcome.HOST_PAGE_CAP],
            calendar_trap=turned_away[FetchOutcome.CALENDAR_TRAP], store_restarts=self._worker.restarts,
            recrawl_checks=counters.recrawl_checks, recrawl_changes=counters.recrawl_changes)

    # ----------------------------------------------------------------- lifecycle
    async def start(self, supervisor: Supervisor) -> None:
        await self._worker.start()
        supervisor.stage("store", self._store_loop())
        worker = self._worker
        supervisor.recurring("store-liveness", lambda: worker.watch(time.monotonic()),
                             every_s=max(0.25, worker.deadline_s / 4))

    async def close(self, *, write_nothing: bool = False) -> None:
        """``write_nothing``: the disk is full; nothing more is written (store.worker)."""
        await self._worker.close(write_nothing=write_nothing)

    # ----------------------------------------------------------------- the loop
    async def _store_loop(self) -> None:
        queue = self.queue
        while True:
            batch = [await queue.get()]
            self._busy = True
            try:
                while len(batch) < STORE_BATCH and not queue.empty():
                    batch.append(queue.get_nowait())
                await self._commit(batch)
            finally:
                self._busy = False
                self._held.release(sum(len(page.fetch.body) for page in batch))
                self._idle.notify()

    async def _commit(self, pages: list[PageResult]) -> None:
        rows = [self._record(page) for page in pages]
        for page in pages:
            if page.rejected:
                rows += self._rejected(page)
        await self._worker.write(rows)
        batch, retried = self._outcomes(pages)
        self._route_links(batch, pages)
        peers = {peer for peer, _ in batch.forward}
        if peers and self._outboxes.full(peers):
            # A peer is not taking URLs as fast as we find them: wait here, which blocks the
            # store queue, then parsing, then fetching (rule 1), and never grows a buffer.
            self.counters.outbox_blocked += 1
            await self._outboxes.wait_for_space(peers)
        result = await self._frontier.apply(batch)
        if result.capped:
            # Known only now: their lines follow the commit (a crash in between loses the lines
            # of URLs that were never queued, nothing else).
            await self.log_capped(result.capped)
        outboxed = Counter(peer for peer, _ in batch.forward + batch.replicate)
        if batch.successors:  # the replicas of what was queued (Frontier.apply)
            outboxed.update(peer for entry in result.accepted if (peer := batch.successors.get(entry.host)))
        if outboxed:
            self._outboxes.note_outboxed(outboxed)
        counters = self.counters
        for page in pages:  # fetched: the frontier's URLs a request was sent for (it has an answer or an error)
            fetch = page.fetch
            if page.kind == "robots":
                counters.robots_records += 1
            elif fetch.status is None and fetch.error is None:
                counters.unfetched += 1
            else:
                counters.fetched += 1
        counters.pages_done += len(batch.done)
        counters.failed += len(batch.failed)
        self.last_stored_at = time.time()
        now = self._clock()
        if result.refetched:
            retried.update(result.refetched)
            self.counters.cookie_refetches += sum(result.refetched.values())
        for host, count in retried.items():
            self._hosts.add_work(host, count, now)
        self._hosts.add_queued(result, now)
        if self.deliver is not None:
            await self.deliver(pages)

    def _outcomes(self, pages: list[PageResult]) -> tuple[FrontierBatch, Counter[str]]:
        batch = FrontierBatch()
        retried: Counter[str] = Counter()
        router = self._router
        single = router.is_single
        recrawl, wall = self._recrawler, time.time()
        for page in pages:
            if page.kind == "robots":
                continue  # archived and logged; no lease of its own to finish
            verdict, lease = page.verdict, page.lease
            action = verdict.retry
            if action is RetryAction.DONE:
                batch.done.append(lease.id)
                if recrawl is not None and page.fetch.status is not None:
                    self._schedule(batch, recrawl, page, wall)
            elif action is RetryAction.GIVE_UP:
                batch.failed.append(lease.id)
            else:
                assert verdict.retry_at is not None
                (batch.postponed if action is RetryAction.POSTPONE else batch.retry).append(
                    (lease.id, verdict.retry_at))
                retried[lease.host] += 1
                continue
            if page.refetch is not None and (single or router.route(host_of(page.refetch)) is None):
                batch.refetch.append(page.refetch)  # after its done row, in the same transaction
            if not single:
                successor = router.successor_for(lease.host)
                if successor is not None:
                    batch.replicate.append(
                        (successor, UrlEntry(lease.url, lease.host, lease.depth, lease.priority, lease.hops,
                                             lease.redirects, lease.via)))
                    politeness = self._hosts.politeness_to_send(lease.host, wall)
                    if politeness is not None:
                        batch.politeness[lease.host] = politeness
        return batch, retried

    def _schedule(self, batch: FrontierBatch, recrawl: Recrawler, page: PageResult, wall: float) -> None:
        """The page's next visit, and its history, into ``batch``. A 304 is no change; a body
        is hashed here, on the loop: BLAKE2b reads ~1 GB/s, a millisecond for a 1 MB page."""
        fetch, lease = page.fetch, page.lease
        digest = None if fetch.status == 304 else payload_digest(fetch.body)
        visit = recrawl.schedule(lease.host, lease.url, lease.history, digest, wall,
                                 http_date(fetch.header("Last-Modified")))
        if visit is None:
            return
        batch.recrawl.append((lease.id, visit.due_at, *_validators(page)))
        batch.histories[lease.id] = visit.history
        counters = self.counters
        counters.recrawl_checks += lease.history is not None
        counters.recrawl_changes += visit.changed

    def _route_links(self, batch: FrontierBatch, pages: list[PageResult]) -> None:
        if self._router.is_single:
            for page in pages:
                batch.add.extend(page.links)
            return
        route, successor_for = self._router.route, self._router.successor_for
        successors = batch.successors  # of the hosts kept here: what is queued of them is replicated there
        for page in pages:
            for entry in page.links:
                owner = route(entry.host)
                if owner is None:
                    batch.add.append(entry)
                    if entry.host not in successors and (successor := successor_for(entry.host)) is not None:
                        successors[entry.host] = successor
                else:
                    batch.forward.append((owner, entry))

    async def log_capped(self, entries: list[UrlEntry]) -> None:
        """A crawl.log line for each URL the frontier turned away at its host's page cap (from
        this stage's batches, or from the intake: seeds, submitted and forwarded URLs)."""
        outcome = FetchOutcome.HOST_PAGE_CAP
        now = time.time()
        self.turned_away[outcome] += len(entries)
        await self._worker.write([self._unfetched_row(entry.url, outcome, entry.depth, entry.via, now)
                                  for entry in entries])

    def _rejected(self, page: PageResult) -> list[tuple[Any, ...]]:
        """A crawl.log line (no WARC record) per link (or redirect target) of ``page`` that
        the scope or a trap guard turned away, with its outcome, counted per outcome."""
        now, via, turned_away, rows = time.time(), page.lease.url, self.turned_away, []
        for url, why, depth in page.rejected:
            outcome = why.outcome
            if outcome is not None:
                turned_away[outcome] += 1
                rows.append(self._unfetched_row(url, outcome, depth, via, now))
        return rows

    def _unfetched_row(self, url: str, outcome: FetchOutcome, depth: int, via: str | None,
                       now: float) -> tuple[Any, ...]:
        """A FetchRecord tuple (see _record) for a URL that ends without a request."""
        return (url, host_of(url), self._node_id, 0, now, outcome.value, None, [], [], b"", None,
                SCOPE_OUTCOMES[outcome], None, 0.0, None, None, False, "page", None, depth, via, None, [], 0)

    def _record(self, page: PageResult) -> tuple[Any, ...]:
        """The page's FetchRecord as the tuple of its fields in order: the store process makes
        the record (store.worker.StoreWorker.write), the loop only a tuple, which also pickles
        without a call back into Python (the outcome as its plain string value, too)."""
        fetch, lease = page.fetch, page.lease
        outcome = page.verdict.signal.outcome
        body = fetch.body if outcome in _ARCHIVED else b""
        refusal = page.verdict.refusal
        return (lease.url, lease.host, self._node_id, lease.attempts, fetch.started_at, outcome.value, fetch.status,
                fetch.request_headers, fetch.headers, body, fetch.content_type, fetch.error_detail,
                fetch.remote_addr, fetch.elapsed_s,
                fetch.header("Location") if outcome is FetchOutcome.REDIRECT or
                outcome is FetchOutcome.TOO_MANY_REDIRECTS else None,
                fetch.truncated, page.parse_truncated, page.kind, fetch.status_line, lease.depth,
                lease.via, page.outlinks, page.items, lease.visits,
                None if refusal is None else f"{refusal.kind}: {refusal.evidence}")


def _validators(page: PageResult) -> tuple[str | None, str | None]:
    """(ETag, Last-Modified) for the URL's next visit: the answer's, or, for a 304 that did
    not repeat them, the ones the request was made with."""
    fetch, lease = page.fetch, page.lease
    etag, last_modified = fetch.header("ETag"), fetch.header("Last-Modified")
    if fetch.status == 304:
        return etag or lease.etag, last_modified or lease.last_modified
    return etag, last_modified
