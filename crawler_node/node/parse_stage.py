"""The parse stage: batches of pages to the parser workers, which return the links in scope
(of an HTML page, or the URLs of a sitemap: see parse.parser_worker.parse_page).

A parser process that dies (killed for memory, or crashed by a page) is replaced, and the
batches it held are parsed again one page at a time on a worker of their own: a page that
kills that one too is the culprit and is stored without links; every other page keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from crawler_node.config import NO_TEST_HOOKS, ParseConfig, TestHooks
from crawler_node.core.outcomes import Rejection
from crawler_node.core.restart_budget import RestartBudget
from crawler_node.core.scope import Scope
from crawler_node.core.stats import Indexed, counter, stat
from crawler_node.frontier import UrlEntry
from crawler_node.node.fetch_stage import NextStage
from crawler_node.node.queues import StageQueue
from crawler_node.node.robots_txt import may_be_text_sitemap
from crawler_node.node.stage_items import PageResult
from crawler_node.parse.parser_worker import PageReport, ParseAnswer, ParseJob, new_context, parse_pages
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.runtime.workers import ProcessWorker, ThreadWorker, WorkerDied, make_worker, process_state

log = logging.getLogger("crawler_node.parse")

BATCHES_PER_PARSER = 4  # in flight per parser: one parsing, the next ones already in its pipe
# Pages per round trip to a parser process. 32 rather than 16: half the pipe writes and answers
# for the event loop, about +5% pages/s in bench/throughput.py (3 alternating rounds).
PARSE_BATCH = 32
PARSE_BATCH_BYTES = 4_000_000  # ... unless they are big: then fewer
PARSER_DIED = "the parser process died on this page"

Parser = ProcessWorker | ThreadWorker


@dataclass(slots=True)
class ParseCounts:
    links_discovered: int = 0
    parse_truncated: int = 0
    sitemaps: int = 0
    sitemap_urls: int = 0
    sitemaps_truncated: int = 0
    sitemap_errors: int = 0
    parse_errors: int = 0
    parser_restarts: int = 0
    items: int = 0
    pipeline_errors: int = 0
    pipeline_timeouts: int = 0


@dataclass(frozen=True, slots=True)
class ParseSnapshot(Indexed):
    """The parse stage's part of the status's ``counters``."""

    links_discovered: int = field(metadata=counter("crawler_links_discovered", "Links extracted from pages"))
    # pages whose links came from their first max_parse_bytes only
    parse_truncated: int = field(metadata=counter("crawler_parse_truncated",
                                                  "Pages whose links were read from max_parse_bytes only"))
    sitemaps: int = field(metadata=counter("crawler_sitemaps", "Sitemap files read"))
    sitemap_urls: int = field(metadata=counter("crawler_sitemap_urls", "URLs listed by the sitemaps read"))
    sitemaps_truncated: int = field(metadata=stat(json=False))
    sitemap_errors: int
    parse_errors: int = field(metadata=counter("crawler_parse_errors",
                                               "HTML pages stored without links: unparsable, or fatal to the parser"))
    parser_restarts: int = field(metadata=counter("crawler_parser_restarts",
                                                  "Parser processes replaced after they died"))
    items: int = field(metadata=counter("crawler_items", "Items the pipelines made"))  # made by the pipelines
    pipeline_errors: int = field(metadata=counter("crawler_pipeline_errors",
                                                  "Pipeline runs that raised or returned what cannot be stored"))
    pipeline_timeouts: int = field(metadata=counter("crawler_pipeline_timeouts",
                                                    "Pipeline runs stopped at --pipeline-budget-s"))
    busy_batches: int = field(metadata=stat(json=False))
    parser_pids: tuple[int | None, ...] = field(metadata=stat(json=False))


class ParseStage:
    name = "parse"  # the reason admission reports while the queue is full

    def __init__(self, *, config: ParseConfig, scope: Scope, store: NextStage, ring_generation: Callable[[], int],
                 taken: Wakeup, hooks: TestHooks = NO_TEST_HOOKS) -> None:
        """``ring_generation``: the cluster's membership version, which tells the parsers when to
        hand links over again; ``taken`` is notified whenever a page leaves the queue or a batch
        is done; ``hooks``: faults the tests stage (see parse.parser_worker.ParseContext). From
        ``config``: ``parse_workers``, parser processes (0: one thread in this process);
        ``read_sitemaps`` False, a page that is not HTML goes to the store unread;
        ``warc_metadata``, every HTML page's links come back for its WARC metadata record;
        ``pipelines``, the user's pipeline specs (pipelines.loader), run in the parsers on
        every HTML page, each stopped after ``pipeline_budget_s`` on a page."""
        self._with_meta = bool(config.pipelines)
        self._context = partial(new_context, pipeline_specs=config.pipelines,
                                pipeline_budget_s=config.pipeline_budget_s, scope=scope,
                                max_links=config.max_links_per_page, delay_s=hooks.parse_delay_s,
                                outlinks=config.warc_metadata, crash_url=hooks.parse_crash_url,
                                max_parse_bytes=config.max_parse_bytes, sitemap_max_urls=config.sitemap_max_urls,
                                sitemap_max_bytes=config.sitemap_max_bytes)
        self._read_sitemaps = config.read_sitemaps
        workers = config.parse_workers
        self._in_process = workers > 0
        self._nice = config.worker_nice
        self._store = store
        self._ring_generation = ring_generation
        self.queue: StageQueue[PageResult] = StageQueue("parse", config.parse_queue, taken=taken)
        self._parsers: list[Parser] = [self._new_parser(f"parse-{index}") for index in range(max(1, workers))]
        self._replacing = asyncio.Lock()
        self._budget = RestartBudget()
        self._spent: WorkerDied | None = None  # the death past the restart budget
        # A batch with pipelines may rightly take its pipelines' budgets, page after page: never
        # a reason to kill the parser.
        self._deadline_s = max(config.worker_deadline_s,
                               2 * PARSE_BATCH * config.pipeline_budget_s * len(config.pipelines))
        self._busy = 0
        self._idle = taken
        self.counters = ParseCounts()

    # ----------------------------------------------------------------- questions
    def needs_backout(self) -> bool:
        return self.queue.full()

    def idle(self) -> bool:
        return self.queue.empty() and not self._busy

    async def put(self, page: PageResult) -> None:
        """``page``: an HTML page, or a sitemap candidate (see FetchResult.may_be_sitemap)."""
        if not self._read_sitemaps and not page.fetch.is_html:
            await self._store.put(page)
            return
        await self.queue.put(page)

    def snapshot(self) -> ParseSnapshot:
        counters = self.counters
        return ParseSnapshot(
            links_discovered=counters.links_discovered, parse_truncated=counters.parse_truncated,
            sitemaps=counters.sitemaps, sitemap_urls=counters.sitemap_urls,
            sitemaps_truncated=counters.sitemaps_truncated,
            sitemap_errors=counters.sitemap_errors, parse_errors=counters.parse_errors,
            parser_restarts=counters.parser_restarts, items=counters.items, pipeline_errors=counters.pipeline_errors,
            pipeline_timeouts=counters.pipeline_timeouts, busy_batches=self._busy,
            parser_pids=tuple(parser.pid for parser in self._parsers))

    # ----------------------------------------------------------------- lifecycle
    async def start(self, supervisor: Supervisor) -> None:
        for parser in self._parsers:
            await parser.start()
        for index, parser in enumerate(self._parsers):
            for loop in range(BATCHES_PER_PARSER):
                supervisor.stage(f"{parser.name}-loop-{loop}", self._parse_loop(index))
        if self._in_process:
            supervisor.recurring("parse-liveness", lambda: self.watch(time.monotonic()),
                                 every_s=max(0.25, self._deadline_s / 4))

    async def close(self) -> None:
        for parser in self._parsers:
            await parser.close()

    def _new_parser(self, name: str) -> Parser:
        return make_worker(name, in_process=self._in_process, init=self._context, nice=self._nice)

    # ----------------------------------------------------------------- the loop
    async def _parse_loop(self, index: int) -> None:
        queue = self.queue
        while True:
            batch = [await queue.get()]
            batch_bytes = len(batch[0].fetch.body)
            # Bounded in bytes too: a batch is copied to the parser process whole.
            while len(batch) < PARSE_BATCH and batch_bytes < PARSE_BATCH_BYTES and not queue.empty():
                batch.append(queue.get_nowait())
                batch_bytes += len(batch[-1].fetch.body)
            self._busy += 1
            try:
                results = await self._parse(index, [_job(page, self._with_meta) for page in batch])
                self._attach_links(batch, results)
                for page in batch:
                    await self._store.put(page)
            finally:
                self._busy -= 1
                self._idle.notify()

    def _attach_links(self, batch: list[PageResult], results: list[ParseAnswer]) -> None:
        discovered = 0
        for page, parsed in zip(batch, results, strict=True):
            if isinstance(parsed, str):
                log.warning("could not parse %s: %s", page.lease.url, parsed)
                self.counters.parse_errors += 1
                continue
            if isinstance(parsed, PageReport):
                links, found, page.outlinks = parsed.links, parsed.found, parsed.outlinks
                self._note(page, parsed)
            else:
                links, found, page.outlinks = parsed
            depth, via = page.lease.depth + 1, page.lease.url
            page.links = [UrlEntry(url, host, depth, -depth, 0, 0, via) for url, host in links]
            discovered += found
        self.counters.links_discovered += discovered

    def _note(self, page: PageResult, report: PageReport) -> None:
        counters = self.counters
        page.parse_truncated = report.truncated is not None
        if report.rejected:
            depth = page.lease.depth + 1
            page.rejected = [(url, Rejection(why), depth) for url, why in report.rejected]
        if report.pipelines is not None:
            self._note_pipelines(page, report)
        if report.kind != "sitemap":
            if report.truncated:
                counters.parse_truncated += 1
            elif report.error:
                # An XML or gzip response that is no sitemap (nor well-formed XML): nothing to read.
                log.debug("%s is not a sitemap: %s", page.lease.url, report.error)
            return
        page.kind = "sitemap"
        counters.sitemaps += 1
        counters.sitemap_urls += report.found
        if report.truncated:
            counters.sitemaps_truncated += 1
            log.info("sitemap %s is over its limit (%s); read %d URLs of it", page.lease.url,
                     "more URLs than sitemap_max_urls" if report.truncated == "urls" else
                     "larger than sitemap_max_bytes uncompressed", report.found)
        if report.error:
            counters.sitemap_errors += 1
            log.warning("sitemap %s could not be read to its end (%d URLs before): %s", page.lease.url,
                        report.found, report.error)

    def _note_pipelines(self, page: PageResult, report: PageReport) -> None:
        output = report.pipelines
        assert output is not None
        page.items = output.items
        counters = self.counters
        counters.items += len(output.items)
        for name, error in output.errors:
            counters.pipeline_errors += 1
            log.warning("pipeline %s failed on %s: %s", name, page.lease.url, error)
        for name in output.timed_out:
            counters.pipeline_timeouts += 1
            log.warning("pipeline %s ran out of its time budget on %s: stopped, its output dropped",
                        name, page.lease.url)

    async def _parse(self, index: int, jobs: list[ParseJob]) -> list[ParseAnswer]:
        parser = self._parsers[index]
        try:
            result: list[ParseAnswer] = await parser.call(parse_pages, jobs, self._ring_generation())
            return result
        except WorkerDied as exc:
            log.error("%s; replacing it and parsing its %d pages one by one", exc, len(jobs))
            await self._replace_parser(index, parser)
            return await self._parse_alone(jobs)

    async def _replace_parser(self, index: int, dead: Parser) -> None:
        # Several loops share a parser and all learn of its death: the first replaces it.
        async with self._replacing:
            if self._spent is not None:
                raise self._spent
            if self._parsers[index] is not dead:
                return
            while True:
                if not self._budget.allow(time.monotonic()):
                    log.error("the parsers died %d times within %.0f s, their restart budget; stopping the node",
                              self._budget.max_restarts + 1, self._budget.window_s)
                    self._spent = WorkerDied(f"parser {dead.name}: the parsers' restart budget is spent")
                    raise self._spent
                replacement = self._new_parser(dead.name)
                try:
                    await replacement.start()
                    break
                except WorkerDied as exc:  # it died before it was ready: one more death
                    log.error("%s; replacing it", exc)
            self._parsers[index] = replacement
            self.counters.parser_restarts += 1
            await dead.close()

    async def watch(self, now: float) -> None:
        """One liveness round (node.liveness): a parser dead while idle is replaced; one that
        left a batch unanswered past the deadline (stopped, stuck) is killed (its batch is then
        parsed again page by page, on a fresh parser); an idle one is pinged."""
        if self._spent is not None:
            return
        for index, parser in enumerate(list(self._parsers)):
            if parser.dead:
                log.error("parser %s (pid %s) died while idle; replacing it", parser.name, parser.pid)
                await self._replace_parser(index, parser)
                continue
            waited = parser.unanswered_for(now)
            if waited > self._deadline_s:
                parser.kill(f"no answer for {waited:.0f} s (the process is {process_state(parser.pid)})")
            elif waited == 0.0:
                with contextlib.suppress(WorkerDied, TimeoutError):
                    await asyncio.wait_for(parser.ping(), min(1.0, self._deadline_s))  # left queued: timed above

    async def _parse_alone(self, jobs: list[ParseJob]) -> list[ParseAnswer]:
        """Each page on a worker of its own, so a death names the page that caused it."""
        results: list[ParseAnswer] = []
        worker = None
        try:
            for job in jobs:
                if worker is None:
                    worker = self._new_parser("parse-alone")
                    await worker.start()
                try:
                    results.extend(await worker.call(parse_pages, [job], self._ring_generation()))
                except WorkerDied:
                    results.append(PARSER_DIED)
                    await worker.close()
                    worker = None
        finally:
            if worker is not None:
                await asyncio.shield(worker.close())
        return results


def _job(page: PageResult, with_meta: bool) -> ParseJob:
    # The charset label, not the headers, travels: the job is pickled to the parser process
    # (the status and headers too, only when pipelines will see them).
    fetch, lease = page.fetch, page.lease
    meta = (fetch.status or 0, fetch.headers) if with_meta and fetch.is_html else None
    return (fetch.body, lease.url, lease.depth, fetch.charset, fetch.is_html, fetch.content_encoding, meta,
            may_be_text_sitemap(lease, fetch))
