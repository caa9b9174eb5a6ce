"""The frontier's database: its tables, the connection's settings, and migrating old files.

Everything per URL lives in SQLite (WAL, synchronous=NORMAL: a commit survives a SIGKILL of
the process, not a power cut). The table layouts are read directly by tests and operators, so
they only ever gain columns; `migrate` brings a database of an earlier layout up to date.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections import Counter
from pathlib import Path

from crawler_node.core.urls import host_of

# Negative = KiB: bounds the page cache (~8 MB) whatever the size of the database.
CACHE_SIZE_KIB = -8000
# Pages of a new database (an existing one keeps its own). A commit writes every page it dirtied
# to the WAL, and a batch dirties pages all over: the rows it leases or finishes, a seen-set
# leaf per new URL, a queue leaf per host. Smaller pages write fewer bytes for the same rows.
# Measured on a 20k-page crawl: 2 KiB costs ~7% less CPU than 4 KiB; 1 KiB no less than 2 KiB.
PAGE_SIZE_BYTES = 2048
# Checkpoint every ~32 MB of WAL rather than SQLite's default ~4 MB: a page that many commits
# dirty (the rightmost leaf of a busy host's queue) is then copied into the database once, not
# once per commit. Measured: about a third less time per add at 1M URLs.
WAL_AUTOCHECKPOINT_BYTES = 32 * 1024 * 1024
# Keeps the WAL file from staying huge on disk after a burst of writes.
JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
# PRAGMA user_version of the current layout. 1: `hosts` has the politeness columns and a row
# for every host that has rows in `urls`. 2: `urls` and `outbox` have `redirects`. 3: `urls` and
# `outbox` have `via`; `urls` has what a recrawl needs (etag, last_modified, due_at, visits).
# 4: `hosts` has `accepted`, the URLs taken in per host (--max-pages-per-host).
# 5: `replica` keeps a neighbour's queued URLs as well as its fetched ones (`state` and the
# columns a queued URL needs), `replica_hosts` its hosts' politeness, `outbox` rows can be
# replicas of queued URLs and carry a host's politeness; `meta` holds this database's
# incarnation and `peers` the last incarnation heard from each peer (frontier.replica).
# 6: a successor that was away is sent a *refresh* of its replica (frontier.replica):
# `outbox.refresh` and `replica.refresh` name the refresh a queued row was sent in, and
# `refresh_owed` the successors owed one.
# 7: `replica` is keyed by (host, url), without the index of its queued rows by host, and
# `replica_queued_hosts` lists the hosts a takeover looks at (`_rekey_replica`).
# 8: a lease is a row of `leases`, its URL's row left queued (state 0 is never changed to 1),
# and the attempt it is counted in that row when the lease ends (`FrontierDb.recover_leases`
# counts those of a previous run). Older files' leased rows are queued again at open as ever.
SCHEMA_VERSION = 8

REPLICA_TABLE = """CREATE TABLE IF NOT EXISTS replica (
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    state INTEGER NOT NULL DEFAULT 2,
    depth INTEGER NOT NULL DEFAULT 0,
    priority INTEGER NOT NULL DEFAULT 0,
    hops INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0,
    via TEXT,
    refresh TEXT,                    -- a queued row: the last refresh of its host that named it
    PRIMARY KEY (host, url)
) WITHOUT ROWID"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    -- AUTOINCREMENT: an id is a lease's handle and is never given to another URL, even after
    -- its row is handed to another node (a late outcome for it then finds nothing to change)
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL UNIQUE,        -- the UNIQUE index is the exact URL-seen set
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    state INTEGER NOT NULL,          -- 0 queued (leased if in `leases`), 2 done, 3 failed, 4 deferred;
                                     -- 1: leased, in a file before layout 8 (queued again at open)
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    lease_expires REAL,
    enqueued_at REAL NOT NULL,
    redirects INTEGER NOT NULL DEFAULT 0, -- redirects followed to reach this URL (--max-redirects)
    via TEXT,                        -- the page it was found on (NULL: a seed, a submitted URL)
    etag TEXT,                       -- validators of the last recorded fetch, for a recrawl's
    last_modified TEXT,              --   If-None-Match / If-Modified-Since
    due_at REAL,                     -- a done URL is fetched again from then (NULL: never)
    visits INTEGER NOT NULL DEFAULT 0,  -- fetches recorded so far
    history BLOB                     -- what its recrawls saw (core.change_rate.History; NULL: none)
);
-- Leasing walks this in order; not_before rides along so waiting rows are skipped in the index.
CREATE INDEX IF NOT EXISTS urls_ready ON urls(host, priority DESC, id, not_before)
    WHERE state = 0;
-- Leased rows are found through the frontier's in-memory leases; databases made before that
-- lose the index.
DROP INDEX IF EXISTS urls_leased;
-- The URLs leased now, by urls.id, each with its expiry (frontier.leasing). A lease writes a
-- row here, at the end of a table as small as what is in flight, instead of rewriting its
-- URL's row and the two queue indexes above it, leaves anywhere in a file of millions of rows
-- (a lease round then wrote a random page per URL, and its commits met the WAL's checkpoints:
-- at 1M URLs a round's p99 299-502 ms, 17-20 ms since; `bench/scale.py`). So a row of
-- `urls` in state 0 is leased when its id is here (NOT_LEASED in frontier.statements); its
-- attempt is counted in it when the lease ends, or at the next open.
CREATE TABLE IF NOT EXISTS leases (
    id INTEGER PRIMARY KEY,
    expires REAL NOT NULL
);
-- Makes the oldest queued age a single index probe instead of a scan.
CREATE INDEX IF NOT EXISTS urls_age ON urls(enqueued_at) WHERE state = 0;
-- Load shedding defers the lowest priority first, newest first among equals
-- (frontier.shedding): without this a step scanned every queued row through urls_age and
-- sorted them, minutes at 10M queued with the frontier's thread held (no lease, no status).
-- A new row's entry goes to the hot start of its priority's range; a file without it builds it
-- once at open.
CREATE INDEX IF NOT EXISTS urls_shed ON urls(priority, id DESC) WHERE state = 0;
-- Deferred rows come back per host, highest priority first; only deferred rows pay for this.
CREATE INDEX IF NOT EXISTS urls_deferred ON urls(host, priority DESC, id) WHERE state = 4;
-- Failed rows (few), and the leased rows a file from before layout 8 may hold (none since, an
-- empty index): with these the totals per state and the leases of an old file are found at
-- open from indexes, not by two scans of `urls` (7.1 s to open a 10M frontier, 3.5 GB read
-- twice; FrontierDb.load_counts, recover_leases). A file without them builds them once.
CREATE INDEX IF NOT EXISTS urls_failed ON urls(state) WHERE state = 3;
CREATE INDEX IF NOT EXISTS urls_leased_before_8 ON urls(state) WHERE state = 1;
-- One row per host that has rows in urls (made when the host's in-memory record is), with
-- the durable part of its politeness (records.HostPoliteness). Ownership sweeps page
-- through it instead of scanning urls.
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL DEFAULT 0,
    crawl_delay REAL NOT NULL DEFAULT 0,
    backoff_level INTEGER NOT NULL DEFAULT 0,
    last_throttle REAL,
    -- rows this host has had in urls (queued ones, and ones fetched elsewhere): the count the
    -- per-host page cap is held to; it only grows, so a finished URL still counts
    accepted INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- URLs on their way to another node, kept until that node acknowledges them (cluster).
-- seen = 1: already fetched here; the new owner only records it in its seen-set.
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused (ack matches the URL as well)
    peer TEXT NOT NULL,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    seen INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0,
    via TEXT,
    replica INTEGER NOT NULL DEFAULT 0,  -- 1: queued here, for the receiver's replica only
    next_eligible REAL,              -- on a replica: its host's politeness when it was sent
    crawl_delay REAL,                --   (NULL: nothing to honour)
    -- on a replica: the refresh it is part of; with url = '', the end of its host's refresh
    refresh TEXT
);
CREATE INDEX IF NOT EXISTS outbox_peer ON outbox(peer, id);
-- URLs of a neighbour on the ring, kept by its successor (frontier.replica): those it fetched
-- (state 2), which a takeover does not fetch again, and those it has queued (state 0), which a
-- takeover queues here and a neighbour that comes back empty gets back. Keyed by (host, url):
-- a takeover reads a host's rows from one place, and a row written costs one B-tree, not a
-- table keyed by URL and an index of the queued rows by host (layout 7: 27 against 58 µs to
-- add a queued row and then make it fetched, the successor's share of every page a neighbour
-- crawls).
""" + REPLICA_TABLE + """;
-- The hosts a takeover looks at for queued replica rows (frontier.replica.promote): every host
-- given one since a promote last found it had none. A row per host, not per URL: the next
-- takeover pages through the hosts with queued rows, not through every fetched row.
CREATE TABLE IF NOT EXISTS replica_queued_hosts (
    host TEXT PRIMARY KEY
) WITHOUT ROWID;
-- The politeness a neighbour had for its hosts, as its replicas said: a takeover honours it.
CREATE TABLE IF NOT EXISTS replica_hosts (
    host TEXT PRIMARY KEY,
    next_eligible REAL NOT NULL,
    crawl_delay REAL NOT NULL
) WITHOUT ROWID;
-- This database's own facts: 'incarnation', made with the database, names this frontier to
-- the peers (a node that comes back with a new one lost its data directory).
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- The incarnation last heard from each peer.
CREATE TABLE IF NOT EXISTS peers (
    peer TEXT PRIMARY KEY,
    incarnation TEXT NOT NULL
) WITHOUT ROWID;
-- Peers seen down since this node last refreshed their replica of its queue (frontier.replica):
-- what it queued and fetched meanwhile went to another successor.
CREATE TABLE IF NOT EXISTS refresh_owed (
    peer TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

# Indexes on columns that migrate() may have to add first: created after it, not in SCHEMA,
# whose statements run on a file of any layout.
INDEXES_ON_ADDED_COLUMNS = """
-- Done rows due for a recrawl, oldest due first (Frontier.requeue_due). Only rows given a
-- due_at pay for it; a query must repeat both conditions for SQLite to use it.
CREATE INDEX IF NOT EXISTS urls_due ON urls(due_at) WHERE state = 2 AND due_at IS NOT NULL;
"""

# Columns tables gained after their first layout, as ALTER TABLE adds them (at the end, which
# is where SCHEMA puts them too, so old and new files have the same column order). Adding a
# column with a constant default rewrites no row: it costs the same on a file of any size.
_COLUMNS_ADDED = {
    "hosts": {  # first layout: host, next_eligible
        "crawl_delay": "REAL NOT NULL DEFAULT 0",
        "backoff_level": "INTEGER NOT NULL DEFAULT 0",
        "last_throttle": "REAL",
        "accepted": "INTEGER NOT NULL DEFAULT 0",  # layout 4
    },
    "urls": {
        "redirects": "INTEGER NOT NULL DEFAULT 0",  # layout 2
        "via": "TEXT",  # layout 3, and the four after it
        "etag": "TEXT",
        "last_modified": "TEXT",
        "due_at": "REAL",
        "visits": "INTEGER NOT NULL DEFAULT 0",
        # added without a new layout number: a file without it gains it at open (the version
        # only orders the migrations that rewrite rows, and this one rewrites none)
        "history": "BLOB",
    },
    "outbox": {
        "redirects": "INTEGER NOT NULL DEFAULT 0",  # layout 2
        "via": "TEXT",  # layout 3
        "replica": "INTEGER NOT NULL DEFAULT 0",  # layout 5, and the two after it
        "next_eligible": "REAL",
        "crawl_delay": "REAL",
        "refresh": "TEXT",  # layout 6
    },
    "replica": {  # first layout: url; its rows are all fetched ones (state's default)
        "host": "TEXT",  # layout 5, and the ones after it
        "state": "INTEGER NOT NULL DEFAULT 2",
        "depth": "INTEGER NOT NULL DEFAULT 0",
        "priority": "INTEGER NOT NULL DEFAULT 0",
        "hops": "INTEGER NOT NULL DEFAULT 0",
        "redirects": "INTEGER NOT NULL DEFAULT 0",
        "via": "TEXT",
        "refresh": "TEXT",  # layout 6
    },
}


def connect(path: Path) -> sqlite3.Connection:
    """Open (or create) the database at `path`, set up and migrated to the current layout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created on the caller's thread, used on the frontier's worker thread: never both.
    # isolation_level=None: the frontier issues BEGIN/COMMIT itself, one per public call.
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE_BYTES}")  # before WAL: it fixes the size
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    # A statement that changes many rows (a batch insert, a lease) keeps a statement journal
    # to undo itself on error: in a temp file, that is a file and a write per page it
    # changes, a quarter of the frontier's CPU. Sorts stay small (LIMITed or on an index).
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA cache_size = {CACHE_SIZE_KIB}")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_BYTES // page_size}")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT_BYTES}")
    conn.executescript(SCHEMA)
    migrate(conn)
    conn.executescript(INDEXES_ON_ADDED_COLUMNS)
    # The first open of a database names it; a migrated one is named at its first open too (its
    # peers have heard no incarnation from it before, so nothing is given back for it).
    conn.execute("INSERT INTO meta (key, value) VALUES ('incarnation', ?) ON CONFLICT(key) DO NOTHING",
                 (secrets.token_hex(8),))
    return conn


def incarnation(conn: sqlite3.Connection) -> str:
    """The name this database was given at its first open (see the meta table)."""
    return conn.execute("SELECT value FROM meta WHERE key = 'incarnation'").fetchone()[0]


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a database of an earlier layout to SCHEMA_VERSION, in one transaction."""
    missing = [(table, name, declaration) for table, added in _COLUMNS_ADDED.items()
               for name, declaration in added.items() if name not in _columns(conn, table)]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if not missing and version >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN")
    try:
        for table, name, declaration in missing:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
        if version < 1:
            # Earlier layouts had a hosts row only for hosts given a next-eligible time. One
            # pass over urls, a primary-key probe per row; no DISTINCT, whose sorter would hold
            # every host at once. next_eligible is named: the first layout has no default for it.
            # (WHERE true: an upsert after a SELECT needs it, or ON reads as a join's.)
            conn.execute(
                "INSERT INTO hosts (host, next_eligible) SELECT host, 0 FROM urls WHERE true"
                " ON CONFLICT(host) DO NOTHING"
            )
        if version < 4:
            _count_accepted(conn)
        if "host" not in _key(conn, "replica"):
            _rekey_replica(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _count_accepted(conn: sqlite3.Connection) -> None:
    """Fill `hosts.accepted` from the rows a file of an earlier layout already has, so the page
    cap counts what was taken in before it existed. One pass over urls, once; it holds a count
    per host (no index on urls.host covers every row, and a GROUP BY would sort them all)."""
    counts = Counter(host for (host,) in conn.execute("SELECT host FROM urls"))
    conn.executemany("UPDATE hosts SET accepted = ? WHERE host = ?", [(n, host) for host, n in counts.items()])


def _rekey_replica(conn: sqlite3.Connection) -> None:
    """Copy a replica of a layout before 7 (keyed by url, host NULL in rows from before layout
    5) into one keyed by (host, url), and list the hosts of its queued rows for a takeover. One
    pass over the rows, once; the index of queued rows by host goes with the old table."""
    conn.create_function("crawler_host_of", 1, host_of, deterministic=True)
    conn.execute("ALTER TABLE replica RENAME TO replica_before_7")
    conn.execute("DROP INDEX IF EXISTS replica_queued")
    conn.execute(REPLICA_TABLE)
    conn.execute("INSERT INTO replica (host, url, state, depth, priority, hops, redirects, via, refresh)"
                 " SELECT COALESCE(host, crawler_host_of(url)), url, state, depth, priority, hops, redirects, via,"
                 " refresh FROM replica_before_7 WHERE true ON CONFLICT DO NOTHING")
    conn.execute("DROP TABLE replica_before_7")
    conn.execute("INSERT INTO replica_queued_hosts (host) SELECT DISTINCT host FROM replica WHERE state = 0"
                 " ON CONFLICT DO NOTHING")


def _key(conn: sqlite3.Connection, table: str) -> list[str]:
    """The columns of `table`'s primary key, in order."""
    return [row[1] for row in sorted(conn.execute(f"PRAGMA table_info({table})"), key=lambda row: row[5])
            if row[5]]


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
