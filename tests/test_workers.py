"""Worker processes fed from the event loop: answers in order, errors carried back, a dead
worker fails its callers instead of hanging them, and no worker outlives its node."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import time

import psutil
import pytest

from crawler_node.runtime.eventloop import loop_factory
from crawler_node.runtime.workers import ProcessWorker, ThreadWorker, WorkerDied


def _counter(start: int) -> list[int]:
    return [start]


def _next(context: list[int], step: int) -> int:
    context[0] += step
    return context[0]


def _fail(context, message: str) -> None:
    raise ValueError(message)


def _exit(context) -> None:
    os._exit(3)


def _echo(context, data: bytes) -> int:
    return len(data)


def _sleep(context, seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _pid(context) -> int:
    return os.getpid()


def _unpicklable(context):
    return lambda: None


@pytest.mark.parametrize("kind", [ProcessWorker, ThreadWorker])
def test_calls_share_the_context_and_answer_in_order(kind) -> None:
    async def scenario() -> list[int]:
        worker = kind("t", _counter, (10,))
        await worker.start()
        try:
            # Sent together: the worker holds them all and answers each in turn.
            return await asyncio.gather(*(worker.call(_next, step) for step in (1, 2, 3, 4)))
        finally:
            await worker.close()

    assert asyncio.run(scenario()) == [11, 13, 16, 20]


@pytest.mark.parametrize("kind", [ProcessWorker, ThreadWorker])
def test_an_error_comes_back_and_the_worker_keeps_serving(kind) -> None:
    async def scenario() -> int:
        worker = kind("t", _counter, (0,))
        await worker.start()
        try:
            with pytest.raises(ValueError, match="bad page"):
                await worker.call(_fail, "bad page")
            return await worker.call(_next, 5)
        finally:
            await worker.close()

    assert asyncio.run(scenario()) == 5


def test_an_unpicklable_answer_is_an_error_not_a_hang() -> None:
    async def scenario() -> None:
        worker = ProcessWorker("t")
        await worker.start()
        try:
            with pytest.raises(RuntimeError, match="unpicklable"):
                await worker.call(_unpicklable)
            with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
                await worker.call(_echo, lambda: None)  # an argument that cannot be sent
            assert await worker.call(_echo, b"after") == 5  # answers still line up
            assert await worker.call(_echo, b"x" * 3_000_000) == 3_000_000  # bigger than a pipe
        finally:
            await worker.close()

    asyncio.run(scenario())


def test_a_failing_init_surfaces_at_start() -> None:
    async def scenario() -> None:
        worker = ProcessWorker("t", _fail, (None, "no store here"))
        with pytest.raises(ValueError, match="no store here"):
            await worker.start()
        await worker.close()

    asyncio.run(scenario())


def test_a_dead_worker_fails_every_waiting_call() -> None:
    async def scenario() -> None:
        worker = ProcessWorker("t")
        await worker.start()
        try:
            waiting = [asyncio.ensure_future(worker.call(_sleep, 0.2)) for _ in range(3)]
            await asyncio.sleep(0.05)
            os.kill(worker.pid, signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
            assert all(isinstance(result, WorkerDied) for result in results), results
            with pytest.raises(WorkerDied):
                await worker.call(_next, 1)
        finally:
            await worker.close()

    asyncio.run(scenario())


def test_a_worker_that_exits_mid_call_is_reported() -> None:
    async def scenario() -> None:
        worker = ProcessWorker("t")
        await worker.start()
        try:
            with pytest.raises(WorkerDied, match="exited with 3"):
                await asyncio.wait_for(worker.call(_exit), 10)
        finally:
            await worker.close()

    asyncio.run(scenario())


def test_ctrl_c_does_not_kill_a_worker_and_closing_ends_it() -> None:
    async def scenario() -> None:
        worker = ProcessWorker("t", _counter, (0,))
        await worker.start()
        pid = worker.pid
        try:
            # A terminal's Ctrl-C reaches the whole process group; the node stops in order
            # and still needs its workers (the store's last batch) while it does.
            os.kill(pid, signal.SIGINT)
            os.kill(pid, signal.SIGTERM)
            assert await worker.call(_next, 1) == 1
        finally:
            await worker.close()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    asyncio.run(scenario())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_call_after_the_pipe_to_the_worker_closed_fails_as_worker_died(loop: str) -> None:
    """A worker that dies breaks its pipe, and the event loop closes the pipe's transport, at
    times before the reader has seen the exit: a call written then (the node's parse loops
    share a worker) is a WorkerDied like the others, never the closed pipe's own error (under
    uvloop a RuntimeError, which stopped a node in CI). The pipe is closed here as the loop
    closes it on a broken pipe; the worker, its input ended, exits."""
    async def scenario() -> None:
        worker = ProcessWorker("t")
        await worker.start()
        try:
            assert worker._process is not None and worker._process.stdin is not None
            worker._process.stdin.close()
            results = await asyncio.wait_for(
                asyncio.gather(*(worker.call(_echo, b"x" * 1000) for _ in range(3)), return_exceptions=True), 10)
            assert all(isinstance(result, WorkerDied) for result in results), results
        finally:
            await worker.close()

    _, factory = loop_factory(loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(scenario())


def _mirror(context, batch: list) -> list:
    return batch


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_batches_of_every_size_cross_to_a_worker_and_back_whole_and_in_order(loop: str) -> None:
    """Frames go out in pieces of ~64 KiB (a body past that size as a piece of its own), and a
    worker reads them into a buffer it keeps, up to 8 MiB, past that into one of their own: a
    batch of small rows, one of bodies about a frame's size, one larger than the pipe (1 MiB),
    one larger than the kept buffer, and smaller ones after them come back equal, several
    written before the first answer is read."""
    rows = [(f"https://example.test/{i}", "\u00e9t\u00e9 " * i, [("Header", str(i))] * 3, i * 0.5) for i in range(500)]
    bodies = [bytes([i % 251]) * (65_536 + i - 3) for i in range(7)]
    large = [(n, os.urandom(300_000), "x" * n) for n in range(5)]
    huge = [os.urandom(9 << 20)]
    batches = [rows, bodies, large, [], huge, rows[:1], large[:2]]

    async def scenario() -> list:
        worker = ProcessWorker("t")
        await worker.start()
        try:
            return await asyncio.gather(*(worker.call(_mirror, batch) for batch in batches))
        finally:
            await worker.close()

    _, factory = loop_factory(loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(scenario()) == batches
