"""`crawler-node export`: what a cluster produced, gathered from its members' data directories.

- ``--items FILE --format jsonl|json|csv|xml``: every member's pipeline items in one feed,
  written as Scrapy's feed exports write theirs (``-O items.json`` and friends), so a Scrapy user
  reads it with what they already have:
  - jsonl: one JSON object per line, as the node stored it;
  - json: one array, an item per line (Scrapy's JsonItemExporter);
  - csv: a header of every field any item has, in the order they first appear (Scrapy takes the
    first item's fields and drops the others': here nothing is dropped), a value that is a list or
    an object as JSON text; written by the standard library's ``csv`` (RFC 4180 quoting);
  - xml: ``<items><item><field>value</field>...</item></items>``, a list as ``<value>`` children
    (Scrapy's XmlItemExporter), written by the standard library's SAX ``XMLGenerator``, which
    escapes; a field whose name is not an XML name is ``<field name="...">``.
- ``--crawl-log FILE``: every member's crawl.log (rotated files too) in time order.
- ``--warc DIR``: the WARC files with their CDXJ indexes as one pywb collection,
  ``DIR/collections/crawl/{archive,indexes}`` (``wayback`` run in DIR serves it), copied (or
  hard-linked where the file system allows).

Members are read from disk, so export a stopped crawl, or one at rest (a running member may
be writing its last file). Nothing is read from the frontier.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from io import TextIOBase
from pathlib import Path
from typing import IO, Any, cast
from xml.sax.saxutils import XMLGenerator
from xml.sax.xmlreader import AttributesImpl

from crawler_node.datadir_layout import CDXJ_SUFFIX, ITEMS_DIRNAME, ITEMS_SUFFIX, WARC_SUFFIX, DataDirLayout

FORMATS = ("jsonl", "json", "csv", "xml")
COLLECTION = "crawl"
_XML_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*")
_NO_ATTRIBUTES: AttributesImpl[str] = AttributesImpl({})


class ExportError(Exception):
    """What cannot be exported; the message is one line."""


# ----------------------------------------------------------------------- reading
def item_files(data_dirs: Sequence[Path]) -> list[Path]:
    """Every items file of every member, in the order they were written within a member."""
    return [path for data_dir in data_dirs for path in sorted((data_dir / ITEMS_DIRNAME).glob(f"*{ITEMS_SUFFIX}"))]


def read_items(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """The items of ``paths``; a line that is not a JSON object (a torn tail) is skipped."""
    for path in paths:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    yield item


def crawl_log_files(data_dir: Path) -> list[Path]:
    layout = DataDirLayout(data_dir)
    return [*layout.rotated_crawl_logs(), *([layout.crawl_log] if layout.crawl_log.exists() else [])]


# ----------------------------------------------------------------------- writing items
def export_items(data_dirs: Sequence[Path], out: IO[str], fmt: str) -> int:
    """Write every member's items to ``out`` in ``fmt``; the number of items written."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    paths = item_files(data_dirs)
    if fmt == "jsonl":
        return _write_lines(read_items(paths), out)
    if fmt == "json":
        return _write_json(read_items(paths), out)
    if fmt == "csv":
        return _write_csv(paths, out)
    return _write_xml(read_items(paths), out)


def _write_lines(items: Iterable[dict[str, Any]], out: IO[str]) -> int:
    count = 0
    for item in items:
        out.write(json.dumps(item, ensure_ascii=False) + "\n")
        count += 1
    return count


def _write_json(items: Iterable[dict[str, Any]], out: IO[str]) -> int:
    out.write("[")
    count = 0
    for item in items:
        out.write(("\n" if count == 0 else ",\n") + json.dumps(item, ensure_ascii=False))
        count += 1
    out.write("\n]\n")
    return count


def _write_csv(paths: Sequence[Path], out: IO[str]) -> int:
    # Two passes over the files: the header must name every field before the first row.
    fields: dict[str, None] = {}
    for item in read_items(paths):
        fields.update(dict.fromkeys(item))
    writer = csv.DictWriter(out, fieldnames=list(fields), restval="", lineterminator="\n")
    writer.writeheader()
    count = 0
    for item in read_items(paths):
        writer.writerow({key: _cell(value) for key, value in item.items()})
        count += 1
    return count


def _cell(value: object) -> object:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value


def _write_xml(items: Iterable[dict[str, Any]], out: IO[str]) -> int:
    # A text stream: XMLGenerator writes it str (typeshed names TextIOBase, which IO[str] is at run time).
    xml = XMLGenerator(cast(TextIOBase, out), encoding="utf-8", short_empty_elements=True)
    xml.startDocument()
    xml.startElement("items", _NO_ATTRIBUTES)
    count = 0
    for item in items:
        out.write("\n")
        xml.startElement("item", _NO_ATTRIBUTES)
        for key, value in item.items():
            _xml_field(xml, key, value)
        xml.endElement("item")
        count += 1
    out.write("\n")
    xml.endElement("items")
    xml.endDocument()
    out.write("\n")
    return count


def _xml_field(xml: XMLGenerator, key: str, value: object) -> None:
    name, attributes = (key, _NO_ATTRIBUTES) if _XML_NAME.fullmatch(key) and not key.lower().startswith("xml") \
        else ("field", AttributesImpl({"name": key}))
    xml.startElement(name, attributes)
    if isinstance(value, list):
        for element in value:
            _xml_field(xml, "value", element)
    elif isinstance(value, dict):
        for inner, element in value.items():
            _xml_field(xml, str(inner), element)
    elif value is not None:
        xml.characters(str(value).lower() if isinstance(value, bool) else str(value))
    xml.endElement(name)


# ----------------------------------------------------------------------- crawl.log, WARC
RUN_LINES = 200_000  # crawl.log lines sorted in memory at once (a run); runs are merged from disk


def export_crawl_log(data_dirs: Sequence[Path], out: IO[str]) -> int:
    """Every member's crawl.log lines in ``fetched_at`` order (ISO 8601 UTC: it sorts as text). A
    file is nearly in that order, not quite (lines are written as pages are stored, concurrent
    fetches end out of order), so it is an external merge sort: runs of RUN_LINES sorted in
    memory and spilled to temporary files, then merged; memory stays bounded whatever the logs
    weigh. A line without a time keeps the time of the line before it in its file."""
    with ExitStack() as stack:
        runs: list[Iterator[tuple[str, str]]] = []
        for path in (path for data_dir in data_dirs for path in crawl_log_files(data_dir)):
            lines = _timed_lines(stack.enter_context(path.open(encoding="utf-8", errors="replace")))
            while chunk := list(itertools.islice(lines, RUN_LINES)):
                chunk.sort(key=lambda entry: entry[0])
                spill = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
                spill.writelines(f"{stamp}\t{line}" for stamp, line in chunk)
                spill.seek(0)
                runs.append(_spilled(spill))
        count = 0
        for _, line in heapq.merge(*runs, key=lambda entry: entry[0]):
            out.write(line if line.endswith("\n") else line + "\n")
            count += 1
    return count


def _spilled(spill: IO[str]) -> Iterator[tuple[str, str]]:
    for record in spill:
        stamp, _, line = record.partition("\t")
        yield stamp, line


def _timed_lines(lines: IO[str]) -> Iterator[tuple[str, str]]:
    last = ""
    for line in lines:
        if not line.strip():
            continue
        try:
            stamp = json.loads(line).get("fetched_at")
        except (ValueError, AttributeError):
            stamp = None
        last = stamp if isinstance(stamp, str) else last
        yield last, line if line.endswith("\n") else line + "\n"


def export_warc(data_dirs: Sequence[Path], target: Path) -> tuple[int, int]:
    """One pywb collection of every member's WARC files and indexes: (files, index lines)."""
    archive = target / "collections" / COLLECTION / "archive"
    indexes = target / "collections" / COLLECTION / "indexes"
    archive.mkdir(parents=True, exist_ok=True)
    indexes.mkdir(parents=True, exist_ok=True)
    files, cdxj = 0, []
    for data_dir in data_dirs:
        for warc in sorted((data_dir / "warc").glob(f"*{WARC_SUFFIX}")):
            destination = archive / warc.name
            if destination.exists():
                raise ExportError(f"{warc.name} is in two data directories: one collection cannot hold both")
            _link_or_copy(warc, destination)
            files += 1
            index = warc.with_name(warc.name[: -len(WARC_SUFFIX)] + CDXJ_SUFFIX)
            if index.exists():  # a member's open file has no index yet: pywb cannot serve it
                cdxj.append(index)
    lines = _merged_index(cdxj, indexes / f"index{CDXJ_SUFFIX}")
    return files, lines


def _link_or_copy(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _merged_index(indexes: Sequence[Path], target: Path) -> int:
    """The indexes' lines in one sorted CDXJ file (each is sorted: a k-way merge)."""
    with ExitStack() as stack:
        streams = [stack.enter_context(path.open(encoding="utf-8")) for path in indexes]
        count = 0
        with target.open("w", encoding="utf-8") as out:
            for line in heapq.merge(*streams):
                out.write(line if line.endswith("\n") else line + "\n")
                count += 1
    return count


@contextmanager
def output(path: str) -> Iterator[IO[str]]:
    """``-`` is standard output; a ``file://`` URI is its path; anything else a file path."""
    if path == "-":
        yield sys.stdout
        return
    local = path[len("file://"):] if path.startswith("file://") else path
    if "://" in local:
        raise ExportError(f"{path!r}: only local files (a path, file://PATH or -) are written")
    with open(local, "w", encoding="utf-8", newline="") as handle:
        yield handle
