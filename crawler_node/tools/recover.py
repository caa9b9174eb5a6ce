"""`crawler-node recover`: rebuild a lost or damaged frontier from what the crawl wrote down.

The frontier is the one copy of the crawl's queue. When it is lost (the node refuses to start:
runtime.frontier_guard), what the crawl did is still on disk: crawl.log has a line for every
attempt, and the WARC metadata records list every parsed page's links. From them:

- a URL counts as done only when its OWN last outcome says so: fetched, or ended without a
  request for a reason of its own (robots, a trap guard, the host's page cap). It is recorded
  as seen and done, never fetched again;
- a URL whose last attempt failed in a way that is retried (timeout, connection, throttled,
  server error, DNS), or whose outcome cannot be read, is queued again, its retry budget fresh;
- an `out_of_scope` line is no outcome of the URL's own: it says a page of ANOTHER host linked
  to it (the default scope keeps a link on its page's host), while the URL may be queued from a
  page of its own host. Such a URL is never counted done; it is queued again when an archived
  page links to it in scope, and otherwise stays ended, as it was in the crawl;
- the links of the pages fetched (metadata records' outlinks) and redirect targets
  (crawl.log's location) that are in scope and not yet done are queued, one step deeper.

It ends with a report: URLs recovered (done), requeued, ended (seen only out of scope from
another host's page, linked in scope from no archived page) and unknown (lines that cannot be
read, outcomes it does not know: those URLs are queued again, never taken as done).

The damaged files are moved aside (`frontier-lost-<stamp>/`), never deleted. What was queued
but never reached crawl.log, and never linked from an archived page (seeds not yet fetched,
URLs submitted and not yet fetched), cannot be rebuilt: submit them again.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.scope import Scope
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.datadir_layout import WARC_SUFFIX, WATERMARK_FILENAME, DataDirLayout
from crawler_node.frontier import InboundBatch, UrlEntry
from crawler_node.frontier.frontier import Frontier
from crawler_node.runtime.datadir import DataDirError, claim_data_dir
from crawler_node.runtime.frontier_guard import FrontierLost, check_frontier, highest_url_id, write_watermark
from crawler_node.runtime.identity import read_identity_or_none
from crawler_node.store.crawl_log import CrawlLog
from crawler_node.store.rebuild import missing_lines

# The outcomes the retry policy tries again: their URL is queued again, not finished.
RETRIED = frozenset({FetchOutcome.TIMEOUT, FetchOutcome.CONNECTION, FetchOutcome.THROTTLED,
                     FetchOutcome.SERVER_ERROR, FetchOutcome.DNS, FetchOutcome.PROXY,
                     FetchOutcome.API_THROTTLED, FetchOutcome.API_QUOTA})
BATCH = 5000


# Not an outcome of the URL's own: a page of another host linked to it (see the docstring).
CONTEXTUAL = frozenset({FetchOutcome.OUT_OF_SCOPE})


@dataclass
class Recovered:
    done: int = 0
    requeued: int = 0
    links: int = 0
    ended: int = 0  # seen only out of scope from another host's page, linked in scope nowhere
    unknown: int = 0  # lines that cannot be read, outcomes not known: their URLs queued again
    rebuilt_lines: int = 0  # crawl.log lines a kill cut, rebuilt from their WARC records
    moved_to: Path | None = None
    skipped_lines: int = 0
    unreadable_files: list[str] = field(default_factory=list)


def crawl_log_lines(data_dir: Path, recovered: Recovered) -> Iterator[dict[str, Any]]:
    """Every crawl.log line, rotated files first; a torn or garbled line is skipped, counted."""
    layout = DataDirLayout(data_dir)
    for path in [*layout.rotated_crawl_logs(), layout.crawl_log]:
        if not path.exists():
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for text in handle:
                try:
                    entry = json.loads(text)
                    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                        yield entry
                        continue
                except ValueError:
                    pass
                recovered.skipped_lines += 1


def outlinks(data_dir: Path, recovered: Recovered) -> Iterator[tuple[str, list[str]]]:
    """(page URL, its links) of every metadata record in the WARC files."""
    for path in sorted(DataDirLayout(data_dir).warc_dir.glob(f"*{WARC_SUFFIX}")):
        try:
            with open(path, "rb") as handle:
                for record in ArchiveIterator(handle):
                    if record.rec_type != "metadata":
                        continue
                    page = record.rec_headers.get_header("WARC-Target-URI")
                    block = record.content_stream().read().decode("utf-8", "replace")
                    links = [line[len("outlink: "):].strip() for line in block.splitlines()
                             if line.startswith("outlink: ")]
                    if page:
                        yield page, links
        except Exception as exc:  # noqa: BLE001 - a torn last file still gave what it had
            recovered.unreadable_files.append(f"{path.name}: {type(exc).__name__}: {exc}")


def recover(data_dir: Path, *, scope: Scope, lease_timeout_s: float = 120.0) -> Recovered:
    recovered = Recovered()
    layout = DataDirLayout(data_dir)
    db = layout.frontier
    aside = layout.frontier_lost(time.strftime("%Y%m%d%H%M%S", time.gmtime()))
    for damaged in layout.frontier_files:
        if damaged.exists():
            aside.mkdir(exist_ok=True)
            damaged.rename(aside / damaged.name)
            recovered.moved_to = aside

    # The lines a kill cut (or never wrote) after their WARC records, rebuilt first, as a node's
    # start would (store.rebuild): those pages are done, not unknown.
    identity = read_identity_or_none(data_dir)
    lost_lines = missing_lines(layout.warc_dir, layout.crawl_log, identity.node_id if identity else "recovered")
    if lost_lines:
        log_file = CrawlLog(layout.crawl_log)  # cuts a torn tail first (kept in crawl.log.torn)
        log_file.append_lines(lost_lines)
        log_file.close()
        recovered.rebuilt_lines = len(lost_lines)
    last: dict[str, dict[str, Any]] = {}  # URL -> its last line of its own (the outcome that counts)
    contextual: set[str] = set()  # URLs with an out_of_scope line from another host's page
    for entry in crawl_log_lines(data_dir, recovered):
        if entry.get("kind", "page") == "robots":
            continue
        if entry.get("outcome") in CONTEXTUAL:
            contextual.add(entry["url"])
        else:
            last[entry["url"]] = entry
    recovered.unknown = recovered.skipped_lines
    with Frontier(db, lease_timeout_s=lease_timeout_s) as frontier:
        done: list[UrlEntry] = []
        again: list[UrlEntry] = []
        for url, entry in last.items():
            item = UrlEntry(url, entry.get("host") or host_of(url), int(entry.get("depth") or 0), 0, 0, 0,
                            entry.get("via"))
            try:
                outcome = FetchOutcome(str(entry.get("outcome")))
            except ValueError:
                recovered.unknown += 1  # at least once: an outcome not understood is no proof
                again.append(item)
                continue
            (again if outcome in RETRIED else done).append(item)
        for start in range(0, len(done), BATCH):
            batch = done[start:start + BATCH]
            recovered.done += len(batch) - frontier.take_in(InboundBatch(seen=batch)).duplicates
        for start in range(0, len(again), BATCH):
            recovered.requeued += len(frontier.add(again[start:start + BATCH]).accepted)
        found: list[UrlEntry] = []
        for page, links in outlinks(data_dir, recovered):
            depth = int(last.get(page, {}).get("depth") or 0) + 1
            found += _in_scope(links, page, depth, scope, last)
        for entry in last.values():
            if entry.get("location") and entry.get("status") is not None:
                # A redirect may change host (the scope's seed-redirect rule): no source host.
                found += _in_scope([entry["location"]], entry["url"], int(entry.get("depth") or 0), scope, last,
                                   redirect=True)
        for start in range(0, len(found), BATCH):
            recovered.links += len(frontier.add(found[start:start + BATCH]).accepted)
        recovered.ended = len(contextual - last.keys() - {entry.url for entry in found})
    highest = highest_url_id(db) or 0
    write_watermark(data_dir, highest)
    return recovered


def _in_scope(links: list[str], via: str, depth: int, scope: Scope, seen: dict[str, dict[str, Any]], *,
              redirect: bool = False) -> list[UrlEntry]:
    entries = []
    for raw in links:
        try:
            url = normalize_url(raw, base=via)
        except InvalidURL:
            continue
        if url not in seen and scope.check(url, depth, source_host=None if redirect else host_of(via)) is None:
            entries.append(UrlEntry(url, host_of(url), depth, -depth, 0, 1 if redirect else 0, via))
    return entries


def frontier_problem(data_dir: Path) -> str | None:
    """Why the frontier of ``data_dir`` would be refused at a node's start, or None if it would
    not: it is missing, holds less than its watermark says it committed (runtime.frontier_guard),
    or is not a database SQLite can read."""
    path = DataDirLayout(data_dir).frontier
    if not path.exists() or path.stat().st_size == 0:
        return "missing or empty"
    try:
        check_frontier(data_dir, path)
    except FrontierLost as exc:
        return str(exc)
    try:
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            # Every page, offline (O(size)): garbage in the middle of the file is found here,
            # not by the node's start, which reads only what the guard needs.
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        return f"not a database SQLite can read: {exc}"
    if verdict and verdict[0] != "ok":
        return f"damaged ({verdict[0]})"
    return None


def main(data_dir: Path, scope: Scope, *, force: bool = False) -> int:
    """Rebuild the frontier of ``data_dir``; one that passes the node's start-up checks is left
    alone unless ``force`` (a rebuild loses what crawl.log and the WARC files cannot say)."""
    try:
        lock = claim_data_dir(data_dir, check_frontier_whole=False)
    except DataDirError as exc:
        print(f"crawler-node recover: error: {exc}", file=sys.stderr)
        return 2
    try:
        layout = DataDirLayout(data_dir)
        if not layout.crawl_log.exists() and not layout.rotated_crawl_logs():
            print(f"crawler-node recover: error: {data_dir} has no crawl.log to rebuild the frontier from",
                  file=sys.stderr)
            return 2
        if not force and frontier_problem(data_dir) is None:
            print(f"crawler-node recover: error: the frontier of {data_dir} passes the start-up checks: nothing to "
                  "recover (a node starts on it as it is); --force rebuilds it anyway, the current one moved aside",
                  file=sys.stderr)
            return 2
        recovered = recover(data_dir, scope=scope)
    finally:
        lock.release()
    where = f"; the damaged frontier is in {recovered.moved_to}" if recovered.moved_to else ""
    print(f"recovered the frontier of {data_dir}: {recovered.done} URLs done (from crawl.log), "
          f"{recovered.requeued} queued again to retry, {recovered.links} links queued (from the WARC metadata "
          f"records and redirects){where}. URLs queued but never fetched nor linked from an archived page "
          f"cannot be rebuilt: submit them again. {WATERMARK_FILENAME} now matches the rebuilt frontier.")
    print(f"report: recovered {recovered.done}, requeued {recovered.requeued + recovered.links}, "
          f"ended {recovered.ended} (out of scope from another host's page, linked in scope from none), "
          f"unknown {recovered.unknown} (unreadable lines or outcomes; their URLs queued again); "
          f"{recovered.rebuilt_lines} crawl.log lines a kill had cut rebuilt from their WARC records")
    if recovered.skipped_lines or recovered.unreadable_files:
        print(f"  skipped {recovered.skipped_lines} unreadable crawl.log lines; WARC files read in part: "
              f"{'; '.join(recovered.unreadable_files) or 'none'}")
    return 0
