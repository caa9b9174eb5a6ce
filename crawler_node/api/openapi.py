"""The OpenAPI 3.1 description of the node's HTTP API, served at ``GET /v1/openapi.json``.

Plain data, built once from the limits the handlers enforce (so a limit changed there changes
here), and what schemathesis fuzzes a live node with in the tests (tests/test_api_fuzz.py). It
describes what a node can answer, not what a well-behaved client meets: every operation lists
the 503 a node past its connection bound gives (api.listener) and the 421 a member's request meant
for another member gets (api.app.misdirected_is_421), every route that reads a body
its 408 (body too slow), and /v1/urls, /v1/join and /v1/leave their 413 and 415 (a crawl-control body
over its limit is a 400, as api.control answers it). aiohttp answers ``HEAD`` on every ``GET``
route; those operations are listed too, because the token check covers them as well.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from aiohttp import web

from crawler_node.api import catch_up, control
from crawler_node.api.http import BODY_CODINGS, MAX_BODY_BYTES
from crawler_node.api.members import MAX_MEMBER_BODY_BYTES
from crawler_node.cluster.membership import MAX_ID_CHARS, MAX_URL_CHARS
from crawler_node.cluster.wire import MAX_URLS_PER_REQUEST, MAX_VIA_LENGTH
from crawler_node.core.urls import MAX_URL_LENGTH

OPENAPI_PATH = "/v1/openapi.json"
_SMALL = 10**6  # depth, hops, redirects and priority stay below this (api.app._fields_ok)

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema) -> dict[str, Schema]:
    return {"application/json": {"schema": schema}}


def _object(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


def _answer(description: str, schema: Schema | None = None, **extra: Any) -> Schema:
    answer: Schema = {"description": description, **extra}
    if schema is not None:
        answer["content"] = _json(schema)
    return answer


def _error(description: str) -> Schema:
    return _answer(description, _ref("Error"))


def _query(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_INT = {"type": "integer"}
_COUNT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_NUMBER = {"type": "number"}
_ANY_OBJECT = {"type": "object"}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before trying again",
                                "schema": {"type": "string", "pattern": "^[0-9]+$"}}}
_LOCAL = _query("local", {"type": "string", "enum": ["1", "true"]},
                "this node only (also what a member that forwards the command sends)")
_HOST_PATH = {"name": "host", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1},
              "description": "a host name, lower-cased and IDNA-encoded by the node (a port may follow)"}

# What every operation may answer besides its own: the connection bound (api.listener) and
# a request aiohttp cannot parse.
_ALWAYS = {
    "400": _answer("the request is malformed (a JSON error from the node, or aiohttp's plain text)",
                   content={**_json(_ref("Error")), "text/plain": {"schema": _STR}}),
    "421": _error("misdirected: the request's X-Crawler-To names another member (a member's request reached "
                  "an address that is no longer that member's); nothing was read or done"),
    "503": _answer("too many connections to this node: it closes this one at once", headers=_RETRY_AFTER,
                   content={"text/plain": {"schema": _STR}}),
}
_PROTECTED = {"401": _error("the cluster token is missing or wrong (only where the node has one: --secret)")}
_MEMBERS_ONLY = {"403": _error("not_clustered: this node runs alone (no --peer, no --peer-dns)")}
_BODY_READ = {"408": _error("too_slow: the body did not arrive within --api-read-timeout-s"),
              "413": _error("too_large: the body is over the route's limit (as decoded, for a gzip body)"),
              "415": _answer(f"unsupported_encoding: a Content-Encoding other than {' or '.join(BODY_CODINGS)}",
                             _ref("Error"), headers={"Accept-Encoding": {
                                 "description": "the content codings a body may come in",
                                 "schema": {"type": "string"}}})}
_SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}, {"clusterToken": []}]


def _url_item() -> Schema:

    small = {"type": "integer", "minimum": 0, "maximum": _SMALL - 1}
    # The pattern is the plain form (the node also takes IDNs, user info, IPv6 and odd paths, and
    # refuses what does not parse): a generator that follows it makes URLs the node takes.
    url = {"type": "string", "maxLength": MAX_URL_LENGTH, "description": "an http(s) URL",
           "pattern": r"^https?://[a-z0-9]+([.-][a-z0-9]+)*(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~%/-]*)?$"}
    return {"oneOf": [
        url,
        _object({"url": url}, {
            "depth": small, "hops": small, "redirects": small,
            "priority": {"type": "integer", "minimum": -(_SMALL - 1), "maximum": _SMALL - 1},
            "seen": {**_BOOL, "description": "fetched by another member: recorded, never fetched (members only)"},
            "via": {"type": ["string", "null"], "maxLength": MAX_VIA_LENGTH},
        }),
    ]}


def _schemas() -> dict[str, Schema]:

    member_id = {"type": "string", "pattern": f"^[A-Za-z0-9._-]{{1,{MAX_ID_CHARS}}}$"}
    member_url = {"type": "string", "maxLength": MAX_URL_CHARS, "pattern": r"^https?://[A-Za-z0-9._\[\]:-]+:[0-9]+/?$"}
    return {
        "Error": _object({"error": _STR, "message": _STR}),
        "UrlBatch": _object({"urls": {"type": "array", "minItems": 1, "maxItems": MAX_URLS_PER_REQUEST,
                                      "items": _url_item()}}),
        "UrlsTaken": _object({"accepted": _COUNT, "forwarded": _COUNT, "duplicate": _COUNT, "rejected": _COUNT,
                              "capped": _COUNT, "reasons": {"type": "object", "additionalProperties": _COUNT}}),
        "InvalidUrls": _object({"error": _STR, "message": _STR}, {"invalid": {"type": "array", "items": _object(
            {"index": _COUNT, "reason": _STR})}}),
        "Member": _object({"id": member_id, "url": member_url}),
        "Leave": _object({"id": member_id, "url": member_url}, {"drained": _BOOL}),
        "Members": _object({"node_id": _STR, "members": {"type": "array", "items": _ANY_OBJECT}}),
        "MembersAnswer": _object({"node_id": _STR, "members_digest": _STR},
                                 {"members": {"type": "array", "items": _ANY_OBJECT},
                                  # cluster.activity: what an idle member decides whether to read statuses by
                                  "activity": _object({"idle": _BOOL, "fetched": _COUNT, "known": _COUNT,
                                                       "paused": _BOOL}, {"finished": _COUNT}),
                                  # cluster.readiness rule 3: with ?from=, whether this node may still
                                  # owe that member hosts it held for it
                                  "handback_owed": _BOOL}),
        "Command": {"type": "object", "properties": {
            "reason": {"type": "string", "maxLength": control.MAX_REASON_CHARS},
            "by": {"type": "string", "maxLength": control.MAX_REASON_CHARS}}},
        "ControlChange": _object({"paused": _BOOL, "at": {"type": "number", "minimum": 0, "exclusiveMaximum": 1e11},
                                  "by": _STR}, {"reason": _STR}),
        "CommandAnswer": {"anyOf": [
            _object({"action": _STR, "members": {"type": "object", "additionalProperties": _object({"ok": _BOOL})},
                     "complete": _BOOL}),
            _object({"node_id": _STR}),  # ?local=1: this node's own answer
        ]},
    }


def _urls() -> Schema:
    body = {"required": True, "content": {"application/json": {"schema": _ref("UrlBatch")},
                                          "application/msgpack": {"schema": _ref("UrlBatch")}}}
    return {"post": {
        "summary": "Submit URLs (clients) or forward them (a peer's outbox, msgpack)", "security": _SECURITY,
        "requestBody": body,
        "responses": {
            "202": _answer("durably taken: queued here, forwarded to their owners, or counted", _ref("UrlsTaken")),
            "400": _answer("malformed body, or a URL that is not http(s), too long or unparsable (nothing enqueued)",
                           content={**_json({"anyOf": [_ref("InvalidUrls"), _ref("Error")]}),
                                    "text/plain": {"schema": _STR}}),
            **_PROTECTED, "403": _error("not_clustered: a URL marked seen sent to a node that runs alone"),
            **_BODY_READ,
            "429": _answer("inbound_full: the inbound queue is full", _ref("Error"), headers=_RETRY_AFTER),
            "503": _answer("leaving: the node has drained and is about to exit; or too many connections",
                           headers=_RETRY_AFTER,
                           content={**_json(_ref("Error")), "text/plain": {"schema": _STR}}),
        }}}


def _member_route(summary: str, body: str, answer: Schema, *, conflict: bool = False) -> Schema:
    responses = {"200": _answer("applied", answer), **_PROTECTED, **_MEMBERS_ONLY, **_BODY_READ}
    if conflict:
        responses["409"] = _error("same_id: the id is this node's own")
    return {"post": {"summary": summary, "security": _SECURITY, "responses": responses,
                     "requestBody": {"required": True, "content": _json(_ref(body))}}}


def _command(summary: str) -> Schema:
    return {"post": {"summary": summary, "security": _SECURITY, "parameters": [_LOCAL],
                     "requestBody": {"required": False, "content": _json(_ref("Command")),
                                     "description": f"at most {control.MAX_COMMAND_BYTES} bytes"},
                     "responses": {"200": _answer("what each member said", _ref("CommandAnswer")), **_PROTECTED,
                                   "408": _BODY_READ["408"]}}}


def _sync() -> Schema:
    change = {"anyOf": [{"type": "null"}, _ref("ControlChange")]}
    return {"post": {
        "summary": "A member compares its last pause or resume with this node's; the newer one wins on both",
        "security": _SECURITY,
        "requestBody": {"required": True, "content": _json(_object({"change": change}, {
                            "from": _STR, "dropped": {"type": "array", "items": _STR}})),
                        "description": f"at most {catch_up.MAX_SYNC_BYTES} bytes"},
        "responses": {"200": _answer("this node's last change and dropped hosts", _object(
                          {"change": change, "dropped": {"type": "array", "items": _STR}, "applied": _BOOL})),
                      "400": _error("bad_request: not a change"), **_PROTECTED, "408": _BODY_READ["408"]}}}


def _host_queue() -> Schema:
    at_owner = {"502": _error("owner_unreachable: the member that crawls the host did not answer"),
                "404": _answer("no such route (a host with a '/' in it)", content={"text/plain": {"schema": _STR}})}
    queue = _object({"host": _STR, "member": _STR, "queued": _COUNT, "leased": _COUNT, "deferred": _COUNT,
                     "urls": {"type": "array", "items": _object(
                         {"url": _STR, "depth": _INT, "priority": _INT},
                         # what its recrawls saw: the last estimate of its changes per second (null: none)
                         {"change_rate": {"type": ["number", "null"]}, "checks": _COUNT, "changes": _COUNT})}})
    dropped = _object({"host": _STR, "member": _STR, "dropped": {"type": "object", "additionalProperties": _COUNT}})
    limit = _query("limit", {"type": "integer", "minimum": 1, "maximum": control.MAX_QUEUE_LIMIT}, "URLs listed")
    return {
        "parameters": [_HOST_PATH],
        "get": {"summary": "One host's queue, from the member that crawls it", "security": _SECURITY,
                "parameters": [limit, _LOCAL],
                "responses": {"200": _answer("queued, then deferred, URLs in lease order", queue),
                              **_PROTECTED, **at_owner}},
        "delete": {"summary": "Drop one host's queue on the member that crawls it; the host stays dropped on every "
                              "member (its URLs end unfetched, outcome host_dropped)", "security": _SECURITY,
                   "parameters": [_LOCAL],
                   "responses": {"200": _answer("what was dropped", dropped), **_PROTECTED, **at_owner,
                                 "409": _error("too_many_dropped: the list of dropped hosts is full")}},
    }


def _hosts() -> Schema:
    row = _object({"host": _STR, "member": _STR, "queued": _COUNT, "leased": _COUNT, "deferred": _COUNT,
                   "in_flight": _COUNT, "limit": {"type": ["integer", "null"]}, "next_eligible": _NUMBER,
                   "state": _STR},
                  {"health": _STR, "health_score": _COUNT,  # core.site_health: the host's one judgment
                   "health_reasons": {"type": "array", "items": _STR},
                   # changes per second pooled over its recrawls on its member (null: none yet)
                   "change_rate": {"type": ["number", "null"]}})
    answer = _object({"hosts": {"type": "array", "items": row}, "total": _COUNT, "sort": _STR, "order": _STR,
                      "offset": _COUNT, "limit": _COUNT, "members": _ANY_OBJECT, "complete": _BOOL},
                     {"parked_urls": _COUNT})  # URLs of hosts past --active-hosts, not listed
    return {"get": {"summary": "Every member's hosts with unfinished URLs, merged", "security": _SECURITY,
                    "parameters": [
                        _query("sort", {"type": "string", "enum": list(control.SORT_KEYS)}, "sort key"),
                        _query("order", {"type": "string", "enum": ["asc", "desc"]}, "default: by sort key"),
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": control.MAX_HOSTS_LIMIT},
                               "rows"),
                        _query("offset", {"type": "integer", "minimum": 0, "maximum": control.MAX_HOSTS_OFFSET},
                               "rows skipped"),
                        _query("unhealthy", {"type": "string", "enum": ["0", "1", "true"]},
                               "1: only hosts whose health is not healthy"),
                        _LOCAL],
                    "responses": {"200": _answer("one page of hosts", answer), **_PROTECTED}}}


def _reads() -> dict[str, Schema]:
    ring = {"anyOf": [
        _object({"node_id": _STR, "vnodes": _COUNT, "key_by": _STR, "members": {"type": "array", "items": _object(
            {"id": _STR, "url": _STR, "state": _STR, "arc_share": _NUMBER})}},
            {"points": {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2}}}),
        _object({"host": _STR, "owner": {"type": ["string", "null"]}, "successors": {"type": "array", "items": _STR},
                 "live_owner": {"type": ["string", "null"]}}),
    ]}
    text = {"type": "string"}
    return {
        "/v1/status": {"get": {
            "summary": "This node and the cluster as it sees it",
            "parameters": [_query("scope", {"type": "string", "enum": ["local"]}, "this node only"),
                           _query("fresh", {"type": "string", "enum": ["1", "true"]},
                                  "built after the request, not from the snapshot (read-your-writes)")],
            "responses": {"200": _answer("status", _object({"node_id": _STR, "idle": _BOOL},
                                                           {"members": {"type": "array", "items": _ANY_OBJECT}}))}}},
        "/v1/ring": {"get": {
            "summary": "The ring: members, points and arc shares; or one host's owner",
            "parameters": [_query("host", {"type": "string"}, "a host name: answer its owner and successors"),
                           _query("points", {"type": "string", "enum": ["1"]}, "every (point, owner), clockwise")],
            "responses": {"200": _answer("the ring, or the host's owner", ring),
                          "400": _error("bad_host: not a valid host name")}}},
        "/metrics": {"get": {"summary": "Prometheus text format", "responses": {
            "200": _answer("metrics", content={"text/plain": {"schema": text}})}}},
        "/healthz": {"get": {"summary": "Alive and serving", "responses": {
            "200": _answer("serving", _object({"ok": {"const": True}, "node_id": _STR}))}}},
        "/": {"get": {"summary": "The live dashboard", "responses": {
            "200": _answer("an HTML page", content={"text/html": {"schema": text}})}}},
        OPENAPI_PATH: {"get": {"summary": "This document", "responses": {
            "200": _answer("OpenAPI 3.1", _ANY_OBJECT)}}},
    }


def _with_head(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Every GET with its HEAD twin (aiohttp serves both): same parameters, answers without a body."""
    for item in paths.values():
        if "get" in item:
            head = copy.deepcopy(item["get"])
            head["summary"] = f"{head['summary']} (headers only)"
            head["operationId"] = head["operationId"].replace("get ", "head ", 1)
            for answer in head["responses"].values():
                answer.pop("content", None)
            item["head"] = head
    return paths


def _with_always(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Every operation with the answers any request may get (_ALWAYS) and an operationId."""
    for path, item in paths.items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            responses = copy.deepcopy(_ALWAYS)
            for status, answer in operation["responses"].items():
                if status in responses and "content" in responses[status] and "content" in answer:
                    answer = {**answer, "content": {**responses[status]["content"], **answer["content"]}}
                responses[status] = answer
            operation["responses"] = responses
            operation["operationId"] = f"{method} {path}"
    return paths


def openapi_document() -> dict[str, Any]:
    """The whole description, as a new dict."""

    paths: dict[str, Schema] = {
        "/v1/urls": _urls(),
        "/v1/members": {"get": {
            "summary": "Membership view (heartbeats)", "security": _SECURITY,
            "parameters": [_query("from", _STR, "the asking member: ips.seen holds its acknowledgement alone, "
                                                "and handback_owed says whether this node may still owe it hosts"),
                           _query("known", _STR, "the digest of this node's member list the asker holds: "
                                                 "while it is still the list, the answer leaves members out")],
            "responses": {"200": _answer("members", _ref("MembersAnswer")), **_PROTECTED, **_MEMBERS_ONLY}}},
        "/v1/join": _member_route("A node joins the cluster", "Member", _ref("Members"), conflict=True),
        "/v1/leave": _member_route("A member leaves; drained: it handed all its work on", "Leave",
                                   _object({"ok": {"const": True}})),
        "/v1/resume": {"post": {"summary": "Resume fetching through the API after a quota pause",
                                "security": _SECURITY,
                                "responses": {"200": _answer("resumed or not", _object({"resumed": _BOOL,
                                                                                       "api": _ANY_OBJECT})),
                                              **_PROTECTED}}},
        control.PAUSE: _command("Pause the whole cluster (fetching stops; intake and heartbeats go on)"),
        control.RESUME: _command("Resume the whole cluster"),
        control.STOP: _command("Stop the whole cluster, as SIGTERM does"),
        control.HOSTS: _hosts(),
        control.HOST_QUEUE: _host_queue(),
        control.SYNC: _sync(),
        **_reads(),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "crawler_node", "version": "1",
                 "description": "The HTTP API of one node of a peer-to-peer web crawler. JSON by default; "
                                "POST /v1/urls also takes application/msgpack. Bodies: /v1/urls at most "
                                f"{MAX_BODY_BYTES} bytes, /v1/join and /v1/leave {MAX_MEMBER_BODY_BYTES}. The "
                                "security requirements apply where the node was started with --secret."},
        "paths": _with_head(_with_always(paths)),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "description": "the cluster token (--secret)"},
                "clusterToken": {"type": "apiKey", "in": "header", "name": "X-Cluster-Token",
                                 "description": "the cluster token, for a client that cannot set Authorization"},
            },
        },
    }


@functools.cache
def _document_bytes() -> bytes:
    return json.dumps(openapi_document()).encode()


async def get_openapi(request: web.Request) -> web.Response:
    return web.Response(body=_document_bytes(), content_type="application/json")
