"""The node's HTTP API (aiohttp). Thin: validate, hand to the node, answer.

Bad input gets a 4xx with a machine-readable reason and the node keeps serving; a batch with a
malformed URL is refused whole (nothing enqueued) so the sender can fix it and resend. No body
decides how deep the decoder recurses or how much it allocates: JSON nested past Python's
recursion limit is a 400, msgpack is unpacked with limits sized to the largest legitimate body.
"""

from __future__ import annotations

import logging

from aiohttp import web

from crawler_node.api.control import CONTROL_PATHS, add_control_routes
from crawler_node.api.dashboard import DASHBOARD_HTML
from crawler_node.api.http import (
    MAX_BODY_BYTES,
    NODE_KEY,
    READ_TIMEOUT_KEY,
    BadRequest,
    authorised,
    decode_body,
    error,
    read_body,
)
from crawler_node.api.members import MEMBERS_ONLY, add_member_routes
from crawler_node.api.metrics import NodeMetrics
from crawler_node.api.openapi import OPENAPI_PATH, get_openapi
from crawler_node.api.status import node_status, status_snapshots
from crawler_node.api.status_cache import Snapshots
from crawler_node.cluster.wire import ADDRESSED_TO, FORWARDED_BY, MalformedBody, decode_urls
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.node.node import Node
from crawler_node.node.stage_items import InboundFull
from crawler_node.runtime.datadir import DiskFull

log = logging.getLogger("crawler_node.api")

METRICS_KEY = web.AppKey("metrics", NodeMetrics)
NODE_STATUS_KEY = web.AppKey("node_status", Snapshots)  # GET /v1/status?scope=local, /metrics
CLUSTER_STATUS_KEY = web.AppKey("cluster_status", Snapshots)  # GET /v1/status


async def post_urls(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    if node.cluster.leaving_done:
        # Drained and about to exit: anything taken now would be stranded on this disk.
        return web.json_response({"error": "leaving", "message": "this node is leaving the cluster"},
                                 status=503, headers={"Retry-After": "1"})
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return error(413, "too_large", f"body of {request.content_length} bytes exceeds {MAX_BODY_BYTES}")
    try:
        node.intake.admit()  # before the body is read and decoded: pushing back saves that work
    except InboundFull as exc:
        return _inbound_full(exc.retry_after_s)
    try:
        body = decode_urls(decode_body(await read_body(request, MAX_BODY_BYTES), request.content_type))
    except BadRequest as exc:
        return exc.response()
    except MalformedBody as exc:
        return error(400, exc.reason, exc.message)
    if body.from_member and not clustered(node):
        # Only a member hands over what it fetched or replicates; a node alone has no members.
        return _not_clustered()
    intake = node.intake
    prepared = intake.prepare_body(body)
    if body.invalid or prepared.invalid:
        invalid = sorted(body.invalid + [{"index": index, "reason": reason, "url": url[:200]}
                                         for index, url, reason in prepared.invalid],
                         key=lambda entry: entry["index"])
        total = body.well_formed + len(body.invalid)
        return error(400, "invalid_urls", f"{len(invalid)} of {total} URLs are invalid; nothing was enqueued",
                     invalid=invalid[:100])
    try:
        result = await intake.take(prepared)
    except InboundFull as exc:
        return _inbound_full(exc.retry_after_s)
    if FORWARDED_BY in request.headers:  # a peer's outbox batch: the other end of its "forwarded" count
        # (replicas, fetched or queued, are not in it: the sender counts them as sent_seen)
        node.cluster.note_received(len(body.crawl))
    rejected = prepared.out_of_scope
    intake.rejected(len(rejected))
    reasons: dict[str, int] = {}
    for _, reason in rejected:
        reasons[reason] = reasons.get(reason, 0) + 1
    return web.json_response(
        # accepted: queued here; forwarded: durably in the outboxes of the nodes that own them
        {"accepted": len(result.accepted), "forwarded": result.forwarded, "duplicate": result.duplicates,
         "rejected": len(rejected), "capped": len(result.capped), "reasons": reasons},
        status=202,
    )


def _inbound_full(retry_after_s: float) -> web.Response:
    return web.json_response({"error": "inbound_full", "message": "inbound queue is full; retry later"},
                             status=429, headers={"Retry-After": str(max(1, round(retry_after_s)))})


async def get_status(request: web.Request) -> web.Response:
    """This node's status; unless ``?scope=local``, with the cluster as this node sees it, and
    ``idle`` true only when every member is reachable and idle (api.status.cluster_status).
    Served from a snapshot (api.snapshot) whose age is ``snapshot_age_s``: a flood of writes
    to the frontier, or a slow peer, delays its next build, never the answer; ``?fresh=1``
    asks for one built after the request (read-your-writes, at a build's cost)."""
    key = NODE_STATUS_KEY if request.query.get("scope") == "local" else CLUSTER_STATUS_KEY
    return web.json_response(await request.app[key].read(fresh=request.query.get("fresh") in ("1", "true")))


async def get_ring(request: web.Request) -> web.Response:
    router = request.app[NODE_KEY].cluster.router
    host = request.query.get("host")
    if host is None:
        snapshot = router.snapshot()
        if request.query.get("points") == "1":  # every (point, owner) clockwise: the dashboard draws the arcs
            snapshot["points"] = router.ring.points()
        return web.json_response(snapshot)
    try:
        url = normalize_url(f"http://{host}/")
    except InvalidURL as exc:
        return error(400, "bad_host", f"host {host[:200]!r} is not a valid host name ({exc.reason})")
    answer = router.owner_of(host_of(url))
    return web.json_response({"host": answer["host"], "owner": answer["owner"],
                              "successors": answer["successors"], "live_owner": answer["live_owner"]})


async def post_resume(request: web.Request) -> web.Response:
    """Resume fetching through the API after a quota pause, before its reset time."""
    node = request.app[NODE_KEY]
    resumed = node.resume_api()
    return web.json_response({"resumed": resumed, "api": (await node_status(node))["api"]})


async def get_metrics(request: web.Request) -> web.Response:
    body = await request.app[METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def get_healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "node_id": request.app[NODE_KEY].node_id})


async def get_dashboard(request: web.Request) -> web.Response:
    return web.Response(text=DASHBOARD_HTML, content_type="text/html")


# Endpoints that change what the cluster crawls or who is in it: they need the cluster token
# when one is set, whatever the method (HEAD included: aiohttp adds it to every GET route).
# Reads (status, ring, metrics, health, dashboard) stay open; crawl control (api.control), its
# host and queue listings included, does not.
PROTECTED = frozenset({"/v1/urls", "/v1/resume", "/v1/members", "/v1/join", "/v1/leave"}) | CONTROL_PATHS
# MEMBERS_ONLY (api.members): endpoints only members use. A node without peers (and without
# --peer-dns) has no members, so it answers them to no one -- a join would hand a stranger an
# arc of its crawl.


def clustered(node: Node) -> bool:
    """The node was started to be a member (--peer or --peer-dns), not alone."""
    return node.config.clustered


def _not_clustered() -> web.Response:
    return error(403, "not_clustered", "this node runs alone (no --peer, no --peer-dns): it has no members "
                 "and takes no membership or transfer requests")


@web.middleware
async def require_token(request: web.Request, handler):
    # The route matched, not request.path: one resource however its path was spelt.
    resource = request.match_info.route.resource
    path = resource.canonical if resource is not None else None
    if path in PROTECTED:
        node = request.app[NODE_KEY]
        if not authorised(request, node.config.secret):
            # refused before the handler reads the body, so nothing is enqueued
            return error(401, "unauthorised", "this cluster requires its token (Authorization: Bearer ...)")
        if path in MEMBERS_ONLY and not clustered(node):
            return _not_clustered()
    return await handler(request)


@web.middleware
async def misdirected_is_421(request: web.Request, handler):
    """A peer's request meant for another member (cluster.wire.ADDRESSED_TO) is refused
    before anything is read or done: the address the peer had for that member is this node's
    now. 421 Misdirected Request, with this node's id so the sender can tell."""
    to = request.headers.get(ADDRESSED_TO)
    node_id = request.app[NODE_KEY].node_id
    if to is not None and to != node_id:
        return error(421, "misdirected", f"this is member {node_id[:64]!r}, not {to[:64]!r}: the address "
                     "the sender has for that member is another member's now", node_id=node_id)
    return await handler(request)


@web.middleware
async def disk_full_is_503(request: web.Request, handler):
    """A write the API needed (URLs into the frontier) found the disk full: the node stops, as
    it does when a stage meets it, and the client is told to come back (503), not shown a 500."""
    try:
        return await handler(request)
    except DiskFull as exc:
        request.app[NODE_KEY].fail(exc)
        return web.json_response({"error": "disk_full", "message": str(exc)}, status=503,
                                 headers={"Retry-After": "60"})


async def _close_snapshots(app: web.Application) -> None:
    await app[NODE_STATUS_KEY].close()
    await app[CLUSTER_STATUS_KEY].close()


def make_app(node: Node) -> web.Application:
    # client_max_size one byte over our limit, so our own check gives the 413 with a reason.
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1,
                          middlewares=[misdirected_is_421, disk_full_is_503, require_token])
    app[NODE_KEY] = node
    app[NODE_STATUS_KEY], app[CLUSTER_STATUS_KEY] = status_snapshots(node)
    app[METRICS_KEY] = NodeMetrics(node, status=app[NODE_STATUS_KEY].value)
    app.on_cleanup.append(_close_snapshots)
    app[READ_TIMEOUT_KEY] = node.config.api_read_timeout_s
    app.router.add_post("/v1/urls", post_urls)
    app.router.add_post("/v1/resume", post_resume)
    app.router.add_get("/v1/status", get_status)
    app.router.add_get("/v1/ring", get_ring)
    add_member_routes(app)
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_healthz)
    app.router.add_get("/", get_dashboard)
    app.router.add_get(OPENAPI_PATH, get_openapi)  # unauthenticated: it describes, it gives nothing away
    add_control_routes(app, NODE_KEY)
    return app
