"""Crawl control over the HTTP API: pause, resume and stop the whole cluster, list its hosts,
look at one host's queue and drop it.

Any node takes a command and applies it to the cluster: to itself, then to every member that
is not down, over the members' own API with the cluster token. A command a member forwards is
marked ``?local=1`` and applied where it arrives only, so it is never forwarded again (an
operator may send ``?local=1`` too, to act on one node). A host's queue lives on the member
that crawls the host (the ring's live owner), so queue requests go there. Every endpoint here
needs the cluster token where one is set (api.app.PROTECTED), the listings too: they show what
the crawl will fetch next.

Answers name each member and what it said; ``complete`` is false when a member that is not
down did not apply the command (the CLI then exits non-zero). A member that is down when the
command is given is not reached: it is listed as down, and catches up on pause and resume when
it is back (api.catch_up).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from crawler_node.api.catch_up import MAX_SYNC_BYTES, SYNC, answer_sync, catch_up_ctx
from crawler_node.cluster.membership import Member, PeerState
from crawler_node.cluster.peer_client import PeerClient, PeerUnreachable
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.node.node import Node

log = logging.getLogger("crawler_node.api")

PAUSE, RESUME, STOP = "/v1/control/pause", "/v1/control/resume", "/v1/control/stop"
HOSTS, HOST_QUEUE = "/v1/hosts", "/v1/hosts/{host}/queue"
CONTROL_PATHS = frozenset({PAUSE, RESUME, STOP, HOSTS, HOST_QUEUE, SYNC})
SORT_KEYS = ("queued", "inflight", "next_eligible", "host", "health")
# Without ?order=: the biggest queues and the most in flight first; the soonest eligible first.
DEFAULT_ORDER = {"queued": "desc", "inflight": "desc", "next_eligible": "asc", "host": "asc", "health": "asc"}
MAX_HOSTS_LIMIT = 1000
MAX_HOSTS_OFFSET = 10_000  # each member sends offset + limit rows to be merged
MAX_QUEUE_LIMIT = 10_000
MAX_REASON_CHARS = 200
MAX_COMMAND_BYTES = 4096


class BadQuery(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _error(status: int, reason: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": reason, "message": message, **extra}, status=status)


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name} must be an integer, got {raw[:50]!r}") from None
    if not low <= value <= high:
        raise BadQuery(f"{name} must be between {low} and {high}, got {value}")
    return value


def _choice(request: web.Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.query.get(name, default)
    if value not in choices:
        raise BadQuery(f"{name} must be one of {', '.join(choices)}, got {value[:50]!r}")
    return value


def _local(request: web.Request) -> bool:
    return request.query.get("local") in ("1", "true")


def _host(request: web.Request) -> str:
    raw = request.match_info["host"]
    try:
        return host_of(normalize_url(f"http://{raw}/"))
    except InvalidURL as exc:
        raise BadQuery(f"host {raw[:200]!r} is not a valid host name ({exc.reason})") from exc


class PeerCalls:
    """This node's calls to the other members' control endpoints (through the cluster's one
    peer client: its session, the cluster token, its timeout for control calls)."""

    def __init__(self, client: PeerClient) -> None:
        self._client = client

    async def call(self, member: Member, method: str, path: str, *, params: dict[str, str] | None = None,
                   body: dict[str, Any] | None = None) -> tuple[int | None, Any]:
        """(HTTP status, decoded body) of one member's answer; (None, why) when it gave none."""
        try:
            reply = await self._client.control(member.url, method, path, to=member.node_id, params=params or {},
                                               body=body)
        except PeerUnreachable as exc:
            return None, f"unreachable: {exc.kind} {exc.detail}".strip()
        try:
            answer = reply.json()
        except ValueError:
            answer = {"error": "bad_answer", "message": f"HTTP {reply.status}, not JSON"}
        return reply.status, answer

    async def each(self, members: list[Member], method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Every member's answer, asked concurrently: ``{"status": ..., "answer": ...}`` each."""
        answers = await asyncio.gather(*(self.call(member, method, path, **kwargs) for member in members))
        return {member.node_id: {"status": status, "answer": answer}
                for member, (status, answer) in zip(members, answers, strict=True)}


PEERS_KEY = web.AppKey("control_peers", PeerCalls)


def _reached_members(node: Node) -> tuple[list[Member], list[str]]:
    """The members a cluster-wide command goes to (not this node), and those it skips (down)."""
    reached: list[Member] = []
    down: list[Member] = []
    for member in node.cluster.membership.peers():
        if member.left:
            continue  # handed its queue on and gone: nothing to command
        (down if member.state is PeerState.DOWN else reached).append(member)
    return reached, [member.node_id for member in down]


class SlowBody(Exception):
    """The body did not arrive within the API's read timeout."""


async def _command_body(request: web.Request, limit: int = MAX_COMMAND_BYTES) -> dict[str, Any]:
    if request.content_length and request.content_length > limit:
        raise BadQuery(f"body over {limit} bytes")
    # Read to the end (one read() gives what has arrived so far: a body in two TCP segments was
    # cut in two), within the read timeout (a client dripping it would hold this handler).
    raw = bytearray()
    try:
        async with asyncio.timeout(request.app[NODE].config.api_read_timeout_s):
            while len(raw) <= limit and (chunk := await request.content.read(limit + 1)):
                raw += chunk
    except TimeoutError as exc:
        raise SlowBody() from exc
    except web.RequestPayloadError as exc:  # gzip that is not gzip, a coding aiohttp lacks ("br")
        raise BadQuery(f"body could not be read: {str(exc).strip()[:200]}") from exc
    if len(raw) > limit:
        raise BadQuery(f"body over {limit} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(bytes(raw))
    except (ValueError, RecursionError) as exc:
        raise BadQuery(f"body is not valid JSON: {type(exc).__name__}") from exc
    if not isinstance(body, dict):
        raise BadQuery('body must be an object {"reason": "..."}')
    for key in ("reason", "by"):
        if key in body and (not isinstance(body[key], str) or len(body[key]) > MAX_REASON_CHARS):
            raise BadQuery(f"{key} must be a string of at most {MAX_REASON_CHARS} characters")
    return body


def _summarise(action: str, own: dict[str, Any], peers: dict[str, Any], down: list[str],
               node_id: str) -> dict[str, Any]:
    members: dict[str, Any] = {node_id: {"ok": True, **own}}
    for peer, reply in peers.items():
        ok = reply["status"] == 200
        members[peer] = {"ok": ok, **(reply["answer"] if ok and isinstance(reply["answer"], dict)
                                      else {"error": reply["answer"], "status": reply["status"]})}
    for peer in down:
        members[peer] = {"ok": False, "skipped": "down"}
    return {"action": action, "members": members, "complete": all(m["ok"] for m in members.values())}


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _command(action: str, apply: Callable[[Node, dict[str, Any]], Awaitable[dict[str, Any]]], *,
             others_first: bool = False) -> Handler:
    """A cluster-wide command: ``apply(node, body)`` here and on every member not down."""

    async def handler(request: web.Request) -> web.Response:
        node: Node = request.app[NODE]
        try:
            body = await _command_body(request)
        except BadQuery as exc:
            return _error(400, "bad_request", exc.message)
        except SlowBody:
            return _error(408, "too_slow", "the body did not arrive within the read timeout")
        body.setdefault("by", f"{node.node_id} (POST {request.path})")
        if _local(request):
            return web.json_response({"node_id": node.node_id, **await apply(node, body)})
        reached, down = _reached_members(node)
        if others_first:
            # Stop: this node last, so its own stop cannot cut the forwarding short.
            peers = await request.app[PEERS_KEY].each(reached, "POST", request.path, body=body)
            own = await apply(node, body)
        else:
            own = await apply(node, body)
            peers = await request.app[PEERS_KEY].each(reached, "POST", request.path, body=body)
        answer = _summarise(action, own, peers, down, node.node_id)
        if not answer["complete"]:
            log.warning("%s did not reach every member: %s", action,
                        {peer: m for peer, m in answer["members"].items() if not m["ok"]})
        return web.json_response(answer)

    return handler


async def _pause(node: Node, body: dict[str, Any]) -> dict[str, Any]:
    changed = await node.operator.pause(reason=body.get("reason") or "operator", by=body["by"])
    return {"paused": True, "changed": changed}


async def _resume(node: Node, body: dict[str, Any]) -> dict[str, Any]:
    return {"paused": False, "changed": await node.operator.resume_crawl(by=body["by"])}


async def _stop(node: Node, body: dict[str, Any]) -> dict[str, Any]:
    log.warning("stop requested by %s: stopping as on SIGTERM", body["by"])
    node.request_stop()  # what SIGTERM does: daemon.serve then stops the node in order and exits 0
    return {"stopping": True}


async def _sync(request: web.Request) -> web.Response:
    """A member compares its last pause or resume with this node's (api.catch_up)."""
    try:
        body = await _command_body(request, MAX_SYNC_BYTES)
    except BadQuery as exc:
        return _error(400, "bad_request", exc.message)
    except SlowBody:
        return _error(408, "too_slow", "the body did not arrive within the read timeout")
    status, answer = await answer_sync(request.app[NODE], body)
    return web.json_response(answer, status=status)


# ----------------------------------------------------------------- hosts


async def local_hosts(node: Node) -> list[dict[str, Any]]:
    """Every host with unfinished rows in this node's frontier, with the host table's view of it."""
    now = time.time()
    rows = []
    for counts in await node.frontier.host_counts():
        state = node.hosts.get(counts.host)
        next_eligible = counts.next_eligible
        row: dict[str, Any] = {"host": counts.host, "member": node.node_id, "queued": counts.queued,
                               "leased": counts.leased, "deferred": counts.deferred}
        if state is None:  # not in the host table (yet): the upkeep's resync brings it in
            row.update(in_flight=0, buffered=0, limit=None, state="not_loaded", backoff_level=0, crawl_delay_s=0.0,
                       held=None, health="healthy", health_score=100, health_reasons=[])
        else:
            next_eligible = max(next_eligible, state.next_eligible, state.paused_until)
            row.update(in_flight=state.limiter.in_flight, buffered=len(state.buffer), limit=state.limiter.limit,
                       state=state.place.value, backoff_level=state.backoff.level, crawl_delay_s=state.crawl_delay,
                       held=state.held_reason())
            health = state.health(now)
            row.update(health=health.state.value, health_score=health.score, health_reasons=list(health.reasons))
        row["next_eligible"] = next_eligible
        row["next_eligible_in_s"] = round(max(0.0, next_eligible - now), 3)
        # changes per second pooled over its recrawls here (core.adaptive_recrawl); None: none yet
        row["change_rate"] = node.recrawler.host_rate(counts.host) if node.recrawler is not None else None
        rows.append(row)
    return rows


def _sort_key(sort: str) -> Callable[[dict[str, Any]], Any]:
    field = {"queued": "queued", "inflight": "in_flight", "next_eligible": "next_eligible",
             "health": "health_score"}.get(sort)
    if field is None:
        return lambda row: (row["host"], row["member"])
    return lambda row: (row[field], row["host"], row["member"])


def page_of(rows: list[dict[str, Any]], *, sort: str, order: str, offset: int, limit: int) -> list[dict[str, Any]]:
    """Rows ``offset`` to ``offset + limit`` in the order asked (ties by host, then member)."""
    pick = heapq.nlargest if order == "desc" else heapq.nsmallest
    return pick(offset + limit, rows, key=_sort_key(sort))[offset:]


async def get_hosts(request: web.Request) -> web.Response:
    node: Node = request.app[NODE]
    try:
        sort = _choice(request, "sort", SORT_KEYS, "queued")
        order = _choice(request, "order", ("asc", "desc"), DEFAULT_ORDER[sort])
        limit = _int_param(request, "limit", 50, 1, MAX_HOSTS_LIMIT)
        offset = _int_param(request, "offset", 0, 0, MAX_HOSTS_OFFSET)
    except BadQuery as exc:
        return _error(400, "bad_query", exc.message)
    unhealthy = request.query.get("unhealthy", "") in ("1", "true")
    rows = [row for row in await local_hosts(node) if not unhealthy or row["health"] != "healthy"]
    total = len(rows)
    # The hosts past --active-hosts wait on disk, not listed: their URLs are counted.
    parked = int((await node.frontier.totals()).get("parked_queued", 0))
    members: dict[str, Any] = {node.node_id: "ok"}
    if not _local(request):
        reached, down = _reached_members(node)
        params = {"sort": sort, "order": order, "limit": str(offset + limit), "offset": "0",
                  **({"unhealthy": "1"} if unhealthy else {})}
        for peer, reply in (await request.app[PEERS_KEY].each(reached, "GET", HOSTS, params=params)).items():
            answer = reply["answer"]
            if reply["status"] == 200 and isinstance(answer, dict) and isinstance(answer.get("hosts"), list):
                rows += answer["hosts"]
                total += int(answer.get("total", 0))
                parked += int(answer.get("parked_urls", 0))
                members[peer] = "ok"
            else:
                members[peer] = answer if isinstance(answer, str) else f"HTTP {reply['status']}"
        members.update(dict.fromkeys(down, "down"))
    return web.json_response({"hosts": page_of(rows, sort=sort, order=order, offset=offset, limit=limit),
                              "total": total, "parked_urls": parked, "sort": sort, "order": order, "offset": offset,
                              "limit": limit,
                              "members": members, "complete": all(v == "ok" for v in members.values())})


# ----------------------------------------------------------------- one host's queue


async def _at_owner(request: web.Request, host: str, method: str) -> web.Response | None:
    """The owner's answer when another member crawls ``host``; None when this node does."""
    node: Node = request.app[NODE]
    owner = None if _local(request) else node.cluster.route(host)
    member = node.cluster.membership.get(owner) if owner is not None else None
    if member is None:
        return None
    status, answer = await request.app[PEERS_KEY].call(member, method, request.path, params=dict(request.query))
    if status is None:
        return _error(502, "owner_unreachable", f"{owner}, which crawls {host}, did not answer: {answer}",
                      owner=owner)
    return web.json_response(answer, status=status)


async def get_host_queue(request: web.Request) -> web.Response:
    node: Node = request.app[NODE]
    try:
        host = _host(request)
        limit = _int_param(request, "limit", 100, 1, MAX_QUEUE_LIMIT)
    except BadQuery as exc:
        return _error(400, "bad_query", exc.message)
    if (forwarded := await _at_owner(request, host, "GET")) is not None:
        return forwarded
    counts, urls = await node.frontier.host_queue(host, limit)
    return web.json_response({
        "host": host, "member": node.node_id,
        "queued": counts.queued if counts else 0, "leased": counts.leased if counts else 0,
        "deferred": counts.deferred if counts else 0,
        "urls": [{"url": u.url, "depth": u.depth, "priority": u.priority, "attempts": u.attempts,
                  "not_before": u.not_before, "state": u.state, "via": u.via,
                  "change_rate": u.change_rate, "checks": u.checks, "changes": u.changes} for u in urls],
    })


async def delete_host_queue(request: web.Request) -> web.Response:
    node: Node = request.app[NODE]
    try:
        host = _host(request)
    except BadQuery as exc:
        return _error(400, "bad_query", exc.message)
    if (forwarded := await _at_owner(request, host, "DELETE")) is not None:
        return forwarded
    try:
        dropped = await node.operator.drop_host(host)
    except ValueError as exc:
        return _error(409, "too_many_dropped", str(exc))
    return web.json_response({"host": host, "member": node.node_id, "dropped": dropped})


NODE = web.AppKey("control_node", Node)


def add_control_routes(app: web.Application, node_key: web.AppKey[Node]) -> None:
    app[NODE] = app[node_key]
    peers = app[PEERS_KEY] = PeerCalls(app[node_key].cluster.client)
    app.router.add_post(PAUSE, _command("pause", _pause))
    app.router.add_post(RESUME, _command("resume", _resume))
    app.router.add_post(STOP, _command("stop", _stop, others_first=True))
    app.router.add_get(HOSTS, get_hosts)
    app.router.add_get(HOST_QUEUE, get_host_queue)
    app.router.add_delete(HOST_QUEUE, delete_host_queue)
    app.router.add_post(SYNC, _sync)
    app.cleanup_ctx.append(catch_up_ctx(NODE, peers.call))
