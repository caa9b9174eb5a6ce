"""A set of recent strings with a hard bound on memory.

Both the frontier (URLs known to be rows already) and the parser worker (links already handed
to the node) answer "seen moments ago?" from memory for most links: the same navigation is on
every page. Neither may grow with the crawl, and neither needs exact LRU order: two
generations of at most ``capacity / 2`` each, and a full young generation becomes the old
one (the old one is dropped). A member is forgotten at the latest after ``capacity`` newer
insertions, and never before ``capacity / 2`` of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class HasUrl(Protocol):
    @property
    def url(self) -> str: ...


U = TypeVar("U", bound=HasUrl)


class TwoGenerationSet:
    __slots__ = ("_half", "_young", "_old")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        self._half = capacity // 2
        self._young: set[str] = set()
        self._old: set[str] = set()

    def __contains__(self, item: str) -> bool:
        return item in self._young or item in self._old

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def add_new(self, items: Iterable[str]) -> list[str]:
        """Remember ``items``; return those that were not remembered yet, in order (an item
        listed twice counts once)."""
        young, old, half = self._young, self._old, self._half
        new: list[str] = []
        for item in items:
            if item in young or item in old:
                continue
            young.add(item)
            new.append(item)
            if len(young) >= half:
                self._old, self._young = young, set()
                young, old = self._young, self._old
        return new

    def unknown(self, entries: Iterable[U]) -> list[U]:
        """The entries whose ``url`` is not remembered, in order; remembers nothing. Asked for
        every discovered link: the attribute is read inline, which a key function would
        double (a call per entry)."""
        young, old = self._young, self._old
        return [entry for entry in entries if entry.url not in young and entry.url not in old]

    def update(self, items: Iterable[str]) -> None:
        """Remember ``items``; one in the old generation moves to the young one."""
        young, half = self._young, self._half
        for item in items:
            young.add(item)
            if len(young) >= half:
                self._old, self._young = young, set()
                young = self._young

    def clear(self) -> None:
        self._young.clear()
        self._old.clear()
