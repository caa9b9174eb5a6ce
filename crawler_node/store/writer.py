"""The store: every fetch attempt to the crawl log, every HTTP exchange to WARC files.

Synchronous and single-threaded by design, like the frontier: it runs in the store worker
(store.worker: its own process by default, or a thread), which the store stage hands
batches, so disk writes never block the event loop.

- `CrawlLog`: JSON lines, one per fetch attempt (including timeouts and DNS failures), so
  tests and users can audit coverage, duplicates and politeness.
- `WarcWriter`: gzip WARC 1.1 (records built by `crawler_node.store.warc`), a request + response
  record per HTTP exchange, rotated by size. Each record is its own gzip member, so a file is
  readable up to its last complete record even while it is being written or after a crash.
- `Store`: both behind one `write(records)`.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import BinaryIO, TextIO
from urllib.parse import urlsplit

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.store import warc

CRAWL_LOG_FILENAME = "crawl.log"
WARC_DIRNAME = "warc"
# A str as a quoted JSON string, non-ASCII escaped: the (C) function json.dumps uses.
_json_string = json.encoder.encode_basestring_ascii


def _software() -> str:
    # From the installed metadata rather than `crawler_node.__version__`: same number, and it
    # does not depend on how the package was imported (editable installs may skip __init__).
    try:
        return f"crawler-node/{metadata.version('crawler-node')}"
    except metadata.PackageNotFoundError:
        return "crawler-node/unknown"


SOFTWARE = _software()
# Headers describing the wire encoding of a body we no longer store in that encoding.
ORIGINAL_HEADER_PREFIX = "X-Crawler-Original-"
_WIRE_ENCODING_HEADERS = ("content-encoding", "transfer-encoding", "content-length")


@dataclass(slots=True)
class FetchRecord:
    """What happened on one fetch attempt. `status` is None when no HTTP response came."""

    url: str
    host: str
    node_id: str
    attempt: int
    fetched_at: float  # epoch seconds
    outcome: str  # a core.outcomes.FetchOutcome's value: "ok", "redirect", "timeout", ...
    status: int | None = None
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""  # decoded (decompressed) body, as the HTTP client hands it over
    content_type: str | None = None
    error: str | None = None
    remote_addr: str | None = None
    elapsed_s: float = 0.0
    location: str | None = None  # a redirect's target, as the Location header gave it
    truncated: str | None = None  # the body was cut: "length", "time" or "disconnect" (WARC-Truncated)
    parse_truncated: bool = False  # links were extracted from the first max_parse_bytes only
    kind: str = "page"  # "page", "robots" or "sitemap"


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
    """Append-only JSON lines, one per fetch attempt."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        _drop_torn_tail(path)
        self._file: TextIO | None = open(path, "a", encoding="utf-8", newline="\n")
        self.bytes_written = 0

    def write(self, records: Iterable[FetchRecord]) -> int:
        """Append one line per record (buffered: call `flush` per batch). Returns the count."""
        lines = [self._line(record) for record in records]
        text = "".join(lines)
        self._require_open().write(text)
        self.bytes_written += len(text)  # ASCII: every string in it is escaped as JSON does
        return len(lines)

    @staticmethod
    def _line(record: FetchRecord) -> str:
        """The line `json.dumps(entry, separators=(",", ":"))` writes, in a fifth of its time:
        the strings go through the encoder's own (C) escaping, so any string comes out exactly
        as json.dumps writes it, and the keys and the other values need none."""
        text = _json_string
        status = "null" if record.status is None else record.status
        error = "null" if record.error is None else text(record.error)
        location = "null" if record.location is None else text(record.location)
        truncated = "null" if record.truncated is None else text(record.truncated)
        return (f'{{"url":{text(record.url)},"host":{text(record.host)},"status":{status},'
                f'"outcome":{text(record.outcome)},"bytes":{len(record.body)},"node":{text(record.node_id)},'
                f'"attempt":{record.attempt},"fetched_at":"{iso_utc(record.fetched_at)}",'
                f'"elapsed_ms":{round(record.elapsed_s * 1000.0, 1)!r},"error":{error},'
                f'"kind":"{record.kind}","location":{location},"truncated":{truncated},'
                f'"parse_truncated":{"true" if record.parse_truncated else "false"}}}\n')

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
    """A process killed mid-write can leave half a line; cut it so the log stays valid JSON
    lines. Nothing is lost: the frontier marks a fetch done only after its line was flushed,
    so the attempt behind a torn line is made again."""
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
                    handle.truncate(keep - step + newline + 1)
                    return
                keep -= step
            handle.truncate(0)
    except FileNotFoundError:
        return


class WarcWriter:
    """Size-rotated gzip WARC 1.1 files: `<node_id>-<UTC timestamp>-<serial:05d>.warc.gz`.

    Records are built by `crawler_node.store.warc`; a batch goes to the file in one write."""

    def __init__(
        self, directory: Path, *, node_id: str, max_file_bytes: int = 100_000_000
    ) -> None:
        if max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be > 0, got {max_file_bytes}")
        if not node_id or "/" in node_id:
            raise ValueError(f"node_id must be a non-empty name without '/', got {node_id!r}")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.node_id = node_id
        self.max_file_bytes = max_file_bytes
        self.files: list[Path] = []
        self.records_written = 0
        self.bytes_written = 0  # compressed bytes on disk, over all files
        self._serial = 0
        self._file: BinaryIO | None = None
        self._file_bytes = 0  # of the open file, including what is still in `_pending`
        self._pending: list[bytes] = []  # gzip members of the open file not yet written
        self._closed = False

    def write(self, records: Iterable[FetchRecord]) -> int:
        """Write a request/response pair per HTTP exchange. Returns how many were written."""
        # No HTTP exchange happened without a status: the crawl log alone tells those.
        exchanges = [record for record in records if record.status is not None]
        if exchanges and self._closed:
            raise ValueError(f"WARC writer for {self.directory} is closed")
        ids = warc.record_ids(2 * len(exchanges))
        for record, response_id, request_id in zip(exchanges, ids[0::2], ids[1::2], strict=True):
            if self._file is None:
                self._open_file()
            # The response first, then the request with WARC-Concurrent-To pointing at it.
            response, request = exchange_records(record, ids=(response_id, request_id))
            self._append(warc.gzip_member(response))
            self._append(warc.gzip_member(request))
            self.records_written += 1
            if self._file_bytes >= self.max_file_bytes:
                self._close_file()  # the next write opens the next file
        self._write_pending()
        return len(exchanges)

    def _append(self, member: bytes) -> None:
        self._pending.append(member)
        self._file_bytes += len(member)
        self.bytes_written += len(member)

    def _write_pending(self) -> None:
        if self._pending:
            assert self._file is not None  # members are pending only while their file is open
            self._file.write(b"".join(self._pending))
            self._pending.clear()

    def _open_file(self) -> None:
        now = datetime.now(UTC)
        stamp = now.strftime("%Y%m%d%H%M%S%f")[:-3]
        while True:
            path = self.directory / f"{self.node_id}-{stamp}-{self._serial:05d}.warc.gz"
            self._serial += 1
            try:
                # "x": never append to or clobber a file another run left behind.
                self._file = open(path, "xb")
                break
            except FileExistsError:
                continue
        self._file_bytes = 0
        info = [
            ("software", SOFTWARE),
            ("hostname", socket.gethostname()),
            ("node-id", self.node_id),
            ("format", "WARC File Format 1.1"),
            ("conformsTo", "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"),
        ]
        self._append(warc.gzip_member(warc.warcinfo(path.name, iso_utc(now.timestamp(), timespec="seconds"), info)))
        self.files.append(path)

    def flush(self, *, fsync: bool = False) -> None:
        if self._file is not None:
            self._write_pending()
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        self._close_file()
        self._closed = True

    def _close_file(self) -> None:
        # Every record is a complete gzip member; closing writes what is pending and releases.
        if self._file is not None:
            self._write_pending()
            self._file.close()
        self._file = None


_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}" for status in HTTPStatus}


def exchange_records(record: FetchRecord, *, ids: tuple[str, str] | None = None) -> tuple[bytes, bytes]:
    """The response and request records (uncompressed) of one fetch attempt with a status.
    `ids` are the records' ids (`warc.record_ids`), drawn here when not given."""
    status = record.status
    if status is None:
        raise ValueError(f"no HTTP exchange to record for {record.url}: it has no status")
    netloc, target = _request_target(record.url)
    request_headers = record.request_headers
    # HTTP/1.1 clients always send Host; add it if the caller left it out of its list.
    if not _has_host(request_headers):
        request_headers = [("Host", netloc), *request_headers]
    return warc.exchange(
        record.url,
        iso_utc(record.fetched_at, timespec="microseconds"),
        status_line=_STATUS_LINES.get(status) or f"HTTP/1.1 {status}",
        response_headers=stored_response_headers(record.response_headers, len(record.body)),
        body=record.body,
        request_line=f"GET {target} HTTP/1.1",
        request_headers=request_headers,
        ip_address=record.remote_addr,
        # The node stopped reading: at its cap ("length"), at its timeout ("time"), or the
        # connection was lost mid-body ("disconnect"); the record holds what came before.
        truncated=record.truncated or ("length" if record.outcome == FetchOutcome.TOO_LARGE else None),
        ids=ids,
    )


def _has_host(headers: Sequence[tuple[str, str]]) -> bool:
    for name, _ in headers:  # aiohttp sends Host first
        if name.lower() == "host":
            return True
    return False


def _request_target(url: str) -> tuple[str, str]:
    """(host[:port], path?query) of a URL: by hand for the canonical URLs the node fetches
    (`scheme://host[:port]/path[?query]`, no fragment), by urlsplit for anything else."""
    start = url.find("://") + 3
    slash = url.find("/", start)
    if start >= 3 and slash > start and "#" not in url:
        return url[start:slash], url[slash:]
    parts = urlsplit(url)
    return parts.netloc, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def stored_response_headers(
    headers: Sequence[tuple[str, str]], body_length: int
) -> list[tuple[str, str]]:
    """The response headers to store in front of the *decoded* body.

    The HTTP client decompresses and de-chunks the body before the node sees it, so the wire
    headers no longer describe the bytes we have. Stored unchanged, a WARC reader would try to
    gunzip plain bytes or parse chunk sizes that are not there. So Content-Encoding and
    Transfer-Encoding are dropped and Content-Length is set to the stored length; the original
    values are kept as X-Crawler-Original-* headers, so nothing the server said is lost.
    The cost: the record is not the byte-exact wire message, and WARC-Payload-Digest is the
    digest of the decoded body. The gain: any WARC reader hands back exactly the body the
    crawler parsed, and the record's headers tell the truth about the bytes it holds.
    """
    stored: list[tuple[str, str]] = []
    originals: list[tuple[str, str]] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered not in _WIRE_ENCODING_HEADERS:
            stored.append((name, value))
        elif lowered != "content-length" or value.strip() != str(body_length):
            originals.append((ORIGINAL_HEADER_PREFIX + name.title(), value))
    stored.append(("Content-Length", str(body_length)))
    return stored + originals


class Store:
    """The node's store: WARC files under `data_dir/warc/` and `data_dir/crawl.log`."""

    def __init__(
        self, data_dir: Path, *, node_id: str, warc_max_bytes: int = 100_000_000
    ) -> None:
        self.data_dir = data_dir
        self.warc = WarcWriter(
            data_dir / WARC_DIRNAME, node_id=node_id, max_file_bytes=warc_max_bytes
        )
        self.crawl_log = CrawlLog(data_dir / CRAWL_LOG_FILENAME)
        self.records_written = 0  # fetch attempts logged (with or without an HTTP exchange)

    @property
    def bytes_written(self) -> int:
        """Bytes written to disk: compressed WARC output plus crawl log lines."""
        return self.warc.bytes_written + self.crawl_log.bytes_written

    def write(self, records: Sequence[FetchRecord]) -> None:
        # WARC first: the crawl log never claims an exchange the WARC files lack. Both are
        # flushed to the OS before returning, because the caller marks these fetches done in
        # the frontier next, and a killed process must not have lost what it marked done.
        self.warc.write(records)
        self.records_written += self.crawl_log.write(records)
        self.flush()

    def flush(self, *, fsync: bool = False) -> None:
        self.warc.flush(fsync=fsync)
        self.crawl_log.flush(fsync=fsync)

    def close(self) -> None:
        self.warc.close()
        self.crawl_log.close()
