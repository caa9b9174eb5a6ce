"""The status snapshot's rules (api.snapshot), with a clock the test moves and builds that end
when the test resolves them: no sleeps, no timing."""

from __future__ import annotations

import asyncio

import pytest

from crawler_node.api.status_cache import Snapshots


class Builds:
    """A build per call, each ended by the test: ``finish(status)`` or ``fail(exc)``."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[dict]] = []
        self.started = 0

    async def __call__(self) -> dict:
        self.started += 1
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return await future

    def finish(self, status: dict) -> None:
        self.pending.pop(0).set_result(status)

    def fail(self, exc: Exception) -> None:
        self.pending.pop(0).set_exception(exc)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def parts():
    builds, clock, state = Builds(), Clock(), {"paused": False}
    snapshots = Snapshots("test", builds, watched=lambda: state["paused"], period_s=0.5, wait_s=0.0, clock=clock)
    return snapshots, builds, clock, state


async def first(snapshots: Snapshots, builds: Builds, status: dict) -> dict:
    reader = asyncio.create_task(snapshots.read())
    await settle()
    builds.finish(status)
    return await reader


async def test_the_first_reader_waits_for_the_first_build_and_readers_share_one(parts):
    snapshots, builds, clock, _ = parts
    readers = [asyncio.create_task(snapshots.read()) for _ in range(10)]
    await settle()
    assert builds.started == 1  # single-flight
    clock.now += 0.2
    builds.finish({"idle": False, "n": 1})
    answers = await asyncio.gather(*readers)
    assert all(answer == {"idle": False, "n": 1, "snapshot_age_s": 0.2} for answer in answers)


async def test_a_young_busy_snapshot_is_served_without_a_build(parts):
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": False, "n": 1})
    clock.now += 0.4
    assert await snapshots.read() == {"idle": False, "n": 1, "snapshot_age_s": 0.4}
    assert builds.started == 1


async def test_an_old_busy_snapshot_is_served_while_one_build_replaces_it(parts):
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": False, "n": 1})
    clock.now += 3.0
    # The build is slow (a flood keeps the frontier busy): every reader gets the old one at once.
    for _ in range(5):
        assert (await snapshots.read())["n"] == 1
    assert builds.started == 2
    clock.now += 1.0
    builds.finish({"idle": False, "n": 2})
    await settle()
    assert await snapshots.read() == {"idle": False, "n": 2, "snapshot_age_s": 1.0}  # from its build's start


async def test_an_idle_snapshot_is_rebuilt_before_it_is_served(parts):
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": True, "n": 1})
    reader = asyncio.create_task(snapshots.read())  # young, but a stale "idle" would end a wait too early
    await settle()
    assert not reader.done() and builds.started == 2
    builds.finish({"idle": False, "n": 2})
    assert (await reader)["n"] == 2


async def test_a_change_of_watched_state_makes_a_young_snapshot_out_of_date(parts):
    snapshots, builds, clock, state = parts
    await first(snapshots, builds, {"idle": False, "paused": False})
    state["paused"] = True  # an operator paused the crawl and reads the status back
    reader = asyncio.create_task(snapshots.read())
    await settle()
    builds.finish({"idle": False, "paused": True})
    assert (await reader)["paused"] is True


async def test_a_failed_build_keeps_the_last_snapshot_and_the_next_reader_tries_again(parts, caplog):
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": False, "n": 1})
    clock.now += 1.0
    assert (await snapshots.read())["n"] == 1
    builds.fail(RuntimeError("frontier busy"))
    await settle()
    assert "building the test status failed" in caplog.text
    assert (await snapshots.read())["n"] == 1 and builds.started == 3
    builds.finish({"idle": False, "n": 3})
    await settle()
    assert (await snapshots.read())["n"] == 3


async def test_the_first_build_failing_is_the_readers_error(parts):
    snapshots, builds, _, _ = parts
    reader = asyncio.create_task(snapshots.read())
    await settle()
    builds.fail(RuntimeError("frontier closed"))
    with pytest.raises(RuntimeError, match="frontier closed"):
        await reader


async def test_a_reader_that_hangs_up_does_not_cancel_the_build(parts):
    snapshots, builds, _, _ = parts
    reader = asyncio.create_task(snapshots.read())
    await settle()
    reader.cancel()
    await settle()
    builds.finish({"idle": False, "n": 1})
    await settle()
    assert (await snapshots.read())["n"] == 1 and builds.started == 1


async def test_close_cancels_a_build_in_progress(parts):
    snapshots, builds, _, _ = parts
    reader = asyncio.create_task(snapshots.read())
    await settle()
    await snapshots.close()
    assert builds.pending[0].cancelled()
    with pytest.raises(asyncio.CancelledError):
        await reader


def test_settings_are_checked():
    with pytest.raises(ValueError):
        Snapshots("x", Builds(), watched=lambda: None, period_s=0)


async def test_a_view_built_on_a_base_takes_a_new_base_and_its_age(parts):
    local, local_builds, clock, state = parts
    views: list[dict] = []

    async def build_view(base: dict) -> dict:
        views.append(base)
        return {**base, "view": True}

    view = Snapshots("view", build_view, watched=lambda: state["paused"], base=local, period_s=0.5, wait_s=0.0,
                     clock=clock)
    await first(local, local_builds, {"idle": False, "n": 1})
    reader = asyncio.create_task(view.read())  # the base is young, but the view takes a new one
    await settle()
    assert local_builds.started == 2
    clock.now += 0.3
    local_builds.finish({"idle": False, "n": 2})
    assert await reader == {"idle": False, "n": 2, "view": True, "snapshot_age_s": 0.3}
    assert (await local.read())["n"] == 2  # the base read after the view is as new


async def test_an_idle_answer_comes_from_a_build_begun_after_the_read(parts):
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": True, "n": 1})
    early = asyncio.create_task(snapshots.read())  # idle: a build begins
    await settle()
    clock.now += 0.1
    late = asyncio.create_task(snapshots.read())  # the reader submitted work just before this read
    await settle()
    builds.finish({"idle": True, "n": 2})  # begun before the late read: it may not have seen that work
    assert (await early)["n"] == 2
    await settle()
    assert builds.started == 3 and not late.done()
    builds.finish({"idle": False, "n": 3})
    assert (await late)["n"] == 3


async def test_a_fresh_read_whose_build_fails_serves_the_last_status(parts):
    # A node in the last moments of its stop: its frontier closed, its API still up (issue 52).
    snapshots, builds, clock, _ = parts
    await first(snapshots, builds, {"idle": False, "crawl_state": "stopping"})
    clock.now += 1
    reader = asyncio.create_task(snapshots.read(fresh=True))
    await settle()
    builds.fail(RuntimeError("the frontier service is not open"))
    assert (await reader)["crawl_state"] == "stopping"
