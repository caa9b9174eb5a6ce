"""The parse stage: batches of pages to the parser workers, which return the links in scope.

A parser process that dies (killed for memory, or crashed by a page) is replaced, and the
batches it held are parsed again one page at a time on a worker of their own: a page that
kills that one too is the culprit and is stored without links; every other page keeps them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from crawler_node.core.scope import Scope
from crawler_node.frontier import UrlEntry
from crawler_node.node.fetch_stage import NextStage
from crawler_node.node.pipeline import PageResult
from crawler_node.node.queues import StageQueue
from crawler_node.parse.worker import PageLinks, ParseContext, parse_pages
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.runtime.workers import ProcessWorker, ThreadWorker, WorkerDied, make_worker

log = logging.getLogger("crawler_node.parse")

BATCHES_PER_PARSER = 4  # in flight per parser: one parsing, the next ones already in its pipe
# Pages per round trip to a parser process. 32 rather than 16: half the pipe writes and answers
# for the event loop, about +5% pages/s in bench/throughput.py (3 alternating rounds).
PARSE_BATCH = 32
PARSE_BATCH_BYTES = 4_000_000  # ... unless they are big: then fewer
PARSER_DIED = "the parser process died on this page"

ParseJob = tuple[bytes, str, int]  # body, URL, depth
Parser = ProcessWorker | ThreadWorker


class ParseStage:
    name = "parse"  # the reason admission reports while the queue is full

    def __init__(self, *, scope: Scope, max_links: int, workers: int, nice: int, queue_size: int,
                 store: NextStage, ring_generation: Callable[[], int], taken: Wakeup,
                 delay_s: float = 0.0, crash_url: str = "") -> None:
        """``workers``: parser processes (0: one thread in this process); ``ring_generation``:
        the cluster's membership version, which tells the parsers when to hand links over
        again; ``taken`` is notified whenever a page leaves the queue or a batch is done;
        ``delay_s`` and ``crash_url`` are test hooks (see parse.worker.ParseContext)."""
        self._context_args = (scope, max_links, delay_s, crash_url)
        self._in_process = workers > 0
        self._nice = nice
        self._store = store
        self._ring_generation = ring_generation
        self.queue: StageQueue[PageResult] = StageQueue("parse", queue_size, taken=taken)
        self._parsers: list[Parser] = [self._new_parser(f"parse-{index}") for index in range(max(1, workers))]
        self._replacing = asyncio.Lock()
        self._busy = 0
        self._idle = taken
        self.counters: Counter[str] = Counter()

    # ----------------------------------------------------------------- questions
    def needs_backout(self) -> bool:
        return self.queue.full()

    def idle(self) -> bool:
        return self.queue.empty() and not self._busy

    async def put(self, page: PageResult) -> None:
        await self.queue.put(page)

    def snapshot(self) -> dict:
        return {"queue": self.queue.snapshot(), "busy_batches": self._busy,
                "parse_errors": self.counters["parse_errors"], "parser_restarts": self.counters["parser_restarts"],
                "links_discovered": self.counters["links_discovered"],
                "parser_pids": [parser.pid for parser in self._parsers]}

    # ----------------------------------------------------------------- lifecycle
    async def start(self, supervisor: Supervisor) -> None:
        for parser in self._parsers:
            await parser.start()
        for index, parser in enumerate(self._parsers):
            for loop in range(BATCHES_PER_PARSER):
                supervisor.stage(f"{parser.name}-loop-{loop}", self._parse_loop(index))

    async def close(self) -> None:
        for parser in self._parsers:
            await parser.close()

    def _new_parser(self, name: str) -> Parser:
        return make_worker(name, in_process=self._in_process, init=ParseContext, init_args=self._context_args,
                           nice=self._nice)

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
                results = await self._parse(index, [(page.fetch.body, page.lease.url, page.lease.depth)
                                                    for page in batch])
                self._attach_links(batch, results)
                for page in batch:
                    await self._store.put(page)
            finally:
                self._busy -= 1
                self._idle.notify()

    def _attach_links(self, batch: list[PageResult], results: list[PageLinks | str]) -> None:
        discovered = 0
        for page, parsed in zip(batch, results, strict=True):
            if isinstance(parsed, str):
                log.warning("could not parse %s: %s", page.lease.url, parsed)
                self.counters["parse_errors"] += 1
                continue
            depth = page.lease.depth + 1
            links, found = parsed
            page.links = [UrlEntry(url, host, depth, -depth) for url, host in links]
            discovered += found
        self.counters["links_discovered"] += discovered

    async def _parse(self, index: int, jobs: list[ParseJob]) -> list[PageLinks | str]:
        parser = self._parsers[index]
        try:
            result: list[PageLinks | str] = await parser.call(parse_pages, jobs, self._ring_generation())
            return result
        except WorkerDied as exc:
            log.error("%s; replacing it and parsing its %d pages one by one", exc, len(jobs))
            await self._replace_parser(index, parser)
            return await self._parse_alone(jobs)

    async def _replace_parser(self, index: int, dead: Parser) -> None:
        # Several loops share a parser and all learn of its death: the first replaces it.
        async with self._replacing:
            if self._parsers[index] is not dead:
                return
            replacement = self._new_parser(dead.name)
            await replacement.start()
            self._parsers[index] = replacement
            self.counters["parser_restarts"] += 1
            await dead.close()

    async def _parse_alone(self, jobs: list[ParseJob]) -> list[PageLinks | str]:
        """Each page on a worker of its own, so a death names the page that caused it."""
        results: list[PageLinks | str] = []
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
