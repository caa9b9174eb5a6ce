"""The store stage: WARC + crawl.log first, then one frontier transaction per batch that marks
leases done, routes discovered links (this node's frontier or a peer's outbox) and replicates
fetched URLs to the successor. Part of the Node (see node.py)."""

from __future__ import annotations

import logging
import time
from collections import Counter

from crawler_node.frontier.frontier import FrontierBatch, UrlEntry
from crawler_node.node.pipeline import PageResult

log = logging.getLogger("crawler_node.node.node")


class StoreStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

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
                self.held_bytes -= sum(len(page.fetch.body) for page in batch)

    async def _commit(self, pages: list[PageResult]) -> None:
        await self.store.write([self._record(page) for page in pages])
        frontier_batch = FrontierBatch()
        links: list[UrlEntry] = []
        single = self.cluster.is_single
        for page in pages:
            if page.retry_at is not None:
                (frontier_batch.postponed if page.postponed else frontier_batch.retry).append(
                    (page.lease.id, page.retry_at))
            elif page.final_failure:
                frontier_batch.failed.append(page.lease.id)
            else:
                frontier_batch.done.append(page.lease.id)
            if page.retry_at is None and not single:
                successor = self.cluster.successor_for(page.lease.host)
                if successor is not None:
                    lease = page.lease
                    frontier_batch.replicate.append(
                        (successor, UrlEntry(lease.url, lease.host, lease.depth, lease.priority, lease.hops)))
            links.extend(page.links)
        if single:
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
        self.counters["fetched"] += len(pages)
        self.last_stored_at = time.time()
        self.counters["pages_done"] += len(frontier_batch.done)
        self.counters["failed"] += len(frontier_batch.failed)
        now = self._clock()
        retried_hosts = Counter(page.lease.host for page in pages if page.retry_at is not None)
        for host, count in retried_hosts.items():
            self.scheduler.add_work(host, count, now)
        self._note_added(result.queued)
        self._work.set()

    def _record(self, page: PageResult) -> tuple:
        """The page's FetchRecord as the tuple of its fields in order: the store process makes
        the record (store_process.StoreWorker.write), the loop only a tuple, which also
        pickles without a call back into Python."""
        fetch, lease, outcome = page.fetch, page.lease, page.signal.outcome
        body = fetch.body if outcome in ("ok", "redirect", "http_error", "throttled", "server_error") else b""
        return (lease.url, lease.host, self.node_id, lease.attempts, fetch.started_at, outcome, fetch.status,
                fetch.request_headers, fetch.headers, body, fetch.content_type, fetch.error_detail,
                fetch.remote_addr, fetch.elapsed_s)
