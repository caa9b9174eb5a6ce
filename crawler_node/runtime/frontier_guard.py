"""A frontier that lost what it had committed is refused at start, not silently crawled empty.

The frontier is SQLite in WAL mode, checkpointed every ~32 MB of WAL (frontier.schema; past
256 MB of file, every ~0.1 s from a thread of its own: frontier.checkpointer): most of what a
crawl has queued since the last checkpoint lives only in `frontier.sqlite3-wal`. A
`-wal` file deleted or garbled (SQLite drops WAL frames whose checksums fail, silently), or a
main file truncated to nothing, opened to an older or an empty frontier: the node started, exit
0, no message, and the URLs it had queued were never fetched.

The guard keeps a watermark beside the database: the highest URL id the frontier had handed
out (`sqlite_sequence` for `urls`, AUTOINCREMENT: it only grows, even when rows are deleted or
handed to another node), written every few seconds while the node runs. At the next start, a
frontier whose highest id is below the watermark has lost committed rows; the node refuses to
start and says how to go on (`crawler-node recover`). A SIGKILL cannot trip it: the watermark
is only ever written from what the database already holds, so it lags behind the database,
never ahead of it. The guard also checkpoints the WAL every minute (passive: never waiting
for the frontier's writer), which bounds what a lost `-wal` can take.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from crawler_node.datadir_layout import WATERMARK_FILENAME, DataDirLayout, scratch_path

CHECKPOINT_EVERY_S = 60.0


class FrontierLost(RuntimeError):
    """The frontier holds less than it had committed; the message is one line that says why."""


def highest_url_id(db_path: Path) -> int | None:
    """The highest id the frontier's `urls` table has handed out; 0 for a new, empty frontier,
    None when the file is missing. Raises FrontierLost for a file that is not a database."""
    if not db_path.exists():
        return None
    try:
        connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise FrontierLost(f"the frontier {db_path} cannot be opened: {exc}. {rebuild_hint(db_path.parent)}") from exc
    try:
        row = connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'urls'").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0  # nothing was ever inserted (or an empty file: SQLite reads it as a new database)
        raise FrontierLost(f"the frontier {db_path} cannot be read: {exc}. {rebuild_hint(db_path.parent)}") from exc
    except sqlite3.DatabaseError as exc:
        raise FrontierLost(f"the frontier {db_path} is damaged: {exc}. {rebuild_hint(db_path.parent)}") from exc
    finally:
        connection.close()
    return int(row[0]) if row else 0


def rebuild_hint(data_dir: Path) -> str:
    """How to go on from a damaged frontier: the end of every refusal's line."""
    return (f"Rebuild it from crawl.log and the WARC files with `crawler-node recover --data-dir {data_dir}` "
            f"(the damaged files are moved aside, never deleted)")


def read_watermark(data_dir: Path) -> int:
    try:
        return int(json.loads(DataDirLayout(data_dir).watermark.read_text())["highest_url_id"])
    except FileNotFoundError:
        return 0
    except (ValueError, KeyError, TypeError):
        return 0  # a torn watermark (a crash mid-rename cannot make one; a hand edit can): no claim


def write_watermark(data_dir: Path, highest: int) -> None:
    """Atomically: a crash leaves the old watermark or the new one."""
    path = DataDirLayout(data_dir).watermark
    temporary = scratch_path(path)
    temporary.write_text(json.dumps({"highest_url_id": highest, "written_at": time.time()}) + "\n")
    os.replace(temporary, path)


def check_frontier(data_dir: Path, db_path: Path) -> None:
    """Raise FrontierLost when the frontier at ``db_path`` holds less than the watermark says
    it had committed (see the module's docstring), or, without a watermark, when it is missing
    or empty while crawl.log is not."""
    expected = read_watermark(data_dir)
    if expected == 0:
        # No watermark (a data directory from before it, or the file moved away): a frontier
        # that is missing or empty beside a crawl.log that says a crawl happened is refused too.
        log_path = DataDirLayout(data_dir).crawl_log
        if log_path.exists() and log_path.stat().st_size > 0 and not highest_url_id(db_path):
            raise FrontierLost(
                f"the frontier {db_path} is missing or empty, but {log_path} shows a crawl happened here. "
                f"Rebuild it with `crawler-node recover --data-dir {data_dir}`, or move {log_path.name} away to "
                f"start a new crawl in this directory")
        return
    highest = highest_url_id(db_path)
    if highest is None or highest < expected:
        found = "is missing" if highest is None else f"has URLs up to id {highest}"
        raise FrontierLost(
            f"the frontier {db_path} {found}, but it had committed URLs up to id {expected}: its -wal file "
            f"was lost or damaged, or the file was replaced. Rebuild it from crawl.log and the WARC files "
            f"with `crawler-node recover --data-dir {data_dir}` (or move {WATERMARK_FILENAME} away to accept "
            f"the loss)")


class Watermark:
    """Kept up to date by the node while it runs (a recurring job, off the event loop): reads the
    frontier's highest URL id through a connection of its own (WAL lets it read while the
    frontier writes) and checkpoints the WAL now and then."""

    def __init__(self, data_dir: Path, db_path: Path) -> None:
        self._data_dir = data_dir
        self._db_path = db_path
        self._connection: sqlite3.Connection | None = None
        self._written = read_watermark(data_dir)
        self._checkpointed_at = time.monotonic()
        # A round cancelled at stop goes on in its thread while the stop's own round runs:
        # one at a time (they share the connection and the scratch file).
        self._lock = threading.Lock()

    def update(self) -> int:
        """One round (blocking: call it on a thread). Returns the watermark."""
        with self._lock:
            return self._update()

    def _update(self) -> int:
        if self._connection is None:
            self._connection = sqlite3.connect(self._db_path, check_same_thread=False, timeout=1.0)
        row = self._connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'urls'").fetchone()
        highest = int(row[0]) if row else 0
        if highest > self._written:
            write_watermark(self._data_dir, highest)
            self._written = highest
        if time.monotonic() - self._checkpointed_at >= CHECKPOINT_EVERY_S:
            self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self._checkpointed_at = time.monotonic()
        return self._written

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
