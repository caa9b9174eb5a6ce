"""The payloads this node has archived, by digest: what makes a revisit record possible.

A response whose payload digest is already here is written as a `revisit` record that refers
to the first one (WARC 1.1 profile identical-payload-digest) instead of storing the payload
again. SQLite (WAL, synchronous=NORMAL) in the data directory: it survives restarts, and a
SIGKILL loses at most the last batch's entries, which only means those payloads are stored
in full once more. Bounded: past `max_entries` the oldest entries are dropped (their payloads
are then stored again when next seen), so the file stays at about 150 bytes per entry.

Used by the store (synchronous, one thread), which commits after the WARC records that the
entries point at are written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crawler_node.datadir_layout import DIGESTS_FILENAME as DIGESTS_FILENAME  # its file's name, for callers

_PRUNE_EVERY = 1024  # entries over the bound before a prune: one DELETE per batch at most
# Digests asked for in one SELECT (SQLite allows 32,766 variables; a store batch has a few hundred).
_LOOKUP_CHUNK = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS digests (
    id INTEGER PRIMARY KEY,          -- insertion order: the oldest go first past the bound
    digest TEXT NOT NULL UNIQUE,     -- WARC-Payload-Digest of the original record
    record_id TEXT NOT NULL,         -- its WARC-Record-ID
    url TEXT NOT NULL,               -- its WARC-Target-URI
    date TEXT NOT NULL               -- its WARC-Date
);
"""


@dataclass(frozen=True, slots=True)
class Original:
    record_id: str
    url: str
    date: str


class DigestIndex:
    def __init__(self, path: Path, *, max_entries: int = 1_000_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._max_entries = max_entries
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.executescript(_SCHEMA)
        self._count = self._conn.execute("SELECT count(*) FROM digests").fetchone()[0]
        self._in_transaction = False

    def __len__(self) -> int:
        return self._count

    def lookup(self, digest: str) -> Original | None:
        return self.lookup_many([digest]).get(digest)

    def lookup_many(self, digests: Iterable[str]) -> dict[str, Original]:
        """The originals of those of ``digests`` that are here: a store batch asks once (a
        statement per page was about a tenth of the store's CPU on small pages)."""
        wanted = list(dict.fromkeys(digests))
        found: dict[str, Original] = {}
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start:start + _LOOKUP_CHUNK]
            rows = self._conn.execute("SELECT digest, record_id, url, date FROM digests WHERE digest IN "
                                      f"({','.join('?' * len(chunk))})", chunk)
            found.update((digest, Original(record_id, url, date)) for digest, record_id, url, date in rows)
        return found

    def add(self, digest: str, original: Original) -> None:
        """Remember a payload just archived (visible to `lookup` at once; durable at `commit`)."""
        self.add_many([(digest, original)])

    def add_many(self, entries: Sequence[tuple[str, Original]]) -> None:
        """`add` for each (digest, original), in one statement; a digest already here keeps
        its first original."""
        if not entries:
            return
        if not self._in_transaction:
            self._conn.execute("BEGIN")
            self._in_transaction = True
        before = self._conn.total_changes
        self._conn.executemany(
            "INSERT INTO digests (digest, record_id, url, date) VALUES (?, ?, ?, ?) ON CONFLICT(digest) DO NOTHING",
            [(digest, o.record_id, o.url, o.date) for digest, o in entries])
        self._count += self._conn.total_changes - before

    def commit(self) -> None:
        if not self._in_transaction:
            return
        if self._count > self._max_entries + _PRUNE_EVERY:
            cursor = self._conn.execute(
                "DELETE FROM digests WHERE id IN (SELECT id FROM digests ORDER BY id LIMIT ?)",
                (self._count - self._max_entries,))
            self._count -= cursor.rowcount
        self._conn.execute("COMMIT")
        self._in_transaction = False

    def close(self) -> None:
        if self._in_transaction:
            self.commit()
        self._conn.close()
