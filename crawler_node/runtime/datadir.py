"""The data directory, claimed by one node process at a time.

Two nodes on one directory would share one SQLite frontier and append to one crawl.log and
the same WARC names: each would lease the other's URLs and interleave records. A lock file
(filelock's ``flock`` lock, released by the kernel when the process dies, so a SIGKILLed node
leaves no stale lock) keeps a second node out, and names it by the PID written in the file.
A directory that cannot be created or written is refused here with one line, before the
frontier's SQLite would raise a traceback, and so is a frontier that lost what it had
committed (runtime.frontier_guard), and a part of the store that is not what the store needs
(`warc/` a file, `crawl.log` a directory, a damaged `digests.sqlite3`).

A write that fails mid-run for want of space (ENOSPC, EDQUOT) or on a disk gone read-only
(EROFS, SQLite's FULL and READONLY) is a `DiskFull`: the node stops at once, says so in one
line, and loses nothing (a page is marked done only after its records were written).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from crawler_node.datadir_layout import DataDirLayout
from crawler_node.runtime.frontier_guard import FrontierLost, check_frontier

if TYPE_CHECKING:
    from filelock import BaseFileLock


class DataDirError(RuntimeError):
    """The data directory cannot be used; the message is one line that says why."""


_DISK_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "disk read-only"}
# SQLite says ENOSPC as FULL, but a quota or a read-only remount only as a failed write (it
# keeps the errno to itself): those stop the node the same way, without a guess at the cause.
_SQLITE_CODES = {sqlite3.SQLITE_FULL: "disk full", sqlite3.SQLITE_READONLY: "disk read-only"}
_SQLITE_WRITE_FAILED = frozenset({sqlite3.SQLITE_IOERR_WRITE, sqlite3.SQLITE_IOERR_FSYNC,
                                  sqlite3.SQLITE_IOERR_TRUNCATE, sqlite3.SQLITE_IOERR_SHMSIZE})
_REMEDIES = {"disk read-only": "make it writable", "disk write failed": "check its space, quota and mount"}


class DiskFull(DataDirError):
    """A write failed for want of space, or on a disk gone read-only: nothing more can be stored.

    ``path``: the file (or directory) that could not be written, None if unknown (the node
    names its data directory then); ``what``: what it holds. Pickles with its fields, so it
    crosses from the store's process intact."""

    def __init__(self, path: str | None, what: str, reason: str = "disk full") -> None:
        self.path, self.what, self.reason = path, what, reason
        remedy = _REMEDIES.get(reason, "free space")
        where = f"{path} (filesystem {_mount_point(path)})" if path else "the data directory"
        super().__init__(f"{reason}: {where}: {what} could not be written: the node stops; {remedy} and start "
                         f"it again: nothing is lost")

    def __reduce__(self) -> tuple[type[DiskFull], tuple[str | None, str, str]]:
        return type(self), (self.path, self.what, self.reason)

    def at(self, path: Path) -> DiskFull:
        """This error, naming ``path`` if it named no file."""
        return self if self.path else DiskFull(str(path), self.what, self.reason)


def disk_full(exc: BaseException, *, path: str | Path | None, what: str) -> DiskFull | None:
    """The DiskFull that ``exc`` (an OS or SQLite error of a write) means, or None for any other."""
    if isinstance(exc, DiskFull):
        return exc
    reason = None
    if isinstance(exc, OSError):
        reason = _DISK_ERRNOS.get(exc.errno or 0)
        if reason is not None and exc.filename:
            path = os.fsdecode(exc.filename)
    elif isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", 0) or 0
        # the primary code of an extended one (SQLITE_READONLY_DBMOVED is a READONLY)
        reason = "disk write failed" if code in _SQLITE_WRITE_FAILED else _SQLITE_CODES.get(code & 0xFF)
    if reason is None:
        return None
    return DiskFull(None if path is None else str(path), what, reason)


@contextmanager
def writing(path: Callable[[], str | Path | None], what: str) -> Iterator[None]:
    """Say a full disk met inside as a DiskFull naming ``path()`` (asked only then) and ``what``."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        full = disk_full(exc, path=path(), what=what)
        if full is None:
            raise
        raise full from exc


def _mount_point(path: str) -> str:
    current = Path(path).absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    try:
        while not os.path.ismount(current) and current != current.parent:
            current = current.parent
    except OSError:
        pass
    return str(current)


class DataDirLock:
    """Held for the life of the process (or until :meth:`release`)."""

    def __init__(self, path: Path, lock: BaseFileLock) -> None:
        self.path = path
        self._lock = lock

    def release(self) -> None:
        self._lock.release()  # drops the flock; the file stays (a waiter may hold it open)


def claim_data_dir(data_dir: Path, *, check_frontier_whole: bool = True) -> DataDirLock:
    """Create ``data_dir`` if needed, check it can be written, and lock it for this process;
    then (``check_frontier_whole``) check its frontier holds what it had committed."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirError(f"data directory {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"data directory {data_dir} cannot be created: {exc.strerror or exc}") from exc
    layout = DataDirLayout(data_dir)
    lock = _take_lock(data_dir, layout.lock)
    try:
        check_store_parts(data_dir)
        if check_frontier_whole:
            try:
                check_frontier(data_dir, layout.frontier)
            except FrontierLost as exc:
                raise DataDirError(str(exc)) from exc
    except DataDirError:
        lock.release()
        raise
    return DataDirLock(layout.lock, lock)


def _take_lock(data_dir: Path, lock_path: Path) -> BaseFileLock:
    """The lock file, flock'd (filelock's UnixFileLock: released by the kernel when the process
    dies, so a SIGKILLed node leaves no stale lock), with this process's PID written in it once
    held (the refusal names the holder). Never the soft lock filelock falls back to where flock
    is missing: that one outlives a killed process."""
    # Imported here: ~40 ms that only a claim needs (the store's process imports this module too).
    from filelock import Timeout, UnixFileLock

    lock = UnixFileLock(lock_path, mode=0o644, blocking=False, thread_local=False, fallback_to_soft=False,
                        preserve_lock_file=True, on_acquired=_write_pid)
    try:
        lock.acquire()
    except Timeout:  # an OSError too: first
        holder = _read_pid(lock_path)
        by = f" (pid {holder})" if holder else ""
        raise DataDirError(f"data directory {data_dir} is in use by another node{by}") from None
    except OSError as exc:  # the lock file could not be opened, or the PID not written in it
        full = disk_full(exc, path=lock_path, what="the lock file")
        if full is not None and full.reason != "disk read-only":
            raise full from exc
        raise DataDirError(f"data directory {data_dir} cannot be written: {exc.strerror or exc}") from exc
    return lock


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())


def check_store_parts(data_dir: Path) -> None:
    """Raise DataDirError when a part of the store is there but cannot be used as what it is."""
    layout = DataDirLayout(data_dir)
    for path, holds in ((layout.warc_dir, "the WARC files"), (layout.items_dir, "the pipelines' items")):
        if path.exists() and not path.is_dir():
            raise DataDirError(f"{path} is not a directory: the store keeps {holds} there; move it away")
    log_path = layout.crawl_log
    if log_path.exists() and not log_path.is_file():
        raise DataDirError(f"{log_path} is not a file: the store appends the crawl log to it; move it away")
    digests = layout.digests
    if digests.exists():
        try:
            connection = sqlite3.connect(f"file:{digests}?mode=ro", uri=True)
            try:
                connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise DataDirError(f"{digests} cannot be read ({exc}): it only lets the store write revisit records; "
                               f"move it away and payloads seen before are stored in full again") from exc


def _read_pid(lock_path: Path) -> int | None:
    try:
        text = lock_path.read_bytes()[:32].decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
