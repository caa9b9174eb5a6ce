"""The crawl's totals rebuilt from its crawl.log files (core.crawl_totals counts them).

Read once at a node's start, before the store writes a line (node.Node.start), on a thread: a
line that does not parse, or lacks its newline (the torn tail a kill leaves, which the store sets
aside when it opens), is skipped, as it is no line of the log. One pass over crawl.log costs
1.6 s per 100 MB (200,000 lines) on a 2-core machine; a rotated file never changes, so its
tally is kept in ``crawl_totals.json`` beside it (name, size, tally) and read back instead while
the file keeps that size: a start reads the current crawl.log (at most --crawl-log-max-bytes)
and the files rotated since the last start. The kept tallies are a cache: unreadable, or of
another shape, they are counted again from the files.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from crawler_node.core.crawl_totals import CrawlTotals
from crawler_node.datadir_layout import CRAWL_TOTALS_FILENAME, DataDirLayout

log = logging.getLogger("crawler_node.store")

_CACHE_VERSION = 1


def crawl_log_files(data_dir: Path) -> list[Path]:
    """Every crawl.log file of a data directory, oldest first (the rotated ones, then crawl.log)."""
    layout = DataDirLayout(data_dir)
    files = layout.rotated_crawl_logs()
    if layout.crawl_log.is_file():
        files.append(layout.crawl_log)
    return files


def count_file(path: Path) -> tuple[CrawlTotals, int]:
    """One crawl.log file's lines, and how many were skipped (torn or not JSON objects)."""
    totals, skipped = CrawlTotals(), 0
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):  # a torn tail: the store sets it aside as it opens
                skipped += 1
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                skipped += 1
                continue
            if isinstance(line, dict):
                totals.add_line(line)
            else:
                skipped += 1
    return totals, skipped


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("crawl totals: %s unreadable (%s): the rotated crawl.log files are counted again", path, exc)
        return {}
    files = cache.get("files") if isinstance(cache, dict) and cache.get("version") == _CACHE_VERSION else None
    return files if isinstance(files, dict) else {}


def _write_cache(path: Path, files: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(json.dumps({"version": _CACHE_VERSION, "files": files}), encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:  # a cache: the next start counts those files again
        log.warning("crawl totals: %s not written (%s)", path, exc)


def count_crawl_logs(data_dir: Path, totals: CrawlTotals | None = None) -> CrawlTotals:
    """``totals`` (a new tally by default) with every line of the data directory's crawl.log
    files added: the rotated ones' from the kept tallies where they hold, the rest read."""
    totals = totals if totals is not None else CrawlTotals()
    cache_path = data_dir / CRAWL_TOTALS_FILENAME
    cached = _read_cache(cache_path)
    kept: dict[str, Any] = {}
    skipped = 0
    current = DataDirLayout(data_dir).crawl_log
    for path in crawl_log_files(data_dir):
        try:
            size = path.stat().st_size
            entry = cached.get(path.name) if path != current else None
            part = None
            if isinstance(entry, dict) and entry.get("size") == size:
                try:
                    part = CrawlTotals.from_state(entry["state"])
                except (KeyError, TypeError, ValueError, AttributeError):
                    part = None
            if part is None:
                part, torn = count_file(path)
                skipped += torn
            if path != current:
                kept[path.name] = {"size": size, "state": part.state()}
            totals.absorb(part)
        except OSError as exc:
            log.warning("crawl totals: %s could not be read (%s): its lines are not counted", path, exc)
    if kept != cached:
        _write_cache(cache_path, kept)
    if skipped:
        log.info("crawl totals: %d crawl.log lines that do not parse were not counted (a torn tail)", skipped)
    return totals
