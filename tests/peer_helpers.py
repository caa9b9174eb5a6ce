"""Helpers for tests that stand in for a member over HTTP: a small aiohttp server on loopback
that answers a node's calls, and a bounded wait for what its answers bring about."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from crawler_node.cluster.membership import Membership

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(routes: dict[str, Handler], host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """GET ``routes`` (path -> handler) on ``host:port`` (0: any free port); the runner, to
    clean up, and the base URL."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, f"http://{host}:{runner.addresses[0][1]}"


def answering(body: Callable[[], dict]) -> Handler:
    """A handler that answers every request with ``body()`` as JSON."""
    async def handle(request: web.Request) -> web.Response:
        return web.json_response(body())

    return handle


async def until(predicate: Callable[[], bool], what: str, *, deadline_s: float = 5.0, poll_s: float = 0.025) -> None:
    """Wait, bounded, for a condition the answers bring about."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(poll_s)


class Peer:
    """A member's `GET /v1/members` on loopback, with the rule the node's API follows (a real
    Membership's list and digest), recording what each heartbeat asked with."""

    def __init__(self, membership: Membership, answer: Callable[[Membership, dict], dict] | None = None) -> None:
        self.membership = membership
        self.asked: list[dict[str, str]] = []
        self._answer = answer or self.rule

    @staticmethod
    def rule(membership: Membership, query: dict) -> dict:
        body: dict = {"node_id": membership.self_id, "members_digest": membership.digest(), "leaving": False}
        if query.get("known") != body["members_digest"]:
            body["members"] = membership.view()
        return body

    async def handle(self, request: web.Request) -> web.Response:
        self.asked.append(dict(request.query))
        return web.json_response(self._answer(self.membership, dict(request.query)))
