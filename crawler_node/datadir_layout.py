"""Every file and directory name in a node's data directory, and nothing else.

The layout is contract (README, "Data directory"): operators, `crawler-node recover` and the
tests find the frontier, the crawl log and the archive by these names. Every module that makes
a path in the data directory takes its name from here. This module imports nothing of the
package, so the names sit below every layer that uses them (runtime, store, frontier, cluster,
node, tools) and no layer has to import another one for a name.

    node.lock                          the claim of the process running on it (runtime.datadir)
    identity.json                      the node id and crawl name of its first start (runtime.identity)
    frontier.sqlite3 (-wal, -shm)      the durable frontier (frontier.schema)
    frontier.watermark                 the highest URL id it committed (runtime.frontier_guard)
    frontier-lost-<stamp>/             a damaged frontier, moved aside by `crawler-node recover`
    crawl.log, crawl.log.<stamp>[-<n>] the crawl log and its rotated files (store.crawl_log)
    warc/<node>-<stamp>-<serial>.warc.gz, .cdxj   the archive and its indexes (store.warc_files, store.cdxj)
    items/<node>-<stamp>-<serial>.jsonl           the pipelines' items (store.items)
    digests.sqlite3                    payload digests, for revisit records (store.digests)
    members.json                       members heard through --peer-dns (cluster.known_members)
    paused.json, control.json, dropped_hosts.json  an operator's pause, the last pause or resume,
                                       the hosts dropped (node.operator)
    crawl_totals.json                  the rotated crawl.log files' tallies, a cache (store.crawl_totals)
    stats.json                         the summary of a crawl that ended (batch: --exit-when-idle, crawl)

A file written whole is written to `<name>.tmp` first and renamed over it; the torn tail that a
kill left in an appended file is cut at start and kept in `<name>.torn`, never destroyed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOCK_FILENAME = "node.lock"
IDENTITY_FILENAME = "identity.json"
FRONTIER_FILENAME = "frontier.sqlite3"
# SQLite's files beside a database in WAL mode: what it committed since the last checkpoint,
# and the index of that (SQLite names them so; listed here so that a move takes all three).
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm")
WATERMARK_FILENAME = "frontier.watermark"
FRONTIER_LOST_PREFIX = "frontier-lost-"
CRAWL_LOG_FILENAME = "crawl.log"
CRAWL_TOTALS_FILENAME = "crawl_totals.json"
STATS_FILENAME = "stats.json"
WARC_DIRNAME = "warc"
WARC_SUFFIX = ".warc.gz"
CDXJ_SUFFIX = ".cdxj"
# Not *.cdxj: pywb never reads a half-written index. One fixed name per index, so a temp file
# left by a killed run is overwritten when the file is indexed again, not left behind.
CDXJ_TEMP_SUFFIX = ".cdxj.tmp"
ITEMS_DIRNAME = "items"
ITEMS_SUFFIX = ".jsonl"
DIGESTS_FILENAME = "digests.sqlite3"
KNOWN_MEMBERS_FILENAME = "members.json"
PAUSE_FILENAME = "paused.json"
CHANGE_FILENAME = "control.json"  # the last pause or resume, for members catching up
DROPPED_FILENAME = "dropped_hosts.json"  # hosts an operator dropped: their URLs are never fetched
SCRATCH_SUFFIX = ".tmp"
TORN_SUFFIX = ".torn"


def scratch_path(path: Path) -> Path:
    """Where ``path`` is written whole before it is renamed over ``path``."""
    return path.with_name(path.name + SCRATCH_SUFFIX)


def torn_path(path: Path) -> Path:
    """Where the torn tail cut from ``path`` is kept."""
    return path.with_name(path.name + TORN_SUFFIX)


def sqlite_files(database: Path) -> tuple[Path, ...]:
    """A SQLite database in WAL mode and the files SQLite keeps beside it."""
    return (database, *(database.with_name(database.name + suffix) for suffix in SQLITE_SIDE_SUFFIXES))


def rotated_crawl_log_name(stamp: str, serial: int = 0) -> str:
    """The name a full crawl.log is renamed to: `crawl.log.<stamp>`, `-<serial>` if taken."""
    return f"{CRAWL_LOG_FILENAME}.{stamp}" + (f"-{serial}" if serial else "")


def series_file_name(node_id: str, stamp: str, serial: int, suffix: str) -> str:
    """A file of the store's size-rotated series (WARC, items): `<node_id>-<stamp>-<serial:05d><suffix>`."""
    return f"{node_id}-{stamp}-{serial:05d}{suffix}"


@dataclass(frozen=True, slots=True)
class DataDirLayout:
    """The paths of one data directory (no I/O but :meth:`rotated_crawl_logs`)."""

    root: Path

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILENAME

    @property
    def identity(self) -> Path:
        return self.root / IDENTITY_FILENAME

    @property
    def frontier(self) -> Path:
        return self.root / FRONTIER_FILENAME

    @property
    def frontier_files(self) -> tuple[Path, ...]:
        """The frontier's database and SQLite's files beside it."""
        return sqlite_files(self.frontier)

    @property
    def watermark(self) -> Path:
        return self.root / WATERMARK_FILENAME

    def frontier_lost(self, stamp: str) -> Path:
        """Where `crawler-node recover` moves a damaged frontier's files."""
        return self.root / f"{FRONTIER_LOST_PREFIX}{stamp}"

    @property
    def crawl_log(self) -> Path:
        return self.root / CRAWL_LOG_FILENAME

    def rotated_crawl_logs(self) -> list[Path]:
        """The rotated crawl.log files there are, oldest first (their stamps sort by time)."""
        return sorted(self.root.glob(f"{CRAWL_LOG_FILENAME}.[0-9]*"))

    @property
    def warc_dir(self) -> Path:
        return self.root / WARC_DIRNAME

    @property
    def items_dir(self) -> Path:
        return self.root / ITEMS_DIRNAME

    @property
    def digests(self) -> Path:
        return self.root / DIGESTS_FILENAME

    @property
    def known_members(self) -> Path:
        return self.root / KNOWN_MEMBERS_FILENAME

    @property
    def pause(self) -> Path:
        return self.root / PAUSE_FILENAME

    @property
    def change(self) -> Path:
        return self.root / CHANGE_FILENAME

    @property
    def dropped_hosts(self) -> Path:
        return self.root / DROPPED_FILENAME
