"""Statement shapes that let a few compiled statements serve batches of every size.

SQLite compiles each distinct statement text once and keeps it in the connection's cache, so
a batch is cut into a few fixed sizes instead of getting a text of its own length. Parameters
per statement stay well below SQLite's limit (999 before 3.32).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import TypeVar

T = TypeVar("T")

# An `IN (...)` list holds at most this many values (a power of two: lists are padded to one,
# see in_lists). A multi-row insert holds at most the largest of INSERT_CHUNKS rows.
IN_LIST_MAX = 256
# A condition on a row of `urls`: it is not leased (a leased row stays in state 0, its lease a
# row of `leases`: schema). One probe of that small table's key per row.
NOT_LEASED = "NOT EXISTS (SELECT 1 FROM leases WHERE leases.id = urls.id)"
# Statement sizes in rows: a batch is cut into these (see chunk_sizes).
INSERT_CHUNKS = (32, 16, 8, 4, 2, 1)

_PLACEHOLDERS = {1 << bits: ",".join("?" * (1 << bits)) for bits in range(IN_LIST_MAX.bit_length())}


def in_lists(values: Sequence[T]) -> Iterator[tuple[str, list[T]]]:
    """`values` as (placeholders, parameters) for `IN (...)` lists of at most IN_LIST_MAX.

    Each list is padded to a power of two with copies of its last value, which IN ignores:
    a few statement texts then serve every length, each compiled once and reused from the
    connection's statement cache instead of compiled anew for each new length."""
    for start in range(0, len(values), IN_LIST_MAX):
        chunk = list(values[start:start + IN_LIST_MAX])
        size = 1 << (len(chunk) - 1).bit_length()
        chunk += [chunk[-1]] * (size - len(chunk))
        yield _PLACEHOLDERS[size], chunk


def value_rows(values: Sequence[T], row: str = "(?)") -> Iterator[tuple[str, list[T]]]:
    """`in_lists` for the `VALUES` rows of an insert that ignores conflicts, one value per
    `row` (a template such as "(?, 0)"): the padding copies conflict with their original
    and are skipped."""
    for _placeholders, chunk in in_lists(values):
        yield _rows_text(row, len(chunk)), chunk


@cache
def _rows_text(row: str, count: int) -> str:
    return ", ".join([row] * count)


def chunk_sizes(rows: int) -> Iterator[int]:
    """Cut `rows` into sizes from INSERT_CHUNKS, largest first."""
    for size in INSERT_CHUNKS:
        while rows >= size:
            yield size
            rows -= size
