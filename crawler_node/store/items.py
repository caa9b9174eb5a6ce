"""Items from user pipelines: JSON lines files under ``data_dir/items/``, rotated by size.

The lines come serialised from the parser worker (crawler_node.pipelines.runner), one JSON
document each without its newline; this writer only appends them. Like the WARC writer it is
synchronous and runs in the store worker, and each run writes new files (opened with "x"):
``<node_id>-<UTC timestamp>-<serial:05d>.jsonl``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from crawler_node.datadir_layout import ITEMS_SUFFIX
from crawler_node.store.crawl_log import _drop_torn_tail
from crawler_node.store.files import open_next


class ItemWriter:
    """Appends JSON lines to size-rotated ``.jsonl`` files in `directory`.

    A file is opened at the first line written to it, so a crawl without items leaves no
    file. On construction the torn last line a killed process may have left in any existing
    file is cut, so every file in the directory stays valid JSON lines."""

    def __init__(self, directory: Path, *, node_id: str, max_file_bytes: int = 100_000_000) -> None:
        if max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be > 0, got {max_file_bytes}")
        if not node_id or "/" in node_id:
            raise ValueError(f"node_id must be a non-empty name without '/', got {node_id!r}")
        directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(directory.glob(f"*{ITEMS_SUFFIX}")):
            _drop_torn_tail(path)
        self.directory = directory
        self.node_id = node_id
        self.max_file_bytes = max_file_bytes
        self.files: list[Path] = []  # written by this writer, in order
        self.items_written = 0
        self.bytes_written = 0  # UTF-8, newlines included, over all files
        self._serial = 0
        self._file: BinaryIO | None = None
        self._file_bytes = 0
        self._closed = False

    def write(self, lines: Iterable[str]) -> int:
        """Append each line and a newline (buffered: call `flush` per batch). Returns the count.

        Each line must be one JSON document on one line. The batch is checked whole before any
        of it is written, so a bad line leaves no part of its batch in the file."""
        if self._closed:
            raise ValueError(f"item writer for {self.directory} is closed")
        encoded: list[bytes] = []
        for line in lines:
            # The runner serialises with json.dumps, which escapes newlines in strings; a raw
            # one here would split an item in two lines that are each not JSON.
            if "\n" in line or "\r" in line:
                raise ValueError(f"an item line must be one line: {line[:80]!r}")
            encoded.append(line.encode("utf-8") + b"\n")
        for data in encoded:
            if self._file is None:
                self._open_file()
            assert self._file is not None
            self._file.write(data)
            self._file_bytes += len(data)
            self.bytes_written += len(data)
            self.items_written += 1
            if self._file_bytes >= self.max_file_bytes:
                self._close_file()  # the next line opens the next file
        return len(encoded)

    def _open_file(self) -> None:
        path, self._file, self._serial = open_next(self.directory, self.node_id, ITEMS_SUFFIX, self._serial,
                                                   datetime.now(UTC))
        self._file_bytes = 0
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
        if self._file is not None:
            self._file.close()
        self._file = None
