"""The membership endpoints: a heartbeat's answer (``GET /v1/members``), a join and a leave.
Only members call them (api.app: MEMBERS_ONLY), with the cluster token."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from crawler_node.api.http import NODE_KEY, BadRequest, decode_body, error, read_body
from crawler_node.api.status import node_activity
from crawler_node.cluster.membership import member_problem

MAX_MEMBER_BODY_BYTES = 4096  # {"id": ..., "url": ...}
MEMBERS_ONLY = frozenset({"/v1/members", "/v1/join", "/v1/leave"})


async def get_members(request: web.Request) -> web.Response:
    """A heartbeat's answer. ``?from=ID``: the asking member, whose acknowledgement is the only
    one of ``ips.seen`` it reads; ``?known=DIGEST``: the digest of this node's member list it
    holds, and if that is still the list, the answer leaves it out (cluster.heartbeats). So an
    answer to a member costs the same in a cluster of any size, not one entry per member.
    ``handback_owed``, with ``from``: whether this node may still owe that member hosts it held
    for it (cluster.readiness rule 3)."""
    node = request.app[NODE_KEY]
    node.cluster.note_asked(request.query.get("from"))
    membership = node.cluster.membership
    digest = membership.digest()
    body = {"node_id": node.node_id, "members_digest": digest,
            "leaving": node.cluster.leaving, "drained": node.cluster.drained,
            "ips": node.cluster.ip_announcement(for_peer=request.query.get("from")),
            # names this node's frontier: a new one after a lost data directory
            "incarnation": node.frontier.incarnation,
            # idle or not, pages fetched, paused: an idle member reads statuses only on a change
            "activity": node_activity(node).as_json()}
    asking = request.query.get("from")
    if asking:  # a starting member waits until nobody owes it a handback (cluster.readiness)
        body["handback_owed"] = node.cluster.owes_handback(asking)
    if request.query.get("known") != digest:
        body["members"] = membership.view()
    return web.json_response(body)


async def _member_body(request: web.Request) -> tuple[str, str]:
    node_id, url, _ = await _member_body_and_fields(request)
    return node_id, url


async def _member_body_and_fields(request: web.Request) -> tuple[str, str, dict[str, Any]]:
    body = decode_body(await read_body(request, MAX_MEMBER_BODY_BYTES), "application/json")
    node_id, url = (body.get("id"), body.get("url", "")) if isinstance(body, dict) else (None, None)
    problem = member_problem(node_id, url)
    if problem is not None:
        raise BadRequest("bad_member", f'body must be {{"id": NODE_ID, "url": "http://HOST:PORT"}}: {problem}')
    assert isinstance(body, dict)
    return str(node_id), str(url), body


async def post_join(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    try:
        node_id, url = await _member_body(request)
    except BadRequest as exc:
        return exc.response()
    if node_id == node.node_id:
        return error(409, "same_id", f"{node_id} is this node's own id")
    return web.json_response({"node_id": node.node_id, "members": node.cluster.accept_join(node_id, url)})


async def post_leave(request: web.Request) -> web.Response:
    """A member leaves; with ``"drained": true``, it has handed all its work on. Without it
    (an older node, or one announcing the start of its drain) it is counted as down with work."""
    node = request.app[NODE_KEY]
    try:
        node_id, _, body = await _member_body_and_fields(request)
    except BadRequest as exc:
        return exc.response()
    drained = body.get("drained", False)
    if not isinstance(drained, bool):
        return error(400, "bad_member", f"drained must be true or false, got {type(drained).__name__}")
    node.cluster.accept_leave(node_id, drained=drained)
    return web.json_response({"ok": True})


def add_member_routes(app: web.Application) -> None:
    app.router.add_get("/v1/members", get_members)
    app.router.add_post("/v1/join", post_join)
    app.router.add_post("/v1/leave", post_leave)
