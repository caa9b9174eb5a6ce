"""The CDXJ index beside each WARC file: `<name>.warc.gz` -> `<name>.cdxj`, as pywb reads it.

One line per record a replay looks up (response, revisit, resource, and metadata that is not
application/warc-fields), `<SURT key> <14-digit timestamp> <JSON>`, sorted so that pywb can
binary-search it. The lines are cdxj-indexer's, with the options pywb's `wb-manager reindex`
uses: request records are read (a POST's body joins its URL key) but get no line of their own.
pywb reads a directory of these files as one index, so there is no merged index to keep.

The node's writer makes the lines itself, as it writes the records (`index_line`), and writes
them out sorted when it closes the file (`write_lines`): it knows every field already, and
reading the file back with cdxj-indexer cost ~110 µs of the store's CPU per record (3.5x what
writing the record costs; measured on 5,000 20 KB pages), against ~15 µs here, most of it
`surt`. The lines are the same as cdxj-indexer's (tests/test_cdxj.py compares them).

A file is indexed once it is closed; one left unindexed (the node was killed before it closed
the file) is indexed at the next start by `index_missing`. Such a file may end in a torn gzip
member, and warcio reads one without complaint: the indexer then gives the torn record a line
whose length runs to the end of the file, or raises on its headers (and drops the record before
it, which it holds back to pair it with its request). So the members after the last indexed
record are inflated to see whether they are whole; only if the last indexed record is not, or
the indexer raised, is the file indexed again, up to the end of its last whole member. zlib does
that check: warcio cannot say where a member was cut short. Each record is one member (WARC 1.1,
annex D), so the index then holds every complete record and nothing else.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

from crawler_node.datadir_layout import CDXJ_SUFFIX, CDXJ_TEMP_SUFFIX, WARC_SUFFIX, torn_path
from crawler_node.store.surt_key import url_key

# surt and cdxj-indexer are imported where they are used, not here: they bring tldextract,
# pyamf and pkg_resources, ~0.2 s of a node's start-up (python -X importtime), and only the
# store worker process uses them; the node's own process imports this module for its names.

log = logging.getLogger("crawler_node.store")

_GZIP_WBITS = zlib.MAX_WBITS | 16
_CHUNK = 1 << 20


class WarcIndexError(Exception):
    """A WARC file could not be indexed: it stays without an index (`index_missing` tries again)."""

    def __init__(self, warc_path: Path, reason: str) -> None:
        super().__init__(f"cannot index {warc_path}: {reason}")
        self.warc_path = warc_path
        self.reason = reason


def index_path(warc_path: Path) -> Path:
    """The index beside a WARC file: `<name>.warc.gz` -> `<name>.cdxj`."""
    name = warc_path.name
    if not name.endswith(WARC_SUFFIX) or name == WARC_SUFFIX:
        raise ValueError(f"not a {WARC_SUFFIX} file name: {warc_path}")
    return warc_path.with_name(name[: -len(WARC_SUFFIX)] + CDXJ_SUFFIX)


def index_line(url: str, date: str, *, warc_type: str, status: int, content_type: str | None,
               digest: str | None, offset: int, length: int, filename: str) -> str:
    """The CDXJ line of one response or revisit record, as cdxj-indexer writes it: the SURT
    key, the 14-digit timestamp of ``date`` (WARC-Date), and the JSON fields in its order.

    The JSON is the text `json.dumps` makes of them (its default separators, every string
    through the same C escaping), built directly: a line per page, 3.1 µs against 5.3 with a
    dict and the encoder (the SURT key included)."""
    text = _json_string
    mime = ""
    if warc_type == "revisit":
        mime = ', "mime": "warc/revisit"'
    elif content_type:
        media_type = _RE_SPACE.split(content_type, 1)[0].strip()
        if media_type:
            mime = f', "mime": {text(media_type)}'
    digest_field = f', "digest": {text(digest)}' if digest else ""
    return (f'{url_key(url)} {_timestamp(date)} {{"url": {text(url)}{mime}, "status": "{int(status)}"{digest_field}, '
            f'"length": "{int(length)}", "offset": "{int(offset)}", "filename": {text(filename)}}}\n')


def write_lines(warc_path: Path, lines: list[str]) -> Path:
    """Write a closed file's index from the lines its writer made (`index_line`), sorted,
    replacing any index atomically."""
    target = index_path(warc_path)
    _write_sorted(target, lines)
    return target


def _write_sorted(target: Path, lines: list[str]) -> None:
    temp = target.with_name(target.name[: -len(CDXJ_SUFFIX)] + CDXJ_TEMP_SUFFIX)
    with open(temp, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(sorted(lines))
        handle.flush()
        # On disk before the rename: an empty index newer than its WARC file would never
        # be made again by index_missing.
        os.fsync(handle.fileno())
    os.replace(temp, target)


def load_libraries() -> None:
    """Import surt and cdxj-indexer now: the store calls this as it opens, so that its first
    records do not wait for them."""
    import cdxj_indexer.main  # type: ignore[import-untyped]  # noqa: F401
    import surt  # type: ignore[import-untyped]  # noqa: F401


def _timestamp(date: str) -> str:
    """2024-05-01T12:00:00.123456Z -> 20240501120000"""
    return date[:4] + date[5:7] + date[8:10] + date[11:13] + date[14:16] + date[17:19]


_RE_SPACE = re.compile(r"[;\s]")  # cdxj-indexer's: a media type ends at ';' or a space
_json_string = json.encoder.encode_basestring_ascii  # what json.dumps escapes a string with


def write_index(warc_path: Path) -> Path:
    """Index one closed WARC file into `index_path(warc_path)`, sorted, replacing it atomically.
    A torn tail is left out (see the module's docstring). Raises `WarcIndexError`."""
    target = index_path(warc_path)
    try:
        _write_sorted(target, _without_refusals(warc_path, _index_lines(warc_path)))
    except WarcIndexError:
        raise
    except Exception as exc:  # OSError, or whatever warcio raises on a record it cannot read
        raise WarcIndexError(warc_path, f"{type(exc).__name__}: {exc}") from exc
    return target


def repair_torn_tail(warc_path: Path) -> int:
    """Cut a torn last gzip member (a kill mid-write) off a WARC file that is no longer being
    written, so that every reader, not only this indexer, sees whole records only: warcio
    reads a truncated record without complaint. The cut bytes are set aside in
    `<name>.torn`, never destroyed. Returns how many bytes were cut (0: the file was whole).
    Bytes that are no gzip member at all raise zlib.error: damage, left alone."""
    with open(warc_path, "rb+") as stream:
        size = os.fstat(stream.fileno()).st_size
        end = _complete_end(stream, 0)
        if end >= size:
            return 0
        stream.seek(end)
        torn = stream.read()
        with open(torn_path(warc_path), "wb") as aside:
            aside.write(torn)
            aside.flush()
            os.fsync(aside.fileno())
        stream.truncate(end)
        stream.flush()
        os.fsync(stream.fileno())
    log.warning("%s ended in a torn record (%d bytes after byte %d, a kill mid-write): cut, and set aside in %s",
                warc_path, size - end, end, torn_path(warc_path).name)
    return size - end


def unindexed(directory: Path) -> list[Path]:
    """The `*.warc.gz` files in `directory` with no index, or one older than the file."""
    return [path for path in sorted(directory.glob(f"*{WARC_SUFFIX}")) if not _index_is_current(path)]


def index_missing(directory: Path, *, skip: Collection[Path] = (), files: Collection[Path] | None = None,
                  repair: bool = False) -> list[Path]:
    """Index every `*.warc.gz` in `directory` that has no index or one older than the file
    (or just ``files``), except those in `skip` (the file being written); with ``repair``,
    first cut each one's torn tail (`repair_torn_tail`: only files no process writes any
    more). Returns the indexes written; a file that cannot be indexed is logged and the
    others are indexed all the same."""
    skipped = {path.resolve() for path in skip}
    written: list[Path] = []
    for warc_path in (unindexed(directory) if files is None else files):
        if warc_path.resolve() in skipped:
            continue
        if repair:
            try:
                repair_torn_tail(warc_path)
            except (OSError, zlib.error) as exc:
                log.error("%s could not be checked for a torn tail: %s", warc_path, exc)
        try:
            written.append(write_index(warc_path))
        except WarcIndexError as exc:
            log.error("%s; it stays unindexed until the next start", exc)
    return written


def _index_is_current(warc_path: Path) -> bool:
    try:
        # Equal times count as current: the index is written after its file is closed.
        return index_path(warc_path).stat().st_mtime >= warc_path.stat().st_mtime
    except FileNotFoundError:
        return False


def _index_lines(warc_path: Path) -> list[str]:
    """The file's index lines, unsorted: of all of it, or of its complete gzip members when
    it has a torn tail (each record is one member, WARC 1.1 annex D)."""
    with open(warc_path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        lines, error = _run_indexer(stream, warc_path.name)
        last_start, last_end = _last_record(lines)
        # Only the tail can be torn: a scan from the last indexed record on tells whether that
        # record is whole, and whether anything after it is not.
        end = _complete_end(stream, last_start)
        if error is None and end >= last_end:
            if end < size:
                log.warning("%s is torn after byte %d of %d; its complete records are indexed", warc_path, end, size)
            return lines
        reason = "its last indexed record is incomplete" if error is None else f"{type(error).__name__}: {error}"
        if end == size:  # no torn tail: the indexer failed on a whole record
            raise WarcIndexError(warc_path, reason) from error
        end = _complete_end(stream, 0)
        log.warning("%s is torn after byte %d of %d (%s); indexing its complete records", warc_path, end, size, reason)
        stream.seek(0)
        lines, error = _run_indexer(_Prefix(stream, end), warc_path.name)
        if error is not None:
            raise WarcIndexError(warc_path, f"{type(error).__name__}: {error}") from error
        return lines


def _without_refusals(warc_path: Path, lines: list[str]) -> list[str]:
    """``lines`` less those of refused responses (a challenge, a captcha...: evidence, never the
    page; store.warc_files writes none for them): the responses a `refusal` metadata record
    follows. A second pass over the file, made only when a file is indexed again."""
    from warcio.archiveiterator import ArchiveIterator

    offsets: dict[str, int] = {}  # response (or revisit) record id -> its offset
    refused: set[int] = set()
    try:
        with open(warc_path, "rb") as stream:
            records = ArchiveIterator(stream)
            for record in records:
                if record.rec_type in ("response", "revisit"):
                    offsets[record.rec_headers.get_header("WARC-Record-ID")] = records.get_record_offset()
                elif record.rec_type == "metadata":
                    block = record.content_stream().read()
                    if block.startswith(b"refusal:") or b"\nrefusal:" in block:
                        offset = offsets.get(record.rec_headers.get_header("WARC-Concurrent-To"))
                        if offset is not None:
                            refused.add(offset)
    except Exception:  # a torn tail: what came before it is known
        log.debug("%s read for its refusals up to a record warcio could not read", warc_path)
    if not refused:
        return lines
    return [line for line in lines if int(json.loads(line.split(" ", 2)[2])["offset"]) not in refused]


def _run_indexer(stream: BinaryIO | _Prefix, filename: str) -> tuple[list[str], Exception | None]:
    """The lines cdxj-indexer writes for `stream`, and what it raised, if it did, after them."""
    from cdxj_indexer.main import CDXJIndexer

    out = io.StringIO()
    # post_append: pywb's wb-manager option, so a POST's request body is part of its key.
    indexer = CDXJIndexer(out, [stream], filename=filename, post_append=True)
    try:
        indexer.process_all()
    except Exception as exc:  # warcio, on a torn record: ArchiveLoadFailed, AttributeError, ...
        return out.getvalue().splitlines(keepends=True), exc
    return out.getvalue().splitlines(keepends=True), None


def _last_record(lines: list[str]) -> tuple[int, int]:
    """(offset, end) of the record at the highest offset in `lines`; (0, 0) without lines."""
    if not lines:
        return 0, 0
    last = max((json.loads(line.split(" ", 2)[2]) for line in lines), key=lambda entry: int(entry["offset"]))
    offset = int(last["offset"])
    return offset, offset + int(last["length"])


def _complete_end(stream: BinaryIO, start: int) -> int:
    """Where the last complete gzip member from `start` on ends (`start` if none does): a
    member cut short ends the scan. Bytes that are no gzip member raise zlib.error: that file
    is damaged, not torn, and is not indexed."""
    stream.seek(start)
    end = offset = start  # offset: where `data` starts in the file
    member = zlib.decompressobj(_GZIP_WBITS)
    data = b""
    while True:
        if not data:
            data = stream.read(_CHUNK)
            if not data:
                return end
        member.decompress(data, _CHUNK)  # bounded output, and none of it is kept
        if member.eof:
            rest = member.unused_data
            end = offset = offset + len(data) - len(rest)
            member = zlib.decompressobj(_GZIP_WBITS)
        else:
            rest = member.unconsumed_tail
            offset += len(data) - len(rest)
        data = rest


class _Prefix:
    """The first `end` bytes of a file, for the indexer (which reads and tells, never seeks)."""

    def __init__(self, stream: BinaryIO, end: int) -> None:
        self._stream = stream
        self._end = end

    def read(self, size: int = -1) -> bytes:
        remaining = max(0, self._end - self._stream.tell())
        return self._stream.read(remaining if size < 0 else min(size, remaining))

    def tell(self) -> int:
        return self._stream.tell()
