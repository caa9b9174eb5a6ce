"""WAL checkpoints on a thread of their own once the frontier's file is big, so that the
frontier's thread does not stop for them.

In WAL mode every commit appends the pages it changed to the WAL, and a checkpoint copies
them into the database file and syncs it. SQLite runs the checkpoint in whichever commit
crosses `wal_autocheckpoint` (schema.WAL_AUTOCHECKPOINT_BYTES, 32 MB). In a small file that is
a few thousand pages written again and again, and cheap. In a big one each page is another
block on disk: at 10M queued URLs (3.6 GB) a store batch that ran the checkpoint took ~0.4 s
(~0.17 of it CPU, the rest the sync), every ~4 batches, and the leases and status reads queued
behind it waited as long (2.4-2.9 s for a status read in `bench/node_scale.py`).

So once the file passes `from_bytes`, a second connection copies the frames passively
(`PRAGMA wal_checkpoint(PASSIVE)`: it never blocks the writer, nor waits for it), a pass at
most every INTERVAL_S after a commit, and the writer's own threshold goes up to
BACKGROUND_WAL_AUTOCHECKPOINT_BYTES (and the WAL file's size limit with it). A pass that ends
between two commits lets the next one start the WAL over, SQLite having synced the file in it;
under a writer that is never idle none does, and the writer's checkpoint is the one that lets
the WAL start over: it then finds nearly every frame copied, and syncs them. Below `from_bytes`
nothing changes: passes that often would copy a small file's hot pages more often than the
writer does (pages/s x0.96 on `bench/throughput.py`'s 20k-URL crawl in two runs of 4 rounds
with the thread always on; x0.997 in 6 rounds with it off there, as it is).

A pass leaves the sync to SQLite (see CheckpointThread._pass for what syncing after each
pass cost).

Durability is the same: a checkpoint only moves committed pages into the database file.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

# The node's frontier (frontier.service) turns the thread on past this size: ~700k URLs.
# bench/node_scale.py, the node at 10M against 100k queued: pages/s x0.98-1.01 with the
# thread, x0.81-0.84 without, crawling 60 testweb hosts; x1.09-1.23 against x0.76-0.92 (12,000
# hosts); the slowest status read 0.09-0.24 s against 2-3 s.
FROM_BYTES = 256 * 1024 * 1024
# A pass at most this often while commits keep coming. What a pass leaves is the writer's to
# copy when its own checkpoint comes: bench/scale.py's rounds at 10M with the frontier's thread
# always busy (~160 MB of WAL a second) waited 0.68-0.71 s in it at 0.1 s, 0.65-0.96 s at
# 0.5 s (p99 of 200 store batches). In the node at 10M a crawl writes ~40 MB a second, and 0.1
# or 0.5 s measured alike (bench/node_scale.py).
INTERVAL_S = 0.1
# The writer's own threshold once passes run: above what passes leave behind, so it seldom
# has frames left to copy when it runs.
BACKGROUND_WAL_AUTOCHECKPOINT_BYTES = 128 * 1024 * 1024
# ... and the size the WAL file is cut back to when it starts over (schema.JOURNAL_SIZE_LIMIT_BYTES,
# 64 MB, otherwise): the first commit after each start paid an ftruncate of the 64 MB above it
# (strace: 80 ms), and a lease round was often that commit (bench/scale.py's rounds at 10M: lease
# round p99 59-76 ms with 64 MB, 8.6-10.5 ms with this; store batches alike).
BACKGROUND_JOURNAL_SIZE_LIMIT_BYTES = 2 * BACKGROUND_WAL_AUTOCHECKPOINT_BYTES


class CheckpointThread:
    """The second connection's passes, on a thread of its own."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._committed = threading.Event()  # frames to copy since the last pass
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frontier-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        self._committed.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop after the pass under way, if any."""
        self._stopping.set()
        self._committed.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        try:
            while True:
                self._committed.wait()
                if self._stopping.is_set():
                    return
                self._committed.clear()
                try:
                    self._pass(conn)
                except sqlite3.Error as exc:  # the writer's own checkpoint remains
                    log.warning("frontier checkpoint failed: %s", exc)
                if self._stopping.wait(INTERVAL_S):
                    return
        finally:
            conn.close()

    @staticmethod
    def _pass(conn: sqlite3.Connection) -> None:
        """Copy the WAL's frames into the database file; SQLite syncs the file when the pass
        leaves no frame behind.

        Not synced here after every pass, as it was for a day: under a writer never idle the
        writer's own checkpoint then had less to sync (store batch p99 0.53-0.61 s against
        0.77-1.12 s, pages/s alike), but in the rounds of bench/scale.py, where the frontier's
        thread rests between blocks as a node's does between commits, it cost pages/s x0.70-0.88
        and a lease round's p99 89-140 ms against 17-26 (3 paired runs on a copy of a 10M file).
        The sync writes back the pages the pass just copied, which are the pages the writer
        reads next, and the writer's reads waited on them (perf: `pread64` in
        `folio_wait_bit_common` while the pass's `fdatasync` was throttled by the block layer's
        writeback throttling)."""
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()


class Checkpoints:
    """Told of every commit on the frontier's thread (`committed`); starts the thread, and
    raises the writer's threshold on `conn`, once the file at `path` passes `from_bytes`."""

    def __init__(self, conn: sqlite3.Connection, path: Path, from_bytes: int) -> None:
        if from_bytes < 0:
            raise ValueError(f"from_bytes must be >= 0, got {from_bytes}")
        self._conn = conn
        self._path = path
        self._from_bytes = from_bytes
        self._given_up = False  # the thread could not start: not tried again at every commit
        self.thread: CheckpointThread | None = None
        self.committed()  # a file already big starts with it

    def committed(self) -> None:
        if self.thread is None:
            if self._given_up:
                return
            try:
                size = self._path.stat().st_size
            except OSError:
                return
            if size < self._from_bytes:
                return
            try:
                page_size = self._conn.execute("PRAGMA page_size").fetchone()[0]
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {BACKGROUND_WAL_AUTOCHECKPOINT_BYTES // page_size}")
                self._conn.execute(f"PRAGMA journal_size_limit = {BACKGROUND_JOURNAL_SIZE_LIMIT_BYTES}")
                self.thread = CheckpointThread(self._path)
            except (sqlite3.Error, RuntimeError) as exc:  # the commit stands; the writer checkpoints as before
                log.warning("frontier WAL checkpoints stay with the writer: %s", exc)
                self._given_up = True
                return
            log.info("frontier file at %d MB: WAL checkpoints on a thread of their own", size // (1024 * 1024))
        self.thread.committed()

    def close(self) -> None:
        if self.thread is not None:
            self.thread.close()
