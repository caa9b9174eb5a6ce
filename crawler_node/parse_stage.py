"""The parse stage: batches of pages to the parser workers, which return the links in scope.
Part of the Node (see node.py)."""

from __future__ import annotations

import logging

from crawler_node.frontier import UrlEntry
from crawler_node.parse import ParseContext, parse_pages
from crawler_node.pipeline import PARSE_BATCH, PARSE_BATCH_BYTES
from crawler_node.workers import ProcessWorker, ThreadWorker, make_worker

log = logging.getLogger("crawler_node.node")

BATCHES_PER_PARSER = 4  # in flight per parser: one parsing, the next ones already in its pipe


class ParseStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    def _new_parsers(self) -> list[ProcessWorker | ThreadWorker]:
        s = self.settings
        return [make_worker(f"parse-{index}", in_process=s.parse_workers > 0, init=ParseContext,
                            init_args=(self.scope, s.max_links_per_page, s.parse_delay_s))
                for index in range(max(1, s.parse_workers))]

    async def _parse_loop(self, parser: ProcessWorker | ThreadWorker) -> None:
        while True:
            batch = [await self.parse_queue.get()]
            batch_bytes = len(batch[0].fetch.body)
            # Bounded in bytes too: a batch is copied to the parser process whole.
            while len(batch) < PARSE_BATCH and batch_bytes < PARSE_BATCH_BYTES and not self.parse_queue.empty():
                batch.append(self.parse_queue.get_nowait())
                batch_bytes += len(batch[-1].fetch.body)
            self._busy_parsers += 1
            try:
                results = await parser.call(
                    parse_pages, [(page.fetch.body, page.lease.url, page.lease.depth) for page in batch])
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
