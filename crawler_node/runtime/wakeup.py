"""Wake whoever waits for something to change, without a poll.

An owner calls ``notify()`` whenever its answer to a question may have changed (a queue gave
an item away, bytes were released, an outbox was acknowledged); a waiter re-asks its question
after each wake-up. ``notify()`` with nobody waiting costs one truth test, so owners may call
it on every change. Unlike ``asyncio.Event`` there is no flag to clear, so two waiters never
race on resetting it, and a waiter cannot miss a notification that comes after it asked its
question: ``wait()`` registers before it yields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Wakeup:
    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait(self, timeout: float | None = None) -> bool:
        """Until the next ``notify()`` (True) or ``timeout`` seconds (False)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._waiters.append(future)  # type: ignore[arg-type]
        timer = loop.call_later(timeout, _expire, future) if timeout is not None else None
        notified = False
        try:
            notified = await future is not _TIMED_OUT
            return notified
        finally:
            if timer is not None:
                timer.cancel()
            if not notified:  # timed out or cancelled: still listed, unlike a notified waiter
                try:
                    self._waiters.remove(future)  # type: ignore[arg-type]
                except ValueError:
                    pass

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Until ``predicate()`` holds (True) or ``timeout`` seconds have passed (False)."""
        if predicate():
            return True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return predicate()
            await self.wait(left)
            if predicate():
                return True


_TIMED_OUT = object()


def _expire(future: asyncio.Future[object]) -> None:
    if not future.done():
        future.set_result(_TIMED_OUT)
