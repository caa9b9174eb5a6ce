"""The data directory, claimed by one node process at a time.

Two nodes on one directory would share one SQLite frontier and append to one crawl.log and
the same WARC names: each would lease the other's URLs and interleave records. A lock file
(``flock``, released by the kernel when the process dies, so a SIGKILLed node leaves no stale
lock) keeps a second node out. A directory that cannot be created or written is refused here
with one line, before the frontier's SQLite would raise a traceback, and so is a frontier that
lost what it had committed (runtime.frontier_guard), and a part of the store that is not what
the store needs (`warc/` a file, `crawl.log` a directory, a damaged `digests.sqlite3`).

A write that fails mid-run for want of space (ENOSPC, EDQUOT) or on a disk gone read-only
(EROFS, SQLite's FULL and READONLY) is a `DiskFull`: the node stops at once, says so in one
line, and loses nothing (a page is marked done only after its records were written).
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from crawler_node.datadir_layout import DataDirLayout
from crawler_node.runtime.frontier_guard import FrontierLost, check_frontier


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
    layout = DataDirLayout(data_dir)
    lock_path = layout.lock
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
        full = disk_full(exc, path=lock_path, what="the lock file")
        if full is not None and full.reason != "disk read-only":
            raise full from exc
        raise DataDirError(f"data directory {data_dir} cannot be written: {exc.strerror or exc}") from exc
    try:
        check_store_parts(data_dir)
    except DataDirError:
        os.close(fd)
        raise
    if check_frontier_whole:
        try:
            check_frontier(data_dir, layout.frontier)
        except FrontierLost as exc:
            os.close(fd)
            raise DataDirError(str(exc)) from exc
    return DataDirLock(lock_path, fd)


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


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
