"""The store behind an async face: in its own process by default, or on a thread.

WARC writing (record headers, digests, one gzip member per record) is CPU work that holds the
GIL; on its own process it no longer competes with the event loop that drives the fetches.
The call order is kept (one worker), and ``write`` returns only after the records are flushed
to the OS, which the frontier commit that follows relies on.

A write that fails for want of space (a DiskFull) ends the store: later writes are refused,
and closing writes nothing more (no CDXJ index for a file whose tail may be torn, no buffered
bytes): the next start cuts the torn tail, sets it aside and indexes the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from crawler_node.config import StoreConfig
from crawler_node.core.crawl_totals import CrawlTotals
from crawler_node.runtime.datadir import DataDirError, DiskFull, writing
from crawler_node.runtime.workers import ProcessWorker, WorkerDied, make_worker
from crawler_node.store.crawl_log import iso_utc
from crawler_node.store.writer import CrawlInfo, FetchRecord, Store


def _open(data_dir: str, node_id: str, options: dict[str, Any], info: dict[str, Any]) -> Store:
    try:
        with writing(lambda: data_dir, "the store's files"):
            return Store(Path(data_dir), node_id=node_id, info=CrawlInfo(**info), **options)
    except DiskFull:
        raise
    except (OSError, sqlite3.Error) as exc:
        # A part of the store that is not what it should be (runtime.datadir checks the
        # usual ones before the node starts): one line, not a traceback from the worker.
        raise DataDirError(f"the store in {data_dir} cannot be opened: {exc}") from exc


def _write(store: Store, rows: Sequence[tuple[Any, ...]]) -> None:
    store.write([FetchRecord(*row) for row in rows])


def _close(store: Store) -> None:
    store.close()


def _exit_unwritten(store: Store) -> None:
    """In the store's own process, after a DiskFull: exit without a finalizer, so no buffered
    byte, index or digest is written (the kernel closes the files)."""
    os._exit(0)


def _drop_unwritten(store: Store) -> None:
    """On a thread, after a DiskFull: the store's files (not its SQLite) are pointed at
    /dev/null, so what is still buffered goes nowhere when they are collected. Linux only;
    elsewhere the buffers are flushed (and fail) at exit, which loses nothing either."""
    root = os.path.realpath(store.data_dir)
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            for name in os.listdir("/proc/self/fd"):
                target = os.readlink(f"/proc/self/fd/{name}")
                if target.startswith(root + os.sep) and "sqlite3" not in os.path.basename(target):
                    os.dup2(null, int(name))
        finally:
            os.close(null)


# Where a FetchRecord's fields are in the tuples handed to the worker (its fields, in order).
_AT = {f.name: index for index, f in enumerate(fields(FetchRecord))}
_HOST, _OUTCOME, _STATUS, _BODY, _ATTEMPT = _AT["host"], _AT["outcome"], _AT["status"], _AT["body"], _AT["attempt"]
_KIND, _ELAPSED, _FETCHED_AT, _ERROR = _AT["kind"], _AT["elapsed_s"], _AT["fetched_at"], _AT["error"]


def count_rows(totals: CrawlTotals, rows: Sequence[tuple[Any, ...]]) -> None:
    """The crawl.log lines of ``rows`` (one each, as store.crawl_log writes them) added to ``totals``."""
    for row in rows:
        totals.add(host=row[_HOST], outcome=str(row[_OUTCOME]), status=row[_STATUS], size=len(row[_BODY]),
                   attempt=row[_ATTEMPT], kind=row[_KIND], elapsed_ms=round(row[_ELAPSED] * 1000.0, 1),
                   fetched_at=iso_utc(row[_FETCHED_AT]), error=row[_ERROR])


class StoreWorker:
    def __init__(self, data_dir: Path, *, node_id: str, config: StoreConfig, info: CrawlInfo | None = None,
                 totals: CrawlTotals | None = None) -> None:
        """The store's worker (its own process with ``config.store_in_process``) on ``data_dir``;
        ``info``: what the warcinfo record says of the crawl; ``totals``: the crawl's durable
        totals (core.crawl_totals), to which every line written is added once written."""
        self.totals = totals if totals is not None else CrawlTotals()
        options = {"warc_max_bytes": config.warc_max_bytes, "crawl_log_max_bytes": config.crawl_log_max_bytes,
                   "dedup_max_entries": config.dedup_max_entries, "items_max_bytes": config.items_max_bytes}
        self._worker = make_worker("store", in_process=config.store_in_process, init=_open,
                                   init_args=(str(data_dir), node_id, options, asdict(info or CrawlInfo())),
                                   nice=config.worker_nice)
        self._full: DiskFull | None = None  # the write that ended the store
        self._open = False

    async def start(self) -> None:
        try:
            await self._worker.start()  # the store is open (or the error surfaces here)
        except BaseException:
            await self._worker.close()  # no store to close in it: it just ends
            raise
        self._open = True

    async def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Store FetchRecords given as the tuples of their fields, in order."""
        if self._full is not None:
            raise self._full
        try:
            await self._worker.call(_write, list(rows))
        except DiskFull as exc:
            self._full = exc
            raise
        count_rows(self.totals, rows)

    async def close(self, *, write_nothing: bool = False) -> None:
        """``write_nothing``: the disk is full (a write here or elsewhere failed): close as
        after a failed write of its own."""
        if not self._open:
            return
        self._open = False
        if self._full is None and not write_nothing:
            await self._worker.close(_close)
        elif isinstance(self._worker, ProcessWorker):
            with contextlib.suppress(WorkerDied):  # it exits without answering
                await self._worker.close(_exit_unwritten)
        else:
            await self._worker.close(_drop_unwritten)
