"""The store: every fetch attempt to the crawl log, every HTTP exchange to WARC files.

Synchronous and single-threaded by design, like the frontier: the node owns one worker thread
for the store and hands it batches, so disk writes never block the event loop.

- `CrawlLog`: JSON lines, one per fetch attempt (including timeouts and DNS failures), so
  tests and users can audit coverage, duplicates and politeness.
- `WarcWriter`: gzip WARC 1.1 via warcio, a request + response record per HTTP exchange,
  rotated by size. Each record is its own gzip member, so a file is readable up to its last
  complete record even while it is being written or after a crash.
- `Store`: both behind one `write(records)`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from importlib import metadata
from io import BytesIO
from pathlib import Path
from typing import BinaryIO, TextIO
from urllib.parse import urlsplit

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

CRAWL_LOG_FILENAME = "crawl.log"
WARC_DIRNAME = "warc"
WARC_VERSION = "1.1"


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
    outcome: str  # "ok", "redirect", "http_error", "throttled", "timeout", "error", ...
    status: int | None = None
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""  # decoded (decompressed) body, as the HTTP client hands it over
    content_type: str | None = None
    error: str | None = None
    remote_addr: str | None = None
    elapsed_s: float = 0.0


def iso_utc(epoch: float, *, timespec: str = "milliseconds") -> str:
    """ISO 8601 in UTC with a `Z` suffix, e.g. 2024-05-01T12:00:00.123Z."""
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


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
        self.bytes_written += len(text.encode("utf-8"))
        return len(lines)

    @staticmethod
    def _line(record: FetchRecord) -> str:
        entry = {
            "url": record.url,
            "host": record.host,
            "status": record.status,
            "outcome": record.outcome,
            "bytes": len(record.body),
            "node": record.node_id,
            "attempt": record.attempt,
            "fetched_at": iso_utc(record.fetched_at),
            "elapsed_ms": round(record.elapsed_s * 1000.0, 1),
            "error": record.error,
        }
        return json.dumps(entry, separators=(",", ":")) + "\n"

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
    """Size-rotated gzip WARC 1.1 files: `<node_id>-<UTC timestamp>-<serial:05d>.warc.gz`."""

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
        self._writer: WARCWriter | None = None
        self._closed = False

    def write(self, records: Iterable[FetchRecord]) -> int:
        """Write a request/response pair per HTTP exchange. Returns how many were written."""
        written = 0
        for record in records:
            if record.status is None:
                continue  # no HTTP exchange happened: the crawl log alone tells it
            self._write_exchange(record)
            written += 1
        return written

    def _write_exchange(self, record: FetchRecord) -> None:
        writer = self._current_writer()
        response = self._response_record(writer, record)
        request = self._request_record(writer, record)
        # Writes the response, then the request with WARC-Concurrent-To pointing at it.
        start = self._file.tell()
        writer.write_request_response_pair(request, response)
        self.bytes_written += self._file.tell() - start
        self.records_written += 1
        if self._file.tell() >= self.max_file_bytes:
            self._close_file()  # the next write opens the next file

    @staticmethod
    def _response_record(writer: WARCWriter, record: FetchRecord) -> ArcWarcRecord:
        status = record.status
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        http_headers = StatusAndHeaders(
            f"{status} {reason}".rstrip(),
            stored_response_headers(record.response_headers, len(record.body)),
            protocol="HTTP/1.1",
        )
        warc_headers = {"WARC-Date": iso_utc(record.fetched_at, timespec="microseconds")}
        if record.remote_addr:
            warc_headers["WARC-IP-Address"] = record.remote_addr
        if record.outcome == "too_large":
            warc_headers["WARC-Truncated"] = "length"  # the node stopped reading at its cap
        return writer.create_warc_record(
            record.url,
            "response",
            payload=BytesIO(record.body),
            length=len(record.body),
            warc_headers_dict=warc_headers,
            http_headers=http_headers,
        )

    @staticmethod
    def _request_record(writer: WARCWriter, record: FetchRecord) -> ArcWarcRecord:
        parts = urlsplit(record.url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        headers = list(record.request_headers)
        # HTTP/1.1 clients always send Host; add it if the caller left it out of its list.
        if not any(name.lower() == "host" for name, _ in headers):
            headers.insert(0, ("Host", parts.netloc))
        http_headers = StatusAndHeaders(
            f"GET {target} HTTP/1.1", headers, is_http_request=True
        )
        return writer.create_warc_record(
            record.url, "request", payload=BytesIO(b""), length=0, http_headers=http_headers
        )

    def _current_writer(self) -> WARCWriter:
        if self._closed:
            raise ValueError(f"WARC writer for {self.directory} is closed")
        if self._writer is None:
            self._open_file()
        return self._writer

    def _open_file(self) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d%H%M%S%f")[:-3]
        while True:
            path = self.directory / f"{self.node_id}-{stamp}-{self._serial:05d}.warc.gz"
            self._serial += 1
            try:
                # "x": never append to or clobber a file another run left behind.
                self._file = open(path, "xb")
                break
            except FileExistsError:
                continue
        self._writer = WARCWriter(self._file, gzip=True, warc_version=WARC_VERSION)
        info = {
            "software": SOFTWARE,
            "hostname": socket.gethostname(),
            "node-id": self.node_id,
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
        }
        self._writer.write_record(self._writer.create_warcinfo_record(path.name, info))
        self.bytes_written += self._file.tell()
        self.files.append(path)

    def flush(self, *, fsync: bool = False) -> None:
        if self._file is not None:
            self._file.flush()
            if fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        self._close_file()
        self._closed = True

    def _close_file(self) -> None:
        # Every record is already a complete gzip member; closing just releases the file.
        if self._file is not None:
            self._file.close()
        self._file = None
        self._writer = None


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
