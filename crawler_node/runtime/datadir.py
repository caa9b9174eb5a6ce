"""The data directory, claimed by one node process at a time.

Two nodes on one directory would share one SQLite frontier and append to one crawl.log and
the same WARC names: each would lease the other's URLs and interleave records. A lock file
(``flock``, released by the kernel when the process dies, so a SIGKILLed node leaves no stale
lock) keeps a second node out. A directory that cannot be created or written is refused here
with one line, before the frontier's SQLite would raise a traceback, and so is a frontier that
lost what it had committed (runtime.frontier_guard).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from crawler_node.runtime.frontier_guard import FrontierLost, check_frontier

LOCK_FILENAME = "node.lock"


class DataDirError(RuntimeError):
    """The data directory cannot be used; the message is one line that says why."""


class DataDirLock:
    """Held for the life of the process (or until :meth:`release`)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def claim_data_dir(data_dir: Path, *, check_frontier_whole: bool = True) -> DataDirLock:
    """Create ``data_dir`` if needed, check it can be written, and lock it for this process;
    then (``check_frontier_whole``) check its frontier holds what it had committed."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirError(f"data directory {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"data directory {data_dir} cannot be created: {exc.strerror or exc}") from exc
    lock_path = data_dir / LOCK_FILENAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DataDirError(f"data directory {data_dir} cannot be written: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        by = f" (pid {holder})" if holder else ""
        raise DataDirError(f"data directory {data_dir} is in use by another node{by}") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as exc:
        os.close(fd)
        raise DataDirError(f"data directory {data_dir} cannot be written: {exc.strerror or exc}") from exc
    if check_frontier_whole:
        from crawler_node.frontier.schema import FRONTIER_FILENAME  # the frontier's file, by its own name

        try:
            check_frontier(data_dir, data_dir / FRONTIER_FILENAME)
        except FrontierLost as exc:
            os.close(fd)
            raise DataDirError(str(exc)) from exc
    return DataDirLock(lock_path, fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
