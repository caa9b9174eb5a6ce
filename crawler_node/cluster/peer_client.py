"""Every request this node makes to another member's API goes through one ``PeerClient``.

It owns what every such request shares (aiohttp's advice: one session per application):
- one session, and with it one connection pool to the members;
- the cluster token, on every request (``Authorization: Bearer``);
- the member a request is addressed to (``ADDRESSED_TO``): a node that is not that member
  answers 421, so an address that moved to another member is found out, never believed;
- a timeout per kind of call, here and nowhere else (``PeerTimeouts``);
- answers read within a size limit, so a hostile or broken peer costs bounded memory.

Callers get a ``PeerAnswer`` (status, headers, body) or a ``PeerUnreachable`` that says why no
answer came; what an answer means is theirs to decide (heartbeats, joins, the outbox's
batches, status reads, crawl control).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from crawler_node.cluster.wire import ADDRESSED_TO, FORWARDED_BY, MSGPACK

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # an answer read whole, at most (a hosts listing of 11,000 rows is ~2 MB)
MAX_STATUS_BYTES = 4_000_000  # a member's /v1/status, read for the cluster view (some tens of kB)


@dataclass(frozen=True, slots=True)
class PeerTimeouts:
    """How long each kind of call may take, whole (connecting included)."""

    heartbeat_s: float = 0.5  # GET /v1/members: an answer later than this is silence
    connect_s: float = 1.0  # to open a connection, for calls allowed longer than that
    batch_s: float = 10.0  # POST /v1/urls: a batch of up to --forward-batch rows, taken durably
    member_s: float = 2.0  # join, leave, and a join's announcement to the others
    status_s: float = 2.0  # GET /v1/status?scope=local for the cluster view
    control_s: float = 5.0  # crawl control fanned out to every member (pause, resume, stop, hosts)

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


class PeerUnreachable(Exception):
    """No answer came from a member: refused, reset, timed out, or too large to read.
    ``kind``: what went wrong in a word (the exception's class name); ``detail``: the rest."""

    def __init__(self, url: str, kind: str, detail: str = "") -> None:
        super().__init__(f"{url}: {kind} {detail}".strip())
        self.url = url
        self.kind = kind
        self.detail = detail


class BadPeerAnswer(ValueError):
    """A member's answer does not have the shape the call expects."""


@dataclass(frozen=True, slots=True)
class PeerAnswer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> object:
        """The body as JSON; BadPeerAnswer if it is not (or is nested past reason)."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or "[[[[..."
            raise BadPeerAnswer(f"not JSON: {type(exc).__name__}") from exc


class PeerClient:
    def __init__(self, *, secret: str | None, timeouts: PeerTimeouts | None = None) -> None:
        self.timeouts = timeouts if timeouts is not None else PeerTimeouts()
        self._auth = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._session: aiohttp.ClientSession | None = None

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Open the session (in the running loop, as aiohttp wants)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False, headers=self._auth)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> PeerClient:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- the calls
    async def members(self, url: str, *, to: str, params: Mapping[str, str]) -> PeerAnswer:
        """A heartbeat: ``GET /v1/members`` (cluster.heartbeats)."""
        return await self._call("GET", url, "/v1/members", to=to, params=params, timeout_s=self.timeouts.heartbeat_s)

    async def join(self, url: str, body: Mapping[str, Any], *, to: str | None = None) -> PeerAnswer:
        """``POST /v1/join``: to a member (``to``), or to an address found by DNS (cluster.peerdns)."""
        return await self._call("POST", url, "/v1/join", to=to, json_body=body, timeout_s=self.timeouts.member_s)

    async def tell(self, url: str, path: str, body: Mapping[str, Any]) -> bool:
        """A membership announcement whose answer does not matter (a join passed on, a leave):
        True if it was answered. The heartbeats' anti-entropy carries what a lost one said."""
        try:
            await self._call("POST", url, path, to=None, json_body=body, timeout_s=self.timeouts.member_s)
        except PeerUnreachable:
            return False
        return True

    async def send_batch(self, url: str, body: bytes, *, to: str, sender: str, coding: str | None) -> PeerAnswer:
        """A batch of the outbox: ``POST /v1/urls`` in msgpack (cluster.wire), gzip'd or not."""
        headers = {"Content-Type": MSGPACK, FORWARDED_BY: sender}
        if coding is not None:
            headers["Content-Encoding"] = coding
        return await self._call("POST", url, "/v1/urls", to=to, data=body, headers=headers,
                                timeout_s=self.timeouts.batch_s)

    async def status(self, url: str, *, to: str) -> PeerAnswer:
        """The member's own status, ``GET /v1/status?scope=local`` (the cluster view)."""
        return await self._call("GET", url, "/v1/status", to=to, params={"scope": "local"},
                                timeout_s=self.timeouts.status_s, max_bytes=MAX_STATUS_BYTES)

    async def control(self, url: str, method: str, path: str, *, to: str, params: Mapping[str, str],
                      body: Mapping[str, Any] | None) -> PeerAnswer:
        """A crawl-control command or listing applied on that member alone (``?local=1``)."""
        return await self._call(method, url, path, to=to, params={**params, "local": "1"}, json_body=body,
                                timeout_s=self.timeouts.control_s)

    # ----------------------------------------------------------------- one request
    async def _call(self, method: str, url: str, path: str, *, to: str | None, timeout_s: float,
                    params: Mapping[str, str] | None = None, json_body: Mapping[str, Any] | None = None,
                    data: bytes | None = None, headers: Mapping[str, str] | None = None,
                    max_bytes: int = MAX_ANSWER_BYTES) -> PeerAnswer:
        session = self._session
        if session is None:
            raise PeerUnreachable(url, "NotStarted", "the peer client is not started")
        sent = dict(headers or {})
        if to is not None:
            sent[ADDRESSED_TO] = to
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, self.timeouts.connect_s))
        try:
            async with session.request(method, f"{url}{path}", params=params, json=json_body, data=data,
                                       headers=sent, timeout=timeout) as response:
                body = await _read(response, max_bytes)
                return PeerAnswer(response.status, response.headers, body)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise PeerUnreachable(url, type(exc).__name__, str(exc)) from exc


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or PeerUnreachable past ``limit`` bytes (read no further)."""
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise PeerUnreachable(str(response.url), "TooLarge", f"answer over {limit} bytes")
    return bytes(body)
