"""At a store's start: crawl.log lines rebuilt from the WARC records that have none.

A batch is written WARC first, then its crawl.log lines (store.writer). A kill between the two,
or in the middle of the lines, leaves records whose lines are missing or torn (the torn tail is
cut and set aside: store.crawl_log). The page is fetched again (its lease was never marked
done), but if the frontier is lost meanwhile, `crawler-node recover` reads crawl.log and would
not see it. So at start, every response or revisit record written after the record of the last
whole line gets its line back, rebuilt from the record: URL, status, the outcome its status
means, the record's date and place, `error` saying it was rebuilt. What the record does not hold
(the attempt, the depth, the referring page, the time taken) is 0 or null.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from crawler_node.core.urls import host_of

log = logging.getLogger("crawler_node.store")

REBUILT = "line rebuilt at start from its WARC record (the crawl.log line was lost or torn)"
TAIL_BYTES = 1 << 20  # the end of crawl.log searched for the last line that names a WARC record


def last_archived(crawl_log: Path) -> tuple[str, int] | None:
    """(warc_file, warc_offset) of the last whole line that names a WARC record, or None."""
    try:
        with open(crawl_log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            lines = handle.read().split(b"\n")
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("warc_file") and entry.get("warc_offset") is not None:
            return str(entry["warc_file"]), int(entry["warc_offset"])
    return None


def _outcome(status: int) -> str:
    if status == 304:
        return "not_modified"
    if 300 <= status < 400:
        return "redirect"
    if status in (429, 503, 509):
        return "throttled"
    if status >= 500:
        return "server_error"
    if status >= 400:
        return "http_error"
    return "ok"


def missing_lines(warc_dir: Path, crawl_log: Path, node_id: str) -> list[str]:
    """The lines of the records after the last line's record (see the module's docstring)."""
    anchor = last_archived(crawl_log)
    if anchor is None or not warc_dir.is_dir():
        return []  # no line names a record: nothing to anchor on (a new crawl, or a log moved away)
    name, offset = anchor
    files = sorted(path for path in warc_dir.iterdir() if path.name.endswith(".warc.gz") and path.name >= name)
    lines: list[str] = []
    for path in files:
        try:
            with open(path, "rb") as handle:
                iterator = ArchiveIterator(handle)
                for record in iterator:
                    position = iterator.get_record_offset()
                    if path.name == name and position <= offset:
                        continue
                    if record.rec_type not in ("response", "revisit"):
                        continue
                    lines.append(_line(record, path.name, position, iterator, node_id))
        except Exception as exc:  # noqa: BLE001 - a torn last record: what came before it counts
            log.debug("reading %s for lost crawl.log lines stopped: %r", path, exc)
    return lines


def _line(record: Any, file_name: str, offset: int, iterator: Any, node_id: str) -> str:
    headers = record.rec_headers
    url = headers.get_header("WARC-Target-URI") or ""
    status = None
    if record.http_headers is not None:
        try:
            status = int(record.http_headers.get_statuscode())
        except (TypeError, ValueError):
            status = None
    length = iterator.get_record_length()  # known once get_record_offset read the record to its end
    date = headers.get_header("WARC-Date") or ""
    entry = {
        "url": url, "host": host_of(url) if url else "", "status": status,
        "outcome": _outcome(status) if status is not None else "ok", "bytes": 0, "node": node_id, "attempt": 0,
        "fetched_at": date, "elapsed_ms": 0.0, "error": REBUILT,
        "kind": "robots" if url.endswith("/robots.txt") else "page", "location": None,
        "truncated": headers.get_header("WARC-Truncated"), "parse_truncated": False,
        "content_type": record.http_headers.get_header("Content-Type") if record.http_headers else None,
        "depth": 0, "via": None, "visit": 0, "digest": headers.get_header("WARC-Payload-Digest"),
        "warc_type": record.rec_type, "warc_file": file_name, "warc_offset": offset, "warc_length": length,
    }
    return json.dumps(entry, separators=(",", ":")) + "\n"
