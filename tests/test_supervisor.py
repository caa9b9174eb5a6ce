"""One supervision policy for node and cluster: a stage that dies stops the node, a recurring
job that fails runs again, every task is named and stopped in the end."""

from __future__ import annotations

import asyncio

import pytest

from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup


async def test_a_recurring_job_that_raises_is_logged_and_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    fatal: list[BaseException] = []
    supervisor = Supervisor(on_fatal=fatal.append, retry_s=0.0)
    rounds: list[int] = []
    done = asyncio.Event()

    async def flaky() -> None:
        rounds.append(len(rounds))
        if len(rounds) <= 3:
            raise KeyError("a malformed reply")
        if len(rounds) == 5:
            done.set()
        await asyncio.sleep(0)

    supervisor.recurring("heartbeats", flaky)
    await asyncio.wait_for(done.wait(), 5)
    assert supervisor.failures["heartbeats"] == 3 and not fatal
    assert supervisor.running("heartbeats")
    assert "recurring job heartbeats failed" in caplog.text
    await supervisor.stop()
    assert not supervisor.running("heartbeats") and supervisor.snapshot()["tasks"] == 0


async def test_a_stage_that_fails_or_ends_stops_the_node() -> None:
    fatal: list[BaseException] = []
    supervisor = Supervisor(on_fatal=fatal.append)

    async def broken() -> None:
        raise RuntimeError("the store is gone")

    async def returns() -> None:
        return None

    await asyncio.wait({supervisor.stage("store", broken()), supervisor.stage("dispatcher", returns())}, timeout=5)
    assert [str(exc) for exc in fatal] == ["the store is gone", "pipeline stage dispatcher ended"]
    supervisor.closing()  # while the node stops, a stage may end
    await asyncio.wait({supervisor.stage("dispatcher", returns())}, timeout=5)
    assert len(fatal) == 2
    await supervisor.stop()


async def test_stop_cancels_every_task_and_waits_for_it() -> None:
    supervisor = Supervisor(on_fatal=lambda exc: None)
    never = Wakeup()
    cancelled = []

    async def waits() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    supervisor.stage("parse-0", waits())
    supervisor.recurring("sweep", waits)
    supervisor.once("announce:b", waits())
    await asyncio.sleep(0)
    await supervisor.stop()
    assert cancelled == [True, True, True]
