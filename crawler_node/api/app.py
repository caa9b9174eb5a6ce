"""The node's HTTP API (aiohttp). Thin: validate, hand to the node, answer.

Bad input gets a 4xx with a machine-readable reason and the node keeps serving; a batch with a
malformed URL is refused whole (nothing enqueued) so the sender can fix it and resend. No body
decides how deep the decoder recurses or how much it allocates: JSON nested past Python's
recursion limit is a 400, msgpack is unpacked with limits sized to the largest legitimate body.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from crawler_node.api.control import CONTROL_PATHS, add_control_routes
from crawler_node.api.dashboard import DASHBOARD_HTML
from crawler_node.api.http import (
    MAX_BODY_BYTES,
    MAX_URLS_PER_REQUEST,
    MAX_VIA_LENGTH,
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
from crawler_node.api.snapshot import Snapshots
from crawler_node.api.status import node_status, status_snapshots
from crawler_node.cluster.membership import ADDRESSED_TO
from crawler_node.cluster.outbox import FORWARDED_BY, peer_politeness, peer_refresh
from crawler_node.core.urls import MAX_URL_LENGTH, InvalidURL, host_of, normalize_url
from crawler_node.frontier import AddResult
from crawler_node.node.intake import Intake, Prepared
from crawler_node.node.node import Node
from crawler_node.node.pipeline import InboundFull
from crawler_node.runtime.datadir import DiskFull

log = logging.getLogger("crawler_node.api")

METRICS_KEY = web.AppKey("metrics", NodeMetrics)
NODE_STATUS_KEY = web.AppKey("node_status", Snapshots)  # GET /v1/status?scope=local, /metrics
CLUSTER_STATUS_KEY = web.AppKey("cluster_status", Snapshots)  # GET /v1/status


def validate_urls(document: Any, *,
                  may_be_empty: bool = False) -> tuple[list[tuple[int, dict[str, Any]]], list[dict[str, Any]]]:
    """Check the shape of ``{"urls": [...]}`` and of every item in it: the well-formed items
    with their index, and what is wrong with the others. Raises BadRequest for the body.
    ``may_be_empty``: the body says more than its URLs (a peer's batch that ends a refresh)."""
    if not isinstance(document, dict) or "urls" not in document:
        raise BadRequest("bad_shape", 'body must be an object {"urls": [...]}')
    urls = document["urls"]
    if not isinstance(urls, list):
        raise BadRequest("bad_shape", '"urls" must be a list')
    if not urls and not may_be_empty:
        raise BadRequest("empty", '"urls" must not be empty')
    if len(urls) > MAX_URLS_PER_REQUEST:
        raise BadRequest("too_many", f"at most {MAX_URLS_PER_REQUEST} URLs per request")
    items: list[tuple[int, dict[str, Any]]] = []
    invalid: list[dict[str, Any]] = []
    for index, item in enumerate(urls):
        if isinstance(item, str):
            item = {"url": item}
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            invalid.append({"index": index, "reason": "bad_shape"})
        elif not _fields_ok(item):
            invalid.append({"index": index, "reason": "bad_field"})
        elif len(item["url"]) > MAX_URL_LENGTH:
            invalid.append({"index": index, "reason": "too_long", "length": len(item["url"])})
        else:
            items.append((index, item))
    return items, invalid


_COUNTS = ("depth", "hops", "redirects")


def _fields_ok(item: dict[str, Any]) -> bool:
    # "redirects" and "via" are optional, as every field but "url": a peer of an earlier
    # version omits them. Written out rather than through a helper per field: a peer's batch
    # runs this for each of its rows (a closure per call cost a third of the check).
    for key in _COUNTS:
        value = item.get(key, 0)
        if not (type(value) is int and 0 <= value < 10**6):  # type(): a bool is not a count
            return False
    priority = item.get("priority", 0)
    if not (type(priority) is int and -(10**6) < priority < 10**6):
        return False
    via = item.get("via")
    return (via is None or (type(via) is str and len(via) <= MAX_VIA_LENGTH)) \
        and type(item.get("seen", False)) is bool and type(item.get("replica", False)) is bool


def _by_kind(items: list[tuple[int, dict[str, Any]]]) -> tuple[list[tuple[int, dict[str, Any]]], ...]:
    """The items to crawl, those fetched elsewhere ("seen"), and the replicas of URLs queued
    elsewhere ("replica" and not "seen"), in one pass: a peer's batch has hundreds."""
    fresh: list[tuple[int, dict[str, Any]]] = []
    seen: list[tuple[int, dict[str, Any]]] = []
    replica: list[tuple[int, dict[str, Any]]] = []
    for entry in items:
        item = entry[1]
        (seen if item.get("seen") else replica if item.get("replica") else fresh).append(entry)
    return fresh, seen, replica


def _prepare(intake: Intake, items: list[tuple[int, dict[str, Any]]]) -> tuple[Prepared, list[dict[str, Any]]]:
    """Normalise and scope-check the items (once, in the intake); the malformed ones by index."""
    prepared = intake.prepare([item for _, item in items])
    invalid = [{"index": items[position][0], "reason": reason, "url": url[:200]}
               for position, url, reason in prepared.invalid]
    return prepared, invalid


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
        document = decode_body(await read_body(request, MAX_BODY_BYTES), request.content_type)
        try:
            refreshes = peer_refresh(document)
        except ValueError as exc:
            return error(400, "bad_refresh", str(exc))
        politeness = peer_politeness(document)
        # A peer's batch may say only the end of a refresh, or politeness (cluster.outbox).
        items, invalid = validate_urls(document, may_be_empty=bool(refreshes or politeness))
    except BadRequest as exc:
        return exc.response()
    except ValueError as exc:
        return error(400, "bad_hosts", str(exc))
    fresh_items, seen_items, replica_items = _by_kind(items)
    if (politeness or refreshes or seen_items or replica_items) and not clustered(node):
        # Only a member hands over what it fetched or replicates; a node alone has no members.
        return _not_clustered()
    intake = node.intake
    fresh, fresh_invalid = _prepare(intake, fresh_items)
    seen, seen_invalid = _prepare(intake, seen_items)
    replica, replica_invalid = _prepare(intake, replica_items)
    invalid = sorted(invalid + fresh_invalid + seen_invalid + replica_invalid, key=lambda entry: entry["index"])
    if invalid:
        total = len(items) + len(invalid) - len(fresh_invalid) - len(seen_invalid) - len(replica_invalid)
        return error(400, "invalid_urls", f"{len(invalid)} of {total} URLs are invalid; nothing was enqueued",
                     invalid=invalid[:100])
    try:
        if replica.entries or politeness or refreshes:  # a peer's replica of its queue (frontier.replica)
            await intake.take(replica.entries, replica=True, politeness=politeness, refreshes=refreshes)
        # (a peer's batch of replicas has no URL to crawl: no empty call on the frontier's thread)
        result = await intake.take(fresh.entries) if fresh.entries else AddResult(accepted=[], duplicates=0)
        if seen.entries:
            # URLs another member already fetched (handback, join): recorded, never fetched.
            seen_result = await intake.take(seen.entries, seen=True)
            result.duplicates += seen_result.duplicates
    except InboundFull as exc:
        return _inbound_full(exc.retry_after_s)
    if FORWARDED_BY in request.headers:  # a peer's outbox batch: the other end of its "forwarded" count
        # (replicas, fetched or queued, are not in it: the sender counts them as sent_seen)
        node.cluster.note_received(len(fresh_items))
    rejected = fresh.out_of_scope + seen.out_of_scope + replica.out_of_scope
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
    return bool(node.settings.peers or node.settings.peer_dns)


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
        if not authorised(request, node.settings.secret):
            # refused before the handler reads the body, so nothing is enqueued
            return error(401, "unauthorised", "this cluster requires its token (Authorization: Bearer ...)")
        if path in MEMBERS_ONLY and not clustered(node):
            return _not_clustered()
    return await handler(request)


@web.middleware
async def misdirected_is_421(request: web.Request, handler):
    """A peer's request meant for another member (cluster.membership.ADDRESSED_TO) is refused
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
    app[READ_TIMEOUT_KEY] = node.settings.api_read_timeout_s
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
