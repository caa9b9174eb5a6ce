"""Writing testweb's answers out, and noting on the request what that sent.

Every response is prepared and ended here, inside the handler, so the server's in-flight
counters drop only once the body (a slow drip included) is with the transport. `SENT` on the
request then holds the body bytes written: the length of a bytes body (its compressed length
when gzip-encoded), nothing for HEAD or a 304, and for a drip the pieces written before the
client went away.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from email.utils import formatdate
from typing import Any, TypeVar

from aiohttp import web

from crawler_node.testweb.representations import Representation

CLOSE = "testweb.close"  # request key: answer with Connection: close
SENT = "testweb.sent"  # request key: body bytes written to the client so far
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"

R = TypeVar("R", bound=web.StreamResponse)


async def send(request: web.BaseRequest, response: web.StreamResponse) -> web.StreamResponse:
    if request.get(CLOSE):
        response.force_close()
    await response.prepare(request)
    await response.write_eof()
    # Counted once written: prepare() has set the length of a bytes body by now.
    must_be_empty = request.method == "HEAD" or response.status == 304
    request[SENT] = 0 if must_be_empty else response.content_length or 0
    return response


def validated(response: R, representation: Representation) -> R:
    """`response` with the representation's validators. Set by name, not with aiohttp's
    `etag` setter, which spells the header `Etag`; and rounded down to the second ourselves,
    since its `last_modified` setter rounds up, which could be a second in the future."""
    response.headers["ETag"] = f'"{representation.etag}"'
    response.headers["Last-Modified"] = formatdate(math.floor(representation.modified), usegmt=True)
    return response


def plain(status: int, text: str, headers: Mapping[str, str] | None = None) -> web.Response:
    all_headers = {"Content-Type": _TEXT, **(headers or {})}
    return web.Response(status=status, body=f"{text}\n".encode(), headers=all_headers)


def json_response(document: Any) -> web.Response:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return web.Response(body=body, headers={"Content-Type": _JSON})


async def drip(
    request: web.BaseRequest, response: web.StreamResponse, body: bytes, rate: int
) -> web.StreamResponse:
    """Stream `body` as `response` at about `rate` bytes per second, in ten chunks a second."""
    response.content_length = len(body)
    request[SENT] = 0
    if request.get(CLOSE):
        response.force_close()
    await response.prepare(request)
    if request.method != "HEAD":
        loop = asyncio.get_running_loop()
        started = loop.time()
        chunk = max(1, rate // 10)
        try:
            for offset in range(0, len(body), chunk):
                piece = body[offset : offset + chunk]
                # Pace against the start time so the rate does not drift with scheduling;
                # waiting before each piece makes the whole body take len(body) / rate.
                wait = started + (offset + len(piece)) / rate - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await response.write(piece)
                request[SENT] += len(piece)
        except ConnectionResetError:
            return response  # the client gave up; nothing more to send
    await response.write_eof()
    return response
