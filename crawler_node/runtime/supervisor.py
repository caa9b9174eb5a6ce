"""Every task of a node is named and supervised, with one policy for the node and the cluster:

- a **stage** (dispatcher, parse loop, store loop, lease refill) is part of the pipeline: if it
  ends, with an exception or not, the node can no longer keep its promises, so it stops
  loudly (``on_fatal``);
- a **recurring job** (heartbeats, sweeps, lease expiry, shedding, an outbox sender) runs one
  round after another; a round that raises is logged and counted, and the job runs again
  after ``retry_s`` (Crawlee's RecurringTask). It never ends silently, only when stopped;
- a **one-off** task (announcing a join to a peer) is named, and its failure is logged.

A full disk (runtime.datadir.DiskFull, or the OS or SQLite error that means one) is fatal
wherever it is met, a recurring job too: nothing more can be stored, so the node stops, and
``on_fatal`` says it once, in one line (no traceback: nothing is wrong with the code).

Tasks are kept until they end, and :meth:`Supervisor.stop` cancels and awaits them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from crawler_node.core.stats import Indexed
from crawler_node.runtime.datadir import disk_full
from crawler_node.runtime.workers import WorkerDied

log = logging.getLogger("crawler_node.supervisor")

Round = Callable[[], Awaitable[object]]


async def cut_short(step: Coroutine[Any, Any, object], event: asyncio.Event, *, name: str) -> BaseException | None:
    """Run ``step`` as a task named ``name`` until it ends or ``event`` is set (then it is
    cancelled); returns the error it ended with, None if it ended well or was cut short."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(step, name=name)
    setting = loop.create_task(event.wait(), name=f"{name}:cut-short")
    try:
        await asyncio.wait({task, setting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        setting.cancel()
        task.cancel()  # a no-op once it ended
        await asyncio.gather(task, setting, return_exceptions=True)
    return None if task.cancelled() else task.exception()


@dataclass(frozen=True, slots=True)
class SupervisorSnapshot(Indexed):
    tasks: int  # running
    failures: Mapping[str, int]  # rounds of recurring jobs that raised, by job


class Supervisor:
    def __init__(self, *, on_fatal: Callable[[BaseException], None], retry_s: float = 1.0) -> None:
        if retry_s < 0:
            raise ValueError(f"retry_s must be >= 0, got {retry_s}")
        self._on_fatal = on_fatal
        self._retry_s = retry_s
        self._tasks: dict[asyncio.Task[None], str] = {}
        self._stopping = False
        self.failures: Counter[str] = Counter()  # rounds of recurring jobs that raised, by job

    def stage(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self._start(name, self._run_stage(name, coro))

    def recurring(self, name: str, one_round: Round, *, every_s: float = 0.0) -> asyncio.Task[None]:
        """Run ``one_round()`` again and again, ``every_s`` apart (0: the round paces itself,
        for instance by waiting for work)."""
        return self._start(name, self._run_recurring(name, one_round, every_s))

    def once(self, name: str, coro: Coroutine[Any, Any, object]) -> asyncio.Task[None]:
        return self._start(name, self._run_once(name, coro))

    def closing(self) -> None:
        """The node is stopping: stages may end now without that being an error."""
        self._stopping = True

    def running(self, name: str) -> bool:
        return any(task_name == name and not task.done() for task, task_name in self._tasks.items())

    def snapshot(self) -> SupervisorSnapshot:
        return SupervisorSnapshot(tasks=len(self._tasks), failures=dict(self.failures))

    async def stop(self) -> None:
        """Cancel every task and wait for them to end."""
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _start(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = name
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _run_stage(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            full = disk_full(exc, path=None, what=f"the {name} stage's output")
            if isinstance(exc, WorkerDied):  # said where it died, with its cause: no traceback
                log.error("pipeline stage %s failed: %s; stopping the node", name, exc)
            elif full is None:
                log.error("pipeline stage %s failed; stopping the node", name, exc_info=exc)
            self._on_fatal(full or exc)
            return
        if not self._stopping:
            error = RuntimeError(f"pipeline stage {name} ended")
            log.error("%s; stopping the node", error)
            self._on_fatal(error)

    async def _run_recurring(self, name: str, one_round: Round, every_s: float) -> None:
        while True:
            try:
                await one_round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                full = disk_full(exc, path=None, what=f"the {name} job's output")
                if full is not None:
                    self._on_fatal(full)  # the node stops; running again would fail again
                    return
                self.failures[name] += 1
                log.exception("recurring job %s failed; it runs again in %.1f s", name, self._retry_s)
                await asyncio.sleep(self._retry_s)
                continue
            if every_s:
                await asyncio.sleep(every_s)
            else:
                await asyncio.sleep(0)  # a round that did not wait still lets others run

    @staticmethod
    async def _run_once(name: str, coro: Coroutine[Any, Any, object]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %s failed", name)
