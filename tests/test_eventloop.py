"""The node's event loop (runtime.eventloop): uvloop's by default, asyncio's when asked for or
where uvloop cannot be imported; asking for uvloop where it cannot be had is a one-line error."""

from __future__ import annotations

import asyncio
import sys

import pytest

from crawler_node.runtime.eventloop import loop_factory


def run_with(factory) -> str:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(which())


def test_each_choice_runs_the_loop_it_names() -> None:
    for choice, expected in (("asyncio", "asyncio"), ("uvloop", "uvloop"), ("auto", "uvloop")):
        name, factory = loop_factory(choice)
        assert name == expected and run_with(factory).startswith(expected), choice


def test_without_uvloop_auto_is_asyncio_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    name, factory = loop_factory("auto")
    assert name == "asyncio" and run_with(factory).startswith("asyncio")
    with pytest.raises(ValueError, match="uvloop cannot be imported"):
        loop_factory("uvloop")
    with pytest.raises(ValueError, match="must be one of auto, asyncio, uvloop"):
        loop_factory("tokio")
