"""What every handler of the API shares: errors with a machine-readable reason, the cluster
token's check, and bodies read within a size and a time limit and decoded without letting the
body decide how deep the decoder recurses or how much it allocates."""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

import msgpack
from aiohttp import web

from crawler_node.cluster.wire import MAX_URLS_PER_REQUEST, MSGPACK
from crawler_node.core.urls import MAX_URL_LENGTH
from crawler_node.node.node import Node

MAX_BODY_BYTES = 8 * 1024 * 1024
# The largest legitimate msgpack body: {"urls": [up to 10,000 maps of a few small fields]}.
_MSGPACK_LIMITS = {"max_str_len": 4 * MAX_URL_LENGTH + 64, "max_bin_len": 0, "max_ext_len": 0,
                   "max_array_len": MAX_URLS_PER_REQUEST, "max_map_len": 16}
# The content codings a body may come in, which aiohttp decodes before a handler reads it (a
# member's batches come gzip'd: cluster.forwarding). Any other would reach the decoders as it is
# (aiohttp passes a coding it does not know through, and fails inside the read on "br").
BODY_CODINGS = ("gzip", "deflate")
_IDENTITY = frozenset({"", "identity", *BODY_CODINGS})
NODE_KEY = web.AppKey("node", Node)
READ_TIMEOUT_KEY = web.AppKey("read_timeout_s", float)  # for a body, once its headers are in


def error(status: int, reason: str, message: str, *, headers: dict[str, str] | None = None,
          **extra: Any) -> web.Response:
    body = {"error": reason, "message": message, **extra}
    return web.json_response(body, status=status, headers=headers)


class BadRequest(Exception):
    def __init__(self, reason: str, message: str, *, status: int = 400, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status
        self.headers = headers
        self.extra = extra

    def response(self) -> web.Response:
        return error(self.status, self.reason, self.message, headers=self.headers, **self.extra)


def authorised(request: web.Request, secret: str | None) -> bool:
    if not secret:
        return True
    header = request.headers.get("Authorization", "")
    token = header[7:] if header.startswith("Bearer ") else request.headers.get("X-Cluster-Token", "")
    # Bytes, not str: compare_digest refuses non-ASCII str, and header bytes that are not UTF-8
    # arrive as lone surrogates (surrogateescape) that only this error handler can encode.
    return hmac.compare_digest(token.encode("utf-8", "surrogateescape"), secret.encode("utf-8"))


def decode_body(body: bytes, content_type: str) -> Any:
    if content_type == MSGPACK:
        try:
            return msgpack.unpackb(body, raw=False, strict_map_key=True, **_MSGPACK_LIMITS)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise BadRequest("bad_msgpack", f"body is not valid msgpack: {type(exc).__name__}") from exc
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest("bad_json", f"body is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # "[[[[...": the decoder recurses once per level
        raise BadRequest("too_deep", "body is nested too deeply") from exc


async def read_body(request: web.Request, limit: int) -> bytes:
    """The body, read within the API's read timeout (a client dripping it slowly holds a
    connection and a handler); BadRequest when it is too large (decoded: a gzip bomb stops at
    `limit`), too slow, or in a content coding that is not one of BODY_CODINGS or does not
    decode."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in _IDENTITY:
        raise BadRequest("unsupported_encoding", f"Content-Encoding {coding[:40]!r} is not supported: "
                         f"send the body as it is, or in {' or '.join(BODY_CODINGS)}", status=415,
                         headers={"Accept-Encoding": ", ".join(BODY_CODINGS)})
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest("too_large", f"body of {request.content_length} bytes exceeds {limit}", status=413)
    try:
        async with asyncio.timeout(request.app[READ_TIMEOUT_KEY]):
            body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise BadRequest("too_large", f"body exceeds {limit} bytes", status=413) from exc
    except TimeoutError as exc:
        raise BadRequest("too_slow", "the body did not arrive within the read timeout", status=408) from exc
    except web.RequestPayloadError as exc:  # a gzip body that is not gzip, a broken chunked body
        raise BadRequest("bad_body", f"the body could not be read: {str(exc).strip()[:200]}") from exc
    if len(body) > limit:
        raise BadRequest("too_large", f"body of {len(body)} bytes exceeds {limit}", status=413)
    return body
