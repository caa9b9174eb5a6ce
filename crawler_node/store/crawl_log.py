"""crawl.log: one JSON line per fetch attempt, and one per URL that ended without one.

Tests and users audit coverage, duplicates and politeness from it, and each line names the
WARC record of its exchange (file, offset, length), so the archive can be joined without a
scan. Rotated by size: the full file is renamed `crawl.log.<UTC timestamp>` and a new
`crawl.log` begins. Every field is documented in the README ("crawl.log").
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from crawler_node.datadir_layout import rotated_crawl_log_name, torn_path

if TYPE_CHECKING:
    from crawler_node.store.fetch_records import FetchRecord

log = logging.getLogger("crawler_node.store")

# A str as a quoted JSON string, non-ASCII escaped: the (C) function json.dumps uses.
_json_string = json.encoder.encode_basestring_ascii


class Location(NamedTuple):
    """Where an exchange's response (or revisit) record is: what a crawl.log line names."""

    warc_file: str
    offset: int  # of the record's gzip member in the file
    length: int  # of the gzip member, compressed
    warc_type: str  # "response" or "revisit"
    digest: str | None  # WARC-Payload-Digest


def iso_utc(epoch: float, *, timespec: str = "milliseconds") -> str:
    """ISO 8601 in UTC with a `Z` suffix, e.g. 2024-05-01T12:00:00.123Z: what
    `datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec=timespec)` gives, with the
    date and time of day formatted once per second, not twice per record."""
    # The microseconds as `fromtimestamp` rounds them: half to even, from the fraction alone.
    fraction, whole = math.modf(epoch)
    second, microsecond = int(whole), round(fraction * 1e6)
    if microsecond >= 1_000_000:
        second, microsecond = second + 1, microsecond - 1_000_000
    elif microsecond < 0:
        second, microsecond = second - 1, microsecond + 1_000_000
    if timespec == "milliseconds":
        return f"{_utc_second(second)}.{microsecond // 1000:03d}Z"  # truncated, as isoformat does
    if timespec == "microseconds":
        return f"{_utc_second(second)}.{microsecond:06d}Z"
    if timespec == "seconds":
        return f"{_utc_second(second)}Z"
    raise ValueError(f"timespec must be seconds, milliseconds or microseconds, got {timespec!r}")


@lru_cache(maxsize=4096)  # a batch's fetches span a few seconds
def _utc_second(second: int) -> str:
    return datetime.fromtimestamp(second, tz=UTC).replace(tzinfo=None).isoformat()


class CrawlLog:
    """Append-only JSON lines, one per fetch attempt, rotated past `max_file_bytes`."""

    def __init__(self, path: Path, *, max_file_bytes: int = 100_000_000) -> None:
        if max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be > 0, got {max_file_bytes}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_file_bytes = max_file_bytes
        _drop_torn_tail(path)
        self._file: TextIO | None = open(path, "a", encoding="utf-8", newline="\n")
        self._file_bytes = self._file.tell()
        self.bytes_written = 0
        self.rotated: list[Path] = []

    def write(self, records: Sequence[FetchRecord], locations: Sequence[Location | None] | None = None) -> int:
        """Append one line per record (buffered: call `flush` per batch); ``locations``: the
        WARC record of each (None: no exchange). Returns the count."""
        if locations is None:
            locations = [None] * len(records)
        text = "".join([self._line(record, where) for record, where in zip(records, locations, strict=True)])
        self._require_open().write(text)
        self.bytes_written += len(text)  # ASCII: every string in it is escaped as JSON does
        self._file_bytes += len(text)
        if self._file_bytes >= self.max_file_bytes:
            self._rotate()
        return len(records)

    def append_lines(self, lines: Sequence[str]) -> None:
        """Lines made elsewhere (store.rebuild), each ending in a newline, flushed."""
        text = "".join(lines)
        self._require_open().write(text)
        self.bytes_written += len(text)
        self._file_bytes += len(text)
        self.flush()

    def _rotate(self) -> None:
        """The full file becomes crawl.log.<stamp>; the next line starts a new crawl.log. A
        kill between the two leaves the lines in the renamed file: nothing is lost."""
        handle = self._require_open()
        handle.close()
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:-3]
        serial = 0
        target = self.path.with_name(rotated_crawl_log_name(stamp))
        while target.exists():
            serial += 1
            target = self.path.with_name(rotated_crawl_log_name(stamp, serial))
        os.replace(self.path, target)
        self.rotated.append(target)
        self._file = open(self.path, "a", encoding="utf-8", newline="\n")
        self._file_bytes = 0

    @staticmethod
    def _line(record: FetchRecord, where: Location | None = None) -> str:
        """The line `json.dumps(entry, separators=(",", ":"))` writes, in a fifth of its time:
        the strings go through the encoder's own (C) escaping, so any string comes out exactly
        as json.dumps writes it, and the keys and the other values need none."""
        text = _json_string
        status = "null" if record.status is None else record.status
        error = "null" if record.error is None else text(record.error)
        location = "null" if record.location is None else text(record.location)
        truncated = "null" if record.truncated is None else text(record.truncated)
        content_type = "null" if record.content_type is None else text(record.content_type)
        via = "null" if record.via is None else text(record.via)
        refusal = "" if record.refusal is None else f',"refusal":{text(record.refusal)}'
        if where is None:
            archived = '"digest":null,"warc_type":null,"warc_file":null,"warc_offset":null,"warc_length":null'
        else:
            digest = "null" if where.digest is None else f'"{where.digest}"'
            archived = (f'"digest":{digest},"warc_type":"{where.warc_type}","warc_file":{text(where.warc_file)},'
                        f'"warc_offset":{where.offset},"warc_length":{where.length}')
        return (f'{{"url":{text(record.url)},"host":{text(record.host)},"status":{status},'
                f'"outcome":{text(record.outcome)},"bytes":{len(record.body)},"node":{text(record.node_id)},'
                f'"attempt":{record.attempt},"fetched_at":"{iso_utc(record.fetched_at)}",'
                f'"elapsed_ms":{round(record.elapsed_s * 1000.0, 1)!r},"error":{error},'
                f'"kind":"{record.kind}","location":{location},"truncated":{truncated},'
                f'"parse_truncated":{"true" if record.parse_truncated else "false"},'
                f'"content_type":{content_type},"depth":{record.depth},"via":{via},"visit":{record.visit},'
                f'{archived}{refusal}}}\n')

    def flush(self, *, fsync: bool = False) -> None:
        handle = self._require_open()
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _require_open(self) -> TextIO:
        if self._file is None:
            raise ValueError(f"crawl log {self.path} is closed")
        return self._file


def _drop_torn_tail(path: Path) -> None:
    """A process killed mid-write can leave half a line: it is set aside, appended to
    `<name>.torn` (so nothing written is destroyed), cut from the file, and logged, so the
    file stays valid JSON lines. Nothing is lost: the frontier marks a fetch done only after
    its line was flushed, so the attempt behind a torn line is made again."""
    try:
        with open(path, "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            keep = size
            while keep > 0:
                step = min(65_536, keep)
                handle.seek(keep - step)
                chunk = handle.read(step)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    keep = keep - step + newline + 1
                    break
                keep -= step
            handle.seek(keep)
            torn = handle.read()
            with open(torn_path(path), "ab") as aside:
                aside.write(torn + b"\n")
            handle.truncate(keep)
            log.warning("%s ended in a torn line (%d bytes, a kill mid-write): set aside in %s", path,
                        len(torn), torn_path(path).name)
    except FileNotFoundError:
        return
