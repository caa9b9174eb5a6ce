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
BACKGROUND_WAL_AUTOCHECKPOINT_BYTES: a pass can never finish a WAL that is always written to,
so the writer's checkpoint stays as the one that lets the WAL start over, and then finds
nearly every frame copied already. Below `from_bytes` nothing changes: passes that often would
copy a small file's hot pages more often than the writer does (pages/s x0.96 on
`bench/throughput.py`'s 20k-URL crawl in two runs of 4 rounds with the thread always on; x0.997
in 6 rounds with it off there, as it is).

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
# A pass at most this often while commits keep coming: at 10M a crawl writes ~40 MB of WAL a
# second, which a pass copies in about half of that.
INTERVAL_S = 0.5
# The writer's own threshold once passes run: above what passes leave behind, so it seldom
# has frames left to copy when it runs.
BACKGROUND_WAL_AUTOCHECKPOINT_BYTES = 128 * 1024 * 1024


class CheckpointThread:
    """The second connection's passes, on a thread of its own."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._committed = threading.Event()  # frames to copy since the last pass
        self._stopping = threading.Event()
        self.passes = 0
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
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.passes += 1
                except sqlite3.Error as exc:  # the writer's own checkpoint remains
                    log.warning("frontier checkpoint failed: %s", exc)
                if self._stopping.wait(INTERVAL_S):
                    return
        finally:
            conn.close()


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
