"""The store behind an async face: in its own process by default, or on a thread.

WARC writing (record headers, digests, one gzip member per record) is CPU work that holds the
GIL; on its own process it no longer competes with the event loop that drives the fetches.
The call order is kept (one worker), and ``write`` returns only after the records are flushed
to the OS, which the frontier commit that follows relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from crawler_node.runtime.workers import make_worker
from crawler_node.store.writer import CrawlInfo, FetchRecord, Store


def _open(data_dir: str, node_id: str, options: dict, info: dict) -> Store:
    return Store(Path(data_dir), node_id=node_id, info=CrawlInfo(**info), **options)


def _write(store: Store, rows: Sequence[tuple]) -> None:
    store.write([FetchRecord(*row) for row in rows])


def _close(store: Store) -> None:
    store.close()


class StoreWorker:
    def __init__(self, data_dir: Path, *, node_id: str, warc_max_bytes: int, in_process: bool = True,
                 nice: int = 0, crawl_log_max_bytes: int = 100_000_000, dedup_max_entries: int = 1_000_000,
                 items_max_bytes: int = 100_000_000, info: CrawlInfo | None = None) -> None:
        options = {"warc_max_bytes": warc_max_bytes, "crawl_log_max_bytes": crawl_log_max_bytes,
                   "dedup_max_entries": dedup_max_entries, "items_max_bytes": items_max_bytes}
        self._worker = make_worker("store", in_process=in_process, init=_open,
                                   init_args=(str(data_dir), node_id, options, asdict(info or CrawlInfo())),
                                   nice=nice)

    async def start(self) -> None:
        await self._worker.start()  # the store is open (or the error surfaces here)

    async def write(self, rows: Sequence[tuple]) -> None:
        """Store FetchRecords given as the tuples of their fields, in order."""
        await self._worker.call(_write, list(rows))

    async def close(self) -> None:
        await self._worker.close(_close)
