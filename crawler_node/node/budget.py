"""The bytes of response bodies between the fetch and the store: one of admission's pressure
sources. A body is counted from the moment its fetch ends until the store has written it, so
a slow parser or store cannot let memory grow past ``limit`` (rule 1, measured in bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler_node.core.stats import gauge
from crawler_node.runtime.wakeup import Wakeup


@dataclass(frozen=True, slots=True)
class HeldSnapshot:
    """Its part of the status's ``admission``."""

    held_bytes: int = field(metadata=gauge("crawler_pipeline_held_bytes", "Response bodies between fetch and store"))
    held_bytes_limit: int = field(metadata=gauge("crawler_pipeline_held_bytes_limit",
                                                 "Held bytes above which no fetch starts"))


class HeldBytes:
    name = "memory"  # the reason admission reports

    def __init__(self, *, limit: int, released: Wakeup) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.held = 0
        self._released = released

    def hold(self, size: int) -> None:
        self.held += size

    def release(self, size: int) -> None:
        self.held -= size
        self._released.notify()

    def needs_backout(self) -> bool:
        return self.held > self.limit

    def snapshot(self) -> HeldSnapshot:
        return HeldSnapshot(held_bytes=self.held, held_bytes_limit=self.limit)
