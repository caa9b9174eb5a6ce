"""The store behind an async face: in its own process by default, or on a thread.

WARC writing (record headers, digests, one gzip member per record) is CPU work that holds the
GIL; on its own process it no longer competes with the event loop that drives the fetches.
The call order is kept (one worker), and ``write`` returns only after the records are flushed
to the OS, which the frontier commit that follows relies on.

A write that fails for want of space (a DiskFull) ends the store: later writes are refused,
and closing writes nothing more (no CDXJ index for a file whose tail may be torn, no buffered
bytes): the next start cuts the torn tail, sets it aside and indexes the file.

A store process that dies (SIGKILL, the OOM killer) or stops answering (SIGSTOP: killed by the
node past ``worker_deadline_s``) is replaced in place, within a restart budget
(core.restart_budget): the new store cuts the torn tails as a start does, and the write in
flight is done again, but only for the records crawl.log does not have yet (a line is the
record's commit: the WARC record is written first), so nothing is stored twice in crawl.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from functools import partial
from pathlib import Path
from typing import Any

from crawler_node.config import StoreConfig
from crawler_node.core.crawl_totals import CrawlTotals
from crawler_node.core.restart_budget import RestartBudget
from crawler_node.runtime.datadir import DataDirError, DiskFull, writing
from crawler_node.runtime.workers import ProcessWorker, ThreadWorker, WorkerDied, make_worker, process_state
from crawler_node.store.crawl_log import iso_utc
from crawler_node.store.rebuild import REBUILT
from crawler_node.store.writer import CrawlInfo, FetchRecord, Store

log = logging.getLogger("crawler_node.store")


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


def _write_unrecorded(store: Store, rows: Sequence[tuple[Any, ...]]) -> int:
    """After a store died mid-write: write the ``rows`` crawl.log has no line of yet; returns
    how many it had (stored whole before the death)."""
    logged = _recent_lines(store, tail_bytes=max(1 << 20, 4096 * len(rows)))
    # A line the new store rebuilt from a record (store.rebuild) is that record's line: no
    # attempt nor time of its own to match, the URL says it.
    missing = [row for row in rows
               if (row[0], row[3], iso_utc(row[4])) not in logged and (row[0], -1, "") not in logged]
    if missing:
        _write(store, missing)
    return len(rows) - len(missing)


def _recent_lines(store: Store, *, tail_bytes: int) -> set[tuple[str, int, str]]:
    """(url, attempt, fetched_at) of the lines at the end of crawl.log (and of the file rotated
    last, for a write that straddled a rotation)."""
    keys: set[tuple[str, int, str]] = set()
    for path in [*store.layout.rotated_crawl_logs()[-1:], store.layout.crawl_log]:
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - tail_bytes))
                lines = handle.read().split(b"\n")[1 if size > tail_bytes else 0:]
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
                keys.add((entry["url"], int(entry["attempt"]), entry["fetched_at"]))
                if entry.get("error") == REBUILT:
                    keys.add((entry["url"], -1, ""))
            except (ValueError, KeyError, TypeError):
                continue  # a torn line: its record is written again
    return keys


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
        self._make = partial(make_worker, "store", in_process=config.store_in_process, init=_open,
                             init_args=(str(data_dir), node_id, options, asdict(info or CrawlInfo())),
                             nice=config.worker_nice)
        self._worker = self._make()
        self._full: DiskFull | None = None  # the write that ended the store
        self._open = False
        self.budget = RestartBudget()
        self.deadline_s = config.worker_deadline_s
        self._replacing = asyncio.Lock()
        self._spent: WorkerDied | None = None  # the death past the restart budget: the store is done with

    @property
    def restarts(self) -> int:
        return self.budget.total

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
        rows = list(rows)
        worker, again = self._worker, False
        while True:
            try:
                if again:
                    stored = await worker.call(_write_unrecorded, rows)
                    log.warning("the new store wrote the %d records of the batch in flight that crawl.log lacked "
                                "(%d it had were not written again)", len(rows) - stored, stored)
                else:
                    await worker.call(_write, rows)
                break
            except DiskFull as exc:
                self._full = exc
                raise
            except WorkerDied as exc:
                worker, again = await self._replace(worker, exc), True
        # Every row is in crawl.log once now (a dead worker's lines are not written again).
        count_rows(self.totals, rows)

    async def _replace(self, dead: ProcessWorker | ThreadWorker, why: WorkerDied) -> ProcessWorker | ThreadWorker:
        """The store in place of ``dead`` (several callers learn of one death: one replaces),
        or ``why`` raised when the restart budget is spent."""
        async with self._replacing:
            if self._spent is not None:
                raise self._spent
            if self._worker is not dead:
                return self._worker
            while True:
                if not self.budget.allow(time.monotonic()):
                    log.error("%s: the store died %d times within %.0f s, its restart budget; stopping the node",
                              why, self.budget.max_restarts + 1, self.budget.window_s)
                    self._spent = WorkerDied(f"{why}; the store's restart budget is spent")
                    raise self._spent
                log.error("%s; replacing it (restart %d), its write in flight done again", why, self.budget.total)
                replacement = self._make()
                try:
                    await replacement.start()
                    break
                except WorkerDied as exc:  # it died before it was open: one more death
                    why = exc
            self._worker = replacement
            with contextlib.suppress(WorkerDied):
                await dead.close(timeout_s=1.0)
            return replacement

    async def watch(self, now: float) -> None:
        """One liveness round (node.liveness): a store dead while idle is replaced; one that
        has left a request unanswered past the deadline (stopped, stuck) is killed, which
        fails its calls, and the write in flight replaces it; an idle one is pinged."""
        worker = self._worker
        if not self._open or self._full is not None or self._spent is not None:
            return
        if worker.dead:
            with contextlib.suppress(WorkerDied):
                await self._replace(worker, WorkerDied(f"worker store (pid {worker.pid}) died while idle"))
            return
        waited = worker.unanswered_for(now)
        if waited > self.deadline_s:
            worker.kill(f"no answer for {waited:.0f} s (the process is {process_state(worker.pid)})")
        elif waited == 0.0:
            with contextlib.suppress(WorkerDied, TimeoutError):
                await asyncio.wait_for(worker.ping(), min(1.0, self.deadline_s))  # left queued: timed above

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
