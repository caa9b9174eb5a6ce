"""The store's rotated files (WARC, items): `<node_id>-<UTC timestamp>-<serial:05d><suffix>`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from crawler_node.datadir_layout import series_file_name


def open_next(directory: Path, node_id: str, suffix: str, serial: int, now: datetime) -> tuple[Path, BinaryIO, int]:
    """Create the next file of a series; returns its path, the open file, and the next serial.
    Opened with "x": never appends to or clobbers a file another run left behind."""
    stamp = now.strftime("%Y%m%d%H%M%S%f")[:-3]
    while True:
        path = directory / series_file_name(node_id, stamp, serial, suffix)
        serial += 1
        try:
            return path, open(path, "xb"), serial
        except FileExistsError:
            continue
