"""Which event loop runs the node: asyncio's own, or uvloop's (libuv, in C).

The event loop is the node's busiest thread: it runs every HTTP request and response of the
crawl, the peer traffic and the API, and in bench/throughput.py it is the one process at
100% while the parser and store wait for it. uvloop does the loop's own work (polling,
callbacks, transports) in C; aiohttp's protocol code is the same on either. "auto" takes uvloop
where it can be imported (a dependency, except on Windows), asyncio elsewhere. Measured in
bench/throughput.py's paired rounds: 3% less CPU per page (7 of 8 rounds), pages/s x1.01.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def loop_factory(choice: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loop `choice` names, as (its name, a factory for asyncio.Runner). "uvloop" where
    uvloop cannot be imported is an error, said in one line; "auto" then takes asyncio's."""
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop must be one of {', '.join(EVENT_LOOPS)}, got {choice!r}")
    if choice == "asyncio":
        return "asyncio", asyncio.new_event_loop
    try:
        import uvloop
    except ImportError as exc:
        if choice == "auto":
            return "asyncio", asyncio.new_event_loop
        raise ValueError(f"--event-loop uvloop, but uvloop cannot be imported: {exc}") from exc
    return "uvloop", uvloop.new_event_loop
