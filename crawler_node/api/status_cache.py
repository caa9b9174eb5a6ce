"""`GET /v1/status` from a snapshot: read from memory, rebuilt when a reader finds it old.

Building a status awaits the frontier's thread, which a flood of ``POST /v1/urls`` keeps busy
with writes (and the cluster view awaits every peer): built per request, a status took seconds
exactly when an operator needs it. A ``Snapshots`` keeps the last status built and its build
time; a reader is answered from it, with ``snapshot_age_s`` in the body, and starts a rebuild
when it is older than ``period_s``. There is no timer: a status no one reads is not rebuilt.

The rules, in order:
- No snapshot yet: the reader waits for the first.
- One that says ``idle`` is rebuilt before it is served, and so is one taken before the
  operator-visible state changed (a pause, a stop, a member's state: ``watched``). A caller
  waiting for the crawl to end, or checking the effect of its own command, never reads an
  answer from before it; such a node is quiet, so the build is quick.
- One younger than ``period_s`` is served as it is.
- An older one starts a rebuild; the reader waits for it up to ``wait_s`` (a quiet node's build
  takes a few milliseconds, so it usually gets the new one) and is otherwise answered with the
  old one. Rebuilds are single-flight: a flood of readers makes one build at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

log = logging.getLogger("crawler_node.api")

PERIOD_S = 0.5  # a busy node's status is at most this old when read, plus one build
WAIT_S = 0.02  # how long a reader of an old snapshot waits for the new one


S = TypeVar("S")


def _as_json(value: object) -> dict[str, Any]:
    return cast(dict[str, Any], value)


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[S]):
    value: S  # what the build made (node.node_snapshot.NodeSnapshot, or a status already in JSON)
    status: dict[str, Any]  # its JSON
    started_at: float  # monotonic: when its build began (its data is at least this old)
    watched: Hashable  # the operator-visible state when its build began


class Snapshots(Generic[S]):
    """The status of one scope (this node, or the cluster as it sees it), built by ``build``."""

    def __init__(self, name: str, build: Callable[..., Awaitable[S]], *,
                 watched: Callable[[], Hashable], base: Snapshots[Any] | None = None,
                 render: Callable[[S], dict[str, Any]] = _as_json, period_s: float = PERIOD_S,
                 wait_s: float = WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        """``base``: the snapshots this view is built on: each build of this one takes a new one
        of those (or the one under way) and is passed its status, so reading the base after
        this view never goes back in time, and this one's age counts from the older of the two.
        ``render``: a build's JSON, made once per build (by default the build makes JSON)."""
        if period_s <= 0 or wait_s < 0:
            raise ValueError(f"need period_s > 0 and wait_s >= 0, got {period_s} and {wait_s}")
        self._name = name
        self._build = build
        self._render = render
        self._base = base
        self._watched = watched
        self._period_s = period_s
        self._wait_s = wait_s
        self._clock = clock
        self._last: Snapshot[S] | None = None
        self._building: asyncio.Task[Snapshot[S]] | None = None
        self._failing = False  # the last build raised
        self.builds = 0

    async def read(self, *, fresh: bool = False) -> dict[str, Any]:
        """The status, with ``snapshot_age_s``: the seconds since its build began. ``fresh``:
        from a build begun after this call (what a caller who just changed something and counts
        on seeing it asks for; it waits for the frontier's thread, as a status built per request
        does)."""
        snapshot = await self._fresh() if fresh else await self._current()
        # A shallow copy: the snapshot itself is shared by every reader and never changed.
        return {**snapshot.status, "snapshot_age_s": round(max(0.0, self._clock() - snapshot.started_at), 3)}

    async def value(self) -> S:
        """What the build made, by the same rules as :meth:`read` (/metrics renders it)."""
        return (await self._current()).value

    async def _current(self) -> Snapshot[S]:
        last = self._last
        if last is None or last.status.get("idle") or last.watched != self._watched():
            asked_at = self._clock()
            # shield: a reader that hangs up does not cancel the build the others wait for
            snapshot = await asyncio.shield(self._refresh())
            if snapshot.status.get("idle") and snapshot.started_at < asked_at:
                # Under way before this read, it may not have seen the work the reader just gave;
                # an idle node builds quickly, so one more build settles it.
                snapshot = await asyncio.shield(self._refresh())
            return snapshot
        if self._clock() - last.started_at < self._period_s:
            return last
        building = self._refresh()
        try:
            return await asyncio.wait_for(asyncio.shield(building), self._wait_s)
        except TimeoutError:
            return last  # the build goes on; the next reader may get it
        except Exception:  # noqa: BLE001 -- logged by the build's callback; the old one stands
            return last

    async def _fresh(self) -> Snapshot[S]:
        asked_at = self._clock()
        try:
            snapshot = await asyncio.shield(self._refresh())
            if snapshot.started_at < asked_at:  # under way before the call: one more
                snapshot = await asyncio.shield(self._refresh())
        except Exception:
            # Logged by the build's callback. A node in its last moments of a stop (its frontier
            # closed, its API still up) serves its last status, "stopping", not a 500.
            if self._last is None:
                raise
            return self._last
        return snapshot

    def _refresh(self) -> asyncio.Task[Snapshot[S]]:
        if self._building is None:
            self._building = asyncio.create_task(self._run_build(), name=f"status-snapshot-{self._name}")
            self._building.add_done_callback(self._built)
        return self._building

    async def _run_build(self) -> Snapshot[S]:
        started_at, watched = self._clock(), self._watched()
        if self._base is None:
            value = await self._build()
        else:
            base = await asyncio.shield(self._base._refresh())
            started_at = min(started_at, base.started_at)
            value = await self._build(base.status)
        return Snapshot(value=value, status=self._render(value), started_at=started_at, watched=watched)

    def _built(self, task: asyncio.Task[Snapshot[S]]) -> None:
        # No awaits here: the next reader must find either this build's result or no build.
        self._building = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if not self._failing:  # once per run of failures, not on every read
                log.warning("building the %s status failed (the last one is served meanwhile): %s",
                            self._name, exc, exc_info=exc)
            self._failing = True
            return
        self._failing = False
        self.builds += 1
        self._last = task.result()

    async def close(self) -> None:
        """Cancel a build in progress (the API is shutting down)."""
        building = self._building
        if building is not None:
            building.cancel()
            await asyncio.wait([building])  # its outcome no longer matters to anyone
