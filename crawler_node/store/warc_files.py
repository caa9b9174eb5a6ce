"""WARC files: `WarcWriter` writes each fetch attempt's records, rotated by size.

Per HTTP exchange a response record (or a revisit record, with a `DigestIndex`), a request
record and, for a parsed HTML page, a metadata record of its outlinks. Each record is its
own gzip member, so a file is readable up to its last complete record even while it is
being written or after a crash. Records are stored as received: the server's status line,
its headers unchanged, the body still content-encoded (see `stored_payload`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.datadir_layout import WARC_SUFFIX
from crawler_node.store import cdxj, warc
from crawler_node.store.crawl_log import Location, iso_utc
from crawler_node.store.digests import DigestIndex, Original
from crawler_node.store.fetch_records import SOFTWARE, CrawlInfo, FetchRecord
from crawler_node.store.files import open_next


class WarcWriter:
    """Size-rotated gzip WARC 1.1 files: `<node_id>-<UTC timestamp>-<serial:05d>.warc.gz`.

    Records are built by `crawler_node.store.warc`; a batch goes to the file in one write.
    With `digests`, a 2xx response whose payload this node archived before is written as a
    revisit record (identical-payload-digest), and a 304 answer to a recrawl as one of
    profile server-not-modified."""

    def __init__(self, directory: Path, *, node_id: str, max_file_bytes: int = 100_000_000,
                 digests: DigestIndex | None = None, info: CrawlInfo | None = None,
                 index: bool = True) -> None:
        """``index``: a CDXJ index beside each file, written when the file is closed (store.cdxj)."""
        if max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be > 0, got {max_file_bytes}")
        if not node_id or "/" in node_id:
            raise ValueError(f"node_id must be a non-empty name without '/', got {node_id!r}")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.node_id = node_id
        self.max_file_bytes = max_file_bytes
        self.digests = digests
        self.info = info or CrawlInfo()
        self._index = index
        self._index_lines: list[str] = []  # of the open file
        self.files: list[Path] = []
        self.records_written = 0  # exchanges
        self.revisits_written = 0
        self.bytes_written = 0  # compressed bytes on disk, over all files
        self._serial = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._file_bytes = 0  # of the open file, including what is still in `_pending`
        self._pending: list[bytes] = []  # gzip members of the open file not yet written
        self._closed = False

    def write(self, records: Sequence[FetchRecord]) -> list[Location | None]:
        """Write the records of each HTTP exchange; returns where each one's response (or
        revisit) record went, None for an attempt without an exchange."""
        # No HTTP exchange happened without a status: the crawl log alone tells those.
        exchanges = sum(1 for record in records if record.status is not None)
        if exchanges and self._closed:
            raise ValueError(f"WARC writer for {self.directory} is closed")
        # Ids for the response and request records of each exchange, and a metadata record's.
        ids = iter(warc.record_ids(2 * exchanges + sum(1 for record in records if _has_metadata(record))))
        # Each exchange's payload as stored and its digest, then the originals of those
        # digests archived before, asked for in one statement (`_revisit`).
        payloads = [None if record.status is None else b"" if record.status == 304 else stored_payload(record)
                    for record in records]
        digests = [None if payload is None else warc.sha1_label(payload) for payload in payloads]
        originals: dict[str, Original] = {}
        if self.digests is not None:
            originals = self.digests.lookup_many(
                digest for record, digest in zip(records, digests, strict=True)
                if digest is not None and _dedupable(record))
        archived: list[tuple[str, Original]] = []  # this batch's originals, for the index
        locations: list[Location | None] = []
        for record, payload, digest in zip(records, payloads, digests, strict=True):
            if record.status is None or payload is None or digest is None:
                locations.append(None)
                continue
            if self._file is None:
                self._open_file()
            assert self._path is not None
            response_id, request_id = next(ids), next(ids)
            revisit = self._revisit(record, digest, originals)
            # The response first, then the request with WARC-Concurrent-To pointing at it.
            response, request = exchange_records(record, ids=(response_id, request_id), revisit=revisit,
                                                 payload=payload, payload_digest=digest)
            offset = self._file_bytes
            member = warc.gzip_member(response)
            self._append(member)
            self._append(warc.gzip_member(request))
            date = iso_utc(record.fetched_at, timespec="microseconds")
            if _has_metadata(record):
                self._append(warc.gzip_member(warc.metadata(record.url, date, response_id, _metadata_block(record),
                                                            next(ids))))
            if revisit is not None:
                self.revisits_written += 1
            elif self.digests is not None and _dedupable(record) and digest not in originals:
                # Seen by the rest of this batch at once; in the index with the batch.
                originals[digest] = Original(response_id, record.url, date)
                archived.append((digest, originals[digest]))
            location = Location(self._path.name, offset, len(member), "response" if revisit is None else "revisit",
                                digest if revisit is None else revisit.payload_digest)
            locations.append(location)
            # A refusal (a challenge, a captcha...) is evidence, never the page: a replay must
            # not find it as the URL's capture.
            if self._index and record.refusal is None:
                self._index_lines.append(cdxj.index_line(
                    record.url, date, warc_type=location.warc_type, status=record.status,
                    content_type=_header(record.response_headers, "content-type"), digest=location.digest,
                    offset=offset, length=location.length, filename=location.warc_file))
            self.records_written += 1
            if self._file_bytes >= self.max_file_bytes:
                self._close_file()  # the next write opens the next file
        self._write_pending()
        if self.digests is not None:
            self.digests.add_many(archived)
        return locations

    def _revisit(self, record: FetchRecord, digest: str, originals: dict[str, Original]) -> warc.Revisit | None:
        """A revisit record's fields for this exchange (``digest``: of its payload; ``originals``:
        the payloads archived before, by digest), or None."""
        if record.status == 304:
            return warc.Revisit(warc.REVISIT_NOT_MODIFIED, refers_to_uri=record.url)
        if self.digests is None or not _dedupable(record):
            return None
        original = originals.get(digest)
        if original is None:
            return None
        return warc.Revisit(warc.REVISIT_IDENTICAL, payload_digest=digest, refers_to=original.record_id,
                            refers_to_uri=original.url, refers_to_date=original.date)

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
        path, self._file, self._serial = open_next(self.directory, self.node_id, WARC_SUFFIX, self._serial, now)
        self._path = path
        self._file_bytes = 0
        self._append(warc.gzip_member(warc.warcinfo(path.name, iso_utc(now.timestamp(), timespec="seconds"),
                                                    warcinfo_fields(self.node_id, self.info))))
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
            path, self._path = self._path, None
            lines, self._index_lines = self._index_lines, []
            if self._index and path is not None:
                cdxj.write_lines(path, lines)
        self._file = None


def _dedupable(record: FetchRecord) -> bool:
    """A payload another response may stand in for: a complete, non-empty 2xx body, not a
    refusal's (evidence, left out of the index: no revisit may point at it)."""
    status = record.status
    return (status is not None and 200 <= status < 300 and not record.truncated and bool(record.body)
            and record.refusal is None)


def warcinfo_fields(node_id: str, info: CrawlInfo) -> list[tuple[str, str]]:
    """The warcinfo record's fields (WARC 1.1 annex C's names where it has one)."""
    fields = [("software", SOFTWARE), ("hostname", socket.gethostname()), ("node-id", node_id),
              ("isPartOf", info.crawl_name)]
    if info.operator:
        fields.append(("operator", info.operator))
    if info.user_agent:
        fields.append(("http-header-user-agent", info.user_agent))
    fields.append(("robots", info.robots))
    if info.description:
        fields.append(("description", info.description))
    fields += [("format", "WARC File Format 1.1"),
               ("conformsTo", "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/")]
    return fields


def _has_metadata(record: FetchRecord) -> bool:
    return record.outlinks is not None or record.refusal is not None


def _metadata_block(record: FetchRecord) -> str:
    # Heritrix's names: hopsFromSeed is one letter per hop (L: a link; redirects keep the depth).
    fields = [("via", record.via)] if record.via else []
    fields.append(("hopsFromSeed", "L" * record.depth))
    if record.refusal is not None:
        # Like Heritrix's botblock annotation: what refused us, and the evidence.
        kind, _, evidence = record.refusal.partition(": ")
        fields += [("refusal", kind), ("refusalEvidence", evidence)]
    return warc.warc_fields(fields, "outlink", record.outlinks or "")


_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}" for status in HTTPStatus}


def stored_payload(record: FetchRecord) -> bytes:
    """The payload as the response record holds it: the body as received, framed again in
    one chunk when the server sent it chunked (see warc.chunked)."""
    if _is_chunked(record.response_headers):
        return warc.chunked(record.body)
    return record.body


def _header(headers: Sequence[tuple[str, str]], lowered: str) -> str | None:
    for name, value in headers:
        if name.lower() == lowered:
            return value
    return None


def _is_chunked(headers: Sequence[tuple[str, str]]) -> bool:
    for name, value in headers:
        if len(name) == 17 and name.lower() == "transfer-encoding":
            return "chunked" in value.lower()
    return False


def exchange_records(record: FetchRecord, *, ids: tuple[str, str] | None = None,
                     revisit: warc.Revisit | None = None, payload: bytes | None = None,
                     payload_digest: str | None = None) -> tuple[bytes, bytes]:
    """The response (or revisit) and request records (uncompressed) of one fetch attempt
    with a status. `ids` are the records' ids (`warc.record_ids`), drawn here when not given."""
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
        status_line=record.status_line or _STATUS_LINES.get(status) or f"HTTP/1.1 {status} ",
        response_headers=record.response_headers,
        body=b"" if revisit is not None else stored_payload(record) if payload is None else payload,
        request_line=f"GET {target} HTTP/1.1",
        request_headers=request_headers,
        ip_address=record.remote_addr,
        # The node stopped reading: at its cap ("length"), at its timeout ("time"), or the
        # connection was lost mid-body ("disconnect"); the record holds what came before.
        truncated=record.truncated or ("length" if record.outcome == FetchOutcome.TOO_LARGE else None),
        ids=ids,
        revisit=revisit,
        payload_digest=payload_digest,
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
