"""WAL checkpoints on a thread of their own, so that the frontier's thread seldom pays for one.

In WAL mode every commit appends the pages it changed to the WAL, and a checkpoint copies
them into the database file. SQLite runs it in whichever commit crosses the
`wal_autocheckpoint` threshold (schema.WAL_AUTOCHECKPOINT_BYTES): at a million queued URLs
that is a lease or a store batch that takes 100-150 ms instead of 10 (the frontier's p99s,
`bench/scale.py`), while the fetchers wait for its leases.

Here a second connection copies the frames passively (`PRAGMA wal_checkpoint(PASSIVE)`: it
never blocks the writer, nor waits for it) soon after each commit. The frontier's own
automatic checkpoint is kept: it then finds the frames already copied and only finishes the
last ones, and the WAL starts over at the next commit. A background checkpoint alone would
not do: it never completes while commits keep coming, and the WAL grows without bound (692 MB
after 64 rounds, measured so).

Durability is the same: a checkpoint only moves committed pages into the database file.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

# At most one checkpoint this often while commits keep coming. At 0.1 s a frontier of 1M
# queued URLs writing ~200 MB of WAL a second copies ~20 MB a pass.
INTERVAL_S = 0.1


class Checkpointer:
    def __init__(self, path: Path, *, interval_s: float = INTERVAL_S) -> None:
        self._path = path
        self._interval_s = interval_s
        self._committed = threading.Event()  # frames to copy since the last pass
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frontier-checkpoint", daemon=True)
        self.passes = 0
        self._thread.start()

    def committed(self) -> None:
        """A transaction committed: its frames are to be copied."""
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
                except sqlite3.Error as exc:  # e.g. the file gone under a test: the writer's own checkpoint remains
                    log.warning("frontier checkpoint failed: %s", exc)
                if self._stopping.wait(self._interval_s):
                    return
        finally:
            conn.close()
