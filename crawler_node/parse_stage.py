"""The parse stage: batches of pages to the parser pool, links scoped by depth and host.
Part of the Node (see node.py)."""

from __future__ import annotations

import asyncio
import logging

from crawler_node.frontier import Lease, UrlEntry
from crawler_node.parse import parse_pages
from crawler_node.pipeline import PARSE_BATCH, PARSE_BATCH_BYTES
from crawler_node.urls import host_of

log = logging.getLogger("crawler_node.node")


class ParseStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

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
