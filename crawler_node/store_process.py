"""The store behind an async face: in its own process by default, or on a thread.

WARC writing is mostly Python-level work in warcio (record headers, digests, one gzip member
per record) that holds the GIL; on its own process it no longer competes with the event loop
that drives the fetches. The call order is kept (one worker), and ``write`` returns only after
the records are flushed to the OS, which the frontier commit that follows relies on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from collections.abc import Sequence
from pathlib import Path

from crawler_node.store import FetchRecord, Store

# The store object of a store worker process. A process-pool initializer can only hand state
# to later calls through the worker's module globals; it is never used in the node's process.
_worker_store: Store | None = None


def _open(data_dir: str, node_id: str, warc_max_bytes: int) -> None:
    global _worker_store
    _worker_store = Store(Path(data_dir), node_id=node_id, warc_max_bytes=warc_max_bytes)


def _write(records: Sequence[FetchRecord]) -> int:
    _worker_store.write(records)
    return len(records)


def _close() -> None:
    global _worker_store
    if _worker_store is not None:
        _worker_store.close()
        _worker_store = None


class StoreWorker:
    def __init__(self, data_dir: Path, *, node_id: str, warc_max_bytes: int, in_process: bool = True) -> None:
        args = (str(data_dir), node_id, warc_max_bytes)
        if in_process:
            self._executor: concurrent.futures.Executor = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_open, initargs=args)
        else:
            # One thread, so the module-level store above is this process's own and single.
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="store", initializer=_open, initargs=args)
        self.records_written = 0

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start(self) -> None:
        await self._call(int)  # the worker is up and its store is open (or the error surfaces here)

    async def write(self, records: Sequence[FetchRecord]) -> None:
        self.records_written += await self._call(_write, list(records))

    async def close(self) -> None:
        try:
            await self._call(_close)
        finally:
            self._executor.shutdown(wait=True)
