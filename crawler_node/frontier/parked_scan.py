"""Finding parked hosts on disk (frontier.host_records): seeks in the partial indexes of `urls`.

A parked host has rows but no record in memory, so the only way to it is the index: the next
host name with queued (or deferred) rows after a given name, one seek each (a skip scan, so a
host with a million queued rows costs what a host with one does). Active hosts have rows too
and are stepped over, a seek each, so every scan here is bounded in seeks, not only in hosts
found.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

NEXT_QUEUED_HOST_SQL = "SELECT host FROM urls WHERE state = 0 AND host > ? ORDER BY host LIMIT 1"
NEXT_DEFERRED_HOST_SQL = "SELECT host FROM urls WHERE state = 4 AND host > ? ORDER BY host LIMIT 1"


def next_parked(conn: sqlite3.Connection, cursor: str, wanted: int, skip: Callable[[str], bool],
                next_sql: str = NEXT_QUEUED_HOST_SQL) -> tuple[list[str], str]:
    """Up to `wanted` hosts after `cursor` in host-name order, wrapping once, that `skip`
    does not refuse (the active ones, those already taken); and the new cursor. At most a few
    times `wanted` seeks per call; the cursor moves past every host looked at, so a long run
    of skipped hosts is crossed over several calls instead of stopping each one at the same
    place."""
    found: list[str] = []
    seeks = 0
    wrapped = False
    after = start = cursor
    execute = conn.execute
    while len(found) < wanted and seeks < 4 * wanted + 64:
        seeks += 1
        row = execute(next_sql, (after,)).fetchone()
        if row is None:
            if wrapped or start == "":
                break
            wrapped, after = True, ""
            continue
        after = row[0]
        if wrapped and after > start:
            break  # round the whole ring: the rest are skipped
        cursor = after
        if not skip(after):
            found.append(after)
    return found, cursor


def with_deferred(conn: sqlite3.Connection, limit: int, skip: Callable[[str], bool]) -> list[str]:
    """Up to `limit` hosts with deferred rows that `skip` does not refuse, in host-name order
    from the first."""
    found: list[str] = []
    after = ""
    for _ in range(4 * limit + 1024):  # the skipped ones stepped over too, a seek each
        if len(found) >= limit:
            break
        row = conn.execute(NEXT_DEFERRED_HOST_SQL, (after,)).fetchone()
        if row is None:
            break
        after = row[0]
        if not skip(after):
            found.append(after)
    return found
