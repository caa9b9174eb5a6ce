"""The frontier's WAL copied into its database file on a thread of its own
(frontier.checkpointer): what a commit wrote reaches the file without waiting for the WAL to
fill, the WAL still starts over, and the thread ends with the frontier."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import wait_until
from frontier_helpers import entry

from crawler_node.frontier import FRONTIER_FILENAME, Frontier


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


@pytest.mark.parametrize("background", [True, False], ids=["background", "writer-only"])
def test_a_commit_reaches_the_database_file_without_waiting_for_the_wal_to_fill(tmp_path: Path,
                                                                              background: bool) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints=background) as frontier:
        frontier.add([entry(f"h{n % 7}.test", n) for n in range(500)])  # a few hundred KB: far below 32 MB
        db = frontier.path
        if background:
            wait_until(lambda: rows_in_main_file(db, scratch) == 500, 10, "the rows copied into the file")
        else:
            # The writer's own checkpoint waits for ~32 MB of WAL: the file alone holds none of them.
            assert rows_in_main_file(db, scratch) in (-1, 0)


def test_the_wal_starts_over_while_commits_keep_coming(tmp_path: Path) -> None:
    """A background pass never completes a WAL that is always written to; the writer's own
    checkpoint finishes it and the next commit starts the WAL over, so it stays near the
    threshold (here 64 pages of 2 KiB) instead of growing with everything written."""
    with Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints=True) as frontier:
        frontier._core.conn.execute("PRAGMA wal_autocheckpoint = 64")  # 128 KiB instead of 32 MB
        wal = frontier.path.with_name(frontier.path.name + "-wal")
        for batch in range(200):
            frontier.add([entry(f"h{n % 13}.test", batch * 250 + n) for n in range(250)])
        written = frontier.path.stat().st_size
        assert written > 4 * 1024 * 1024, "the test wrote too little to tell"
        assert wal.stat().st_size < 2 * 1024 * 1024, f"WAL {wal.stat().st_size} bytes after {written} written"


def test_closing_the_frontier_ends_its_checkpoint_thread(tmp_path: Path) -> None:
    frontier = Frontier(tmp_path / FRONTIER_FILENAME, background_checkpoints=True)
    frontier.add([entry("a.test", n) for n in range(10)])
    assert any(thread.name == "frontier-checkpoint" for thread in threading.enumerate())
    frontier.close()
    assert not any(thread.name == "frontier-checkpoint" for thread in threading.enumerate())
