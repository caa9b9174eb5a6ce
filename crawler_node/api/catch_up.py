"""Members that missed a pause, a resume or a dropped host catch up: a command reaches the
members that are not down when it is given (api.control), so one that was down, or restarting,
learns it here; and a host dropped on the member that crawls it becomes dropped on all.

Each node keeps its last pause or resume (node.operator.ControlChange) and the hosts dropped.
Whenever it sees a member alive that it has not compared with since that member was last down,
since this node started, or since its own control state changed, it sends both to
``POST /v1/control/sync`` there and gets the member's back: each side applies the other's change
if it is newer, and adds the other's dropped hosts to its own. A member back from the dead thus
hears from every live member within a round or two, and a member that missed nothing changes
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from crawler_node.cluster.membership import PeerState
from crawler_node.node.node import Node
from crawler_node.node.operator import MAX_DROPPED_HOSTS, ControlChange

log = logging.getLogger("crawler_node.api")

SYNC = "/v1/control/sync"
ROUND_S = 0.5  # how often the members are looked at: as often as heartbeats come
MAX_HOST_CHARS = 253
MAX_SYNC_BYTES = 1_000_000  # a sync body: the dropped hosts, at most MAX_DROPPED_HOSTS names

# api.control.PeerCalls.call: (HTTP status, decoded answer), or (None, why) when none came
PeerCall = Callable[..., Awaitable[tuple[int | None, Any]]]


def _state_of(raw: object) -> tuple[ControlChange | None, list[str]]:
    """The change and dropped hosts in a sync body or answer; ValueError if malformed."""
    if not isinstance(raw, dict):
        raise ValueError('a sync body is {"change": {...} | null, "dropped": [host, ...], "from": id}')
    change = raw.get("change")
    dropped = raw.get("dropped", [])
    if not isinstance(dropped, list) or len(dropped) > MAX_DROPPED_HOSTS or not all(
            isinstance(host, str) and 0 < len(host) <= MAX_HOST_CHARS for host in dropped):
        raise ValueError(f"dropped is a list of at most {MAX_DROPPED_HOSTS} host names")
    return (None if change is None else ControlChange.from_json(change)), dropped


def _state(node: Node) -> dict[str, Any]:
    mine = node.operator.last_change
    return {"change": mine.to_json() if mine else None, "dropped": sorted(node.hosts.dropped)}


async def answer_sync(node: Node, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, answer) for a member's sync body (read and bounded by api.control)."""
    try:
        theirs, dropped = _state_of(body)
    except ValueError as exc:
        return 400, {"error": "bad_request", "message": str(exc)[:200]}
    source = str(body.get("from") if isinstance(body.get("from"), str) else "a member")[:64]
    applied = theirs is not None and await node.operator.catch_up(theirs, source=source)
    await node.operator.drop_hosts(dropped, source=source)
    return 200, {**_state(node), "applied": applied}


class CatchUp:
    """The comparing rounds of one node, run while its API serves."""

    def __init__(self, node: Node, call: PeerCall) -> None:
        self._node = node
        self._call = call
        self._compared: set[str] = set()  # members compared with since they were last down
        self._version = node.operator.version  # this node's control state when they were

    async def run(self) -> None:
        while True:
            try:
                await self.round()
            except Exception:  # a round that fails is logged and tried again: it must not end the loop
                log.exception("comparing crawl control with the members failed")
            await asyncio.sleep(ROUND_S)

    async def round(self) -> None:
        node = self._node
        if node.operator.version != self._version:
            self._version = node.operator.version
            self._compared.clear()  # changed here: every member hears of it
        due = []
        for member in node.cluster.membership.peers():
            if member.state is PeerState.DOWN or member.left:
                self._compared.discard(member.node_id)
            elif member.state is PeerState.ALIVE and member.node_id not in self._compared:
                due.append(member)
        for member in due:
            status, answer = await self._call(member, "POST", SYNC, body={**_state(node), "from": node.node_id})
            if status != 200:
                continue  # not answered (or an older member without the route): next round
            try:
                theirs, dropped = _state_of(answer)
            except ValueError as exc:
                log.warning("%s answered crawl-control sync with junk: %s", member.node_id, exc)
                continue
            if theirs is not None:
                await node.operator.catch_up(theirs, source=member.node_id)
            await node.operator.drop_hosts(dropped, source=member.node_id)
            self._compared.add(member.node_id)


def catch_up_ctx(node_key: web.AppKey[Node], call: PeerCall) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(CatchUp(app[node_key], call).run(), name="control-catch-up")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx
