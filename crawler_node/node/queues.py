"""Bounded queues between pipeline stages, measured the way rule 8 asks: depth, oldest-item
age, and how often a producer had to wait (a blocked enqueue is the slow-down travelling
upstream, so it is counted rather than hidden)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from crawler_node.core.stats import Kind, Metric, stat
from crawler_node.runtime.wakeup import Wakeup

T = TypeVar("T")

# Rule 8, per stage (the status's ``queues``, each under its stage's name): one family each,
# made by the snapshots of every kind of stage queue (this one, the frontier's, the dispatcher's).
QUEUE_DEPTH = Metric("crawler_queue_depth", "Items waiting in each pipeline stage", Kind.GAUGE, ("stage",))
QUEUE_AGE = Metric("crawler_queue_oldest_age_seconds", "Age of the oldest item in each stage", Kind.GAUGE, ("stage",))
QUEUE_CAPACITY = Metric("crawler_queue_capacity", "Bound of each stage's queue", Kind.GAUGE, ("stage",))
BLOCKED_ENQUEUES = Metric("crawler_blocked_enqueues",
                          "Enqueues that had to wait (or were refused) because a stage was full", Kind.COUNTER,
                          ("stage",))


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    depth: int = field(metadata=stat(QUEUE_DEPTH))
    capacity: int = field(metadata=stat(QUEUE_CAPACITY))
    oldest_age_s: float = field(metadata=stat(QUEUE_AGE))
    blocked_puts: int = field(metadata=stat(BLOCKED_ENQUEUES))


@dataclass(frozen=True, slots=True)
class FrontierQueueSnapshot:
    """The frontier as a stage queue: its queued URLs and the oldest one's age (it is bounded
    by disk, not by a capacity; nothing waits to enqueue into it)."""

    depth: int = field(metadata=stat(QUEUE_DEPTH))
    oldest_age_s: float = field(metadata=stat(QUEUE_AGE))
    blocked_puts: int = field(default=0, metadata=stat(BLOCKED_ENQUEUES, json=False))


class StageQueue(Generic[T]):
    """An asyncio FIFO with a hard bound; ``put`` waits when full, it never grows. Every item
    taken notifies ``taken`` (admission waits on it for a full or lagging stage to drain)."""

    def __init__(self, name: str, maxsize: int, *, taken: Wakeup | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if maxsize < 1:
            raise ValueError(f"{name}: a stage queue needs maxsize >= 1 (unbounded queues are not allowed)")
        self.name = name
        self.maxsize = maxsize
        self._queue: asyncio.Queue[T] = asyncio.Queue(maxsize)
        # FIFO, so the enqueue times leave in the order the items do.
        self._enqueued_at: deque[float] = deque()
        self._clock = clock
        self._taken = taken if taken is not None else Wakeup()
        self.blocked_puts = 0

    async def put(self, item: T) -> None:
        queue = self._queue
        if queue.full():
            self.blocked_puts += 1
            await queue.put(item)
        else:
            queue.put_nowait(item)  # no coroutine to run when there is room (most puts)
        self._enqueued_at.append(self._clock())

    async def get(self) -> T:
        item = await self._queue.get()
        self._enqueued_at.popleft()
        self._taken.notify()
        return item

    def get_nowait(self) -> T:
        item = self._queue.get_nowait()
        self._enqueued_at.popleft()
        self._taken.notify()
        return item

    def full(self) -> bool:
        return self._queue.full()

    def qsize(self) -> int:
        return self._queue.qsize()

    def empty(self) -> bool:
        return self._queue.empty()

    def oldest_age_s(self) -> float:
        return self._clock() - self._enqueued_at[0] if self._enqueued_at else 0.0

    def snapshot(self) -> QueueSnapshot:
        return QueueSnapshot(depth=self.qsize(), capacity=self.maxsize, oldest_age_s=round(self.oldest_age_s(), 3),
                             blocked_puts=self.blocked_puts)
