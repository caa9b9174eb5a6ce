"""The parse stage: batches of pages to the parser workers, which return the links in scope.
Part of the Node (see node.py).

A parser process that dies (killed for memory, or crashed by a page) is replaced, and the
batches it held are parsed again one page at a time on a worker of their own: a page that
kills that one too is the culprit and is stored without links; every other page keeps them.
"""

from __future__ import annotations

import asyncio
import logging

from crawler_node.frontier.frontier import UrlEntry
from crawler_node.parse.worker import ParseContext, PageLinks, parse_pages
from crawler_node.node.pipeline import PARSE_BATCH, PARSE_BATCH_BYTES
from crawler_node.runtime.workers import ProcessWorker, ThreadWorker, WorkerDied, make_worker

log = logging.getLogger("crawler_node.node.node")

BATCHES_PER_PARSER = 4  # in flight per parser: one parsing, the next ones already in its pipe
PARSER_DIED = "the parser process died on this page"

ParseJob = tuple[bytes, str, int]  # body, URL, depth


class ParseStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    def _new_parser(self, name: str) -> ProcessWorker | ThreadWorker:
        s = self.settings
        return make_worker(name, in_process=s.parse_workers > 0, init=ParseContext,
                           init_args=(self.scope, s.max_links_per_page, s.parse_delay_s, s.parse_crash_url),
                           nice=s.worker_nice)

    def _new_parsers(self) -> list[ProcessWorker | ThreadWorker]:
        return [self._new_parser(f"parse-{index}") for index in range(max(1, self.settings.parse_workers))]

    async def _parse_loop(self, index: int) -> None:
        while True:
            batch = [await self.parse_queue.get()]
            batch_bytes = len(batch[0].fetch.body)
            # Bounded in bytes too: a batch is copied to the parser process whole.
            while len(batch) < PARSE_BATCH and batch_bytes < PARSE_BATCH_BYTES and not self.parse_queue.empty():
                batch.append(self.parse_queue.get_nowait())
                batch_bytes += len(batch[-1].fetch.body)
            self._busy_parsers += 1
            try:
                results = await self._parse(index, [(page.fetch.body, page.lease.url, page.lease.depth)
                                                    for page in batch])
                discovered = 0
                for page, parsed in zip(batch, results):
                    if isinstance(parsed, str):
                        log.warning("could not parse %s: %s", page.lease.url, parsed)
                        self.counters["parse_errors"] += 1
                        continue
                    depth = page.lease.depth + 1
                    links, found = parsed
                    page.links = [UrlEntry(url, host, depth, -depth) for url, host in links]
                    discovered += found
                self.counters["links_discovered"] += discovered
                for page in batch:
                    await self.store_queue.put(page)
            finally:
                self._busy_parsers -= 1

    async def _parse(self, index: int, jobs: list[ParseJob]) -> list[PageLinks | str]:
        parser = self._parsers[index]
        try:
            return await parser.call(parse_pages, jobs, self.cluster.membership.version)
        except WorkerDied as exc:
            log.error("%s; replacing it and parsing its %d pages one by one", exc, len(jobs))
            await self._replace_parser(index, parser)
            return await self._parse_alone(jobs)

    async def _replace_parser(self, index: int, dead: ProcessWorker | ThreadWorker) -> None:
        # Several loops share a parser and all learn of its death: the first replaces it.
        async with self._parser_replacing:
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
                    results.extend(await worker.call(parse_pages, [job], self.cluster.membership.version))
                except WorkerDied:
                    results.append(PARSER_DIED)
                    await worker.close()
                    worker = None
        finally:
            if worker is not None:
                await asyncio.shield(worker.close())
        return results
