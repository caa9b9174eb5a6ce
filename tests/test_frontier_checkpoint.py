"""The frontier's WAL copied into its database file on a thread of its own once the file is big
(frontier.checkpointer): what a commit wrote then reaches the file without waiting for the WAL
to fill, the WAL still starts over, a small file keeps SQLite's own checkpoints, and the thread
ends with the frontier."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import wait_until
from frontier_helpers import entry

from crawler_node.frontier import FRONTIER_FILENAME, Frontier
from crawler_node.frontier.checkpointer import BACKGROUND_JOURNAL_SIZE_LIMIT_BYTES, BACKGROUND_WAL_AUTOCHECKPOINT_BYTES
from crawler_node.frontier.schema import JOURNAL_SIZE_LIMIT_BYTES


def rows_in_main_file(db: Path, scratch: Path) -> int:
    """URL rows of the database file alone, as a lost -wal would leave it (a copy without the WAL)."""
    copy = scratch / "main-only.sqlite3"
    for leftover in (copy, copy.with_name(copy.name + "-wal"), copy.with_name(copy.name + "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(db, copy)
    connection = sqlite3.connect(copy)
    try:
        return connection.execute("SELECT COUNT(*) FROM urls").fetchone()[0]
    except sqlite3.DatabaseError:  # no table yet (everything in the WAL), or a copy torn by a pass
        return -1
    finally:
        connection.close()


def checkpoint_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "frontier-checkpoint"]


@pytest.mark.parametrize("from_bytes", [0, None], ids=["background", "writer-only"])
def test_a_commit_reaches_the_database_file_without_waiting_for_the_wal_to_fill(tmp_path: Path,
                                                                              from_bytes: int | None) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints_from=from_bytes) as frontier:
        frontier.add([entry(f"h{n % 7}.test", n) for n in range(500)])  # a few hundred KB: far below 32 MB
        db = frontier.path
        if from_bytes is not None:
            wait_until(lambda: rows_in_main_file(db, scratch) == 500, 10, "the rows copied into the file")
        else:
            # The writer's own checkpoint waits for ~32 MB of WAL: the file alone holds none of them.
            assert rows_in_main_file(db, scratch) in (-1, 0)


def test_the_wal_starts_over_while_commits_keep_coming(tmp_path: Path) -> None:
    """A background pass never completes a WAL that is always written to; the writer's own
    checkpoint finishes it and the next commit starts the WAL over, so it stays near the
    writer's threshold (here 64 pages of 2 KiB) instead of growing with everything written.
    While a pass holds the checkpoint lock the writer's own checkpoint is skipped and the WAL
    grows (to 2.3 MB once on a loaded machine): the file only has to stay well below what was
    written, which a WAL that never started over would exceed."""
    with Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints_from=0) as frontier:
        frontier._db.conn.execute("PRAGMA wal_autocheckpoint = 64")  # 128 KiB instead of 128 MB
        wal = frontier.path.with_name(frontier.path.name + "-wal")
        for batch in range(400):
            frontier.add([entry(f"h{n % 13}.test", batch * 250 + n) for n in range(250)])
        written = frontier.path.stat().st_size
        assert written > 12 * 1024 * 1024, "the test wrote too little to tell"
        assert wal.stat().st_size < written / 4, f"WAL {wal.stat().st_size} bytes after {written} written"


def test_the_thread_starts_once_the_file_passes_its_size_and_raises_the_writers_threshold(tmp_path: Path) -> None:
    threshold = 1024 * 1024
    with Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints_from=threshold) as frontier:
        conn = frontier._db.conn
        conn.execute("PRAGMA wal_autocheckpoint = 64")  # the file grows as the writer checkpoints
        frontier.add([entry("small.test", n) for n in range(10)])
        assert frontier.path.stat().st_size < threshold
        assert not checkpoint_threads(), "a small file keeps SQLite's own checkpoints"
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 64
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == JOURNAL_SIZE_LIMIT_BYTES
        for batch in range(100):
            if frontier.path.stat().st_size >= threshold:
                break
            frontier.add([entry(f"h{n % 13}.test", batch * 250 + n) for n in range(250)])
        frontier.add([entry("past.test", 0)])  # the first commit with the file past the threshold
        assert frontier.path.stat().st_size >= threshold, "the test wrote too little to tell"
        assert len(checkpoint_threads()) == 1
        pages = BACKGROUND_WAL_AUTOCHECKPOINT_BYTES // conn.execute("PRAGMA page_size").fetchone()[0]
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == pages
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == BACKGROUND_JOURNAL_SIZE_LIMIT_BYTES
        frontier.add([entry("later.test", 0)])
        assert len(checkpoint_threads()) == 1, "started once"


def test_a_file_already_big_starts_with_the_thread_and_closing_ends_it(tmp_path: Path) -> None:
    path = tmp_path / FRONTIER_FILENAME
    with Frontier(path) as frontier:
        frontier.add([entry("a.test", n) for n in range(10)])
    frontier = Frontier(path, background_checkpoints_from=path.stat().st_size)
    assert len(checkpoint_threads()) == 1
    frontier.add([entry("a.test", 10)])
    frontier.close()
    assert not checkpoint_threads()
