"""The testweb HTTP server: a forward proxy in front of the synthetic web.

Clients reach it as their HTTP proxy, so requests arrive in absolute form
(`GET http://site-3.test/p/17 HTTP/1.1`); origin form with a `Host` header works too.
aiohttp resolves both into `request.url`: for absolute form it takes scheme, host and port from
the request target (ignoring the Host header, as RFC 9112 §3.2.2 asks), otherwise from `Host`.

Paths under `/_testweb/` are the ground-truth endpoints, answered whatever the host.
`GET /_testweb/stats` takes query flags: `summary=1` (totals only, cheap at any size),
`host=H` (repeatable: only these hosts and their URLs), `history=1` (each host's recent requests).

Every response is written out inside the handler (prepare + write_eof), so the in-flight
counters drop only once the body (including a slow drip) has been handed to the transport.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from crawler_node.testweb.graph import SyntheticWeb, gzip_bomb
from crawler_node.testweb.profile import ApiLimit, HostProfile
from crawler_node.testweb.stats import DEFAULT_HISTORY, GroundTruth, Visit

_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_CONTROL = "/_testweb/"
_CLOSE = "testweb.close"  # request key: answer with Connection: close


@dataclass(slots=True)
class _Site:
    """Runtime state of one synthetic host: its settings and its own behaviour RNG, so the
    error/jitter draws of one host do not depend on traffic to other hosts."""

    name: str
    profile: HostProfile
    seed: int
    robots: bytes | None
    # Made on first use: a Random holds 2.5 KB of state, 500 MB for a web of 200,000 hosts.
    # Seeded from the names alone, so when it is made does not change what it draws.
    _rng: random.Random | None = field(default=None, init=False, repr=False)

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}|{self.name}|behaviour")
        return self._rng


class PageCache:
    """A least-recently-used cache of rendered bodies, bounded by total bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: OrderedDict[tuple[str, str], bytes] = OrderedDict()

    def get(self, key: tuple[str, str]) -> bytes | None:
        body = self._items.get(key)
        if body is not None:
            self._items.move_to_end(key)
        return body

    def put(self, key: tuple[str, str], body: bytes) -> None:
        if len(body) > self._max_bytes // 4 or key in self._items:
            return
        self._items[key] = body
        self._bytes += len(body)
        while self._bytes > self._max_bytes:
            _, evicted = self._items.popitem(last=False)
            self._bytes -= len(evicted)


class TestwebServer:
    """Serves a `SyntheticWeb` with per-host behaviours and records ground truth."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        web_graph: SyntheticWeb,
        profiles: Mapping[str, HostProfile],
        api_limit: ApiLimit,
        cache_bytes: int = 64 << 20,
        history_limit: int = DEFAULT_HISTORY,
        keep_alive: bool = True,
    ) -> None:
        self._web = web_graph
        self._api_limit = api_limit
        self._keep_alive = keep_alive
        self._sites: dict[str, _Site] = {}
        for host in web_graph.hosts:
            profile = profiles.get(host, HostProfile())
            self._sites[host] = _Site(
                name=host,
                profile=profile,
                seed=web_graph.seed,
                robots=None if profile.robots is None else profile.robots.encode("utf-8"),
            )
        self.truth = GroundTruth(web_graph.hosts, quota=api_limit.quota, history_limit=history_limit)
        self._cache = PageCache(cache_bytes)
        self._bombs: dict[int, bytes] = {}
        self._expected_json: bytes | None = None
        self._runner: web.ServerRunner | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = any free port); return the address actually bound."""
        loop = asyncio.get_running_loop()
        for size in sorted({s.profile.gzip_bomb for s in self._sites.values()} - {0}):
            # ~0.2 s per GiB of zeros; done before the ready line so /bomb is instant.
            self._bombs[size] = await loop.run_in_executor(None, gzip_bomb, size)
        # The expected set (which also lays out every host) is computed before serving, so a
        # test asking for it mid-crawl never stalls the event loop (~50 ms per 1,000 pages).
        expected = await loop.run_in_executor(None, self._web.expected_urls)
        self._expected_json = json.dumps({"urls": expected}).encode()
        server = web.Server(self.handle, access_log=None)
        self._runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        bound = self._runner.addresses[0]
        return bound[0], bound[1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- request handling --------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self._keep_alive:
            request[_CLOSE] = True
        path = request.rel_url.raw_path
        if path.startswith(_CONTROL):
            return await self._control(request, path)
        try:
            url = request.url
            host = (url.host or "").rstrip(".")
            port = url.port
        except ValueError:
            return await _send(request, _plain(400, "bad request target or Host header"))
        site = self._sites.get(host)
        if site is None or port not in (80, None) or url.scheme != "http":
            self.truth.misdirected += 1
            return await _send(
                request, _plain(421, f"{url.host}:{port} is not part of the synthetic web")
            )
        query = request.rel_url.raw_query_string
        canonical = f"http://{host}{path}?{query}" if query else f"http://{host}{path}"
        refusal = self.truth.api_admit(self._api_limit.concurrency)
        if refusal is not None:
            return await self._api_refusal(request, refusal)
        # No await between admission and the try: a cancellation there would leak in-flight
        # counts and make every later peak wrong.
        visit = self.truth.begin(host, canonical, path)
        status = 0  # stays 0 when the client goes away before the response is written
        try:
            limit = site.profile.max_concurrency
            if limit is not None and visit.stats.in_flight > limit:
                self.truth.throttled(visit)
                status = 429  # decided: the history says 429 even if the write then fails
                retry_after = f"{site.profile.retry_after_s:g}"
                return await _send(
                    request, _plain(429, "too many requests", {"Retry-After": retry_after})
                )
            await self._delay(site)
            response = await self._serve(request, site, path, visit)
            status = response.status
            return response
        finally:
            self.truth.end(visit, status)
            self.truth.api_end()

    async def _api_refusal(self, request: web.BaseRequest, reason: str) -> web.StreamResponse:
        headers = {self._api_limit.header: reason}
        if reason == "concurrency":
            headers["Retry-After"] = "1"
            return await _send(request, _plain(429, "API concurrency limit exceeded", headers))
        return await _send(request, _plain(509, "API quota exhausted", headers))

    async def _delay(self, site: _Site) -> None:
        profile = site.profile
        if profile.latency_ms <= 0 and profile.jitter_ms is None:
            return
        jitter = profile.effective_jitter_ms
        delay_ms = profile.latency_ms + (site.rng.uniform(0.0, jitter) if jitter > 0 else 0.0)
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000.0)

    async def _serve(
        self, request: web.BaseRequest, site: _Site, path: str, visit: Visit
    ) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return await _send(request, _plain(405, "method not allowed", {"Allow": "GET, HEAD"}))
        if path == "/robots.txt":
            if site.robots is None:
                return await _send(request, _plain(404, "no robots.txt here"))
            return await _send(request, web.Response(body=site.robots, content_type="text/plain"))
        resource = self._web.resolve(site.name, path)
        if resource is None:
            return await _send(request, _plain(404, "not found"))
        profile = site.profile
        if profile.error_rate > 0 and site.rng.random() < profile.error_rate:
            self.truth.errored(visit)
            return await _send(request, _plain(profile.error_status, "synthetic server error"))
        kind = resource.kind
        if kind == "redirect":
            location = resource.location or "/"
            return await _send(
                request,
                _plain(resource.status, f"moved to {location}", {"Location": location}),
            )
        if kind == "bomb":
            headers = {"Content-Type": _HTML, "Content-Encoding": "gzip"}
            bomb = self._bombs[profile.gzip_bomb]
            return await _send(request, web.Response(body=bomb, headers=headers))
        key = (site.name, path)
        body = self._cache.get(key)
        if kind == "image":
            content_type = "image/png"
            if body is None:
                body = self._web.image(site.name, resource.index)
                self._cache.put(key, body)
        else:
            content_type = _HTML
            if body is None:
                body = self._web.render(site.name, path)
                self._cache.put(key, body)
        if profile.drip_bytes_per_s:
            return await _drip(request, body, content_type, profile.drip_bytes_per_s)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        return await _send(request, response)

    # --- ground-truth endpoints --------------------------------------------------------------

    async def _control(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        name = path[len(_CONTROL) :]
        method = request.method
        if name == "expected" and method == "GET":
            if self._expected_json is None:  # only when start() was bypassed
                self._expected_json = json.dumps({"urls": self._web.expected_urls()}).encode()
            return await _send(request, _json_response(self._expected_json))
        if name == "stats" and method == "GET":
            query = request.rel_url.query
            hosts = query.getall("host", None)
            snapshot = self.truth.snapshot(
                summary=_flag(query.get("summary")), hosts=hosts, history=_flag(query.get("history"))
            )
            return await _send(request, _json_response(snapshot))
        if name == "hosts" and method == "GET":
            return await _send(request, _json_response(self._describe()))
        if name == "reset" and method == "POST":
            self.truth.reset()
            return await _send(request, _json_response({"ok": True}))
        if name == "api/quota" and method == "POST":
            return await _send(request, await self._set_quota(request))
        if name in ("expected", "stats", "hosts", "reset", "api/quota"):
            return await _send(request, _plain(405, "method not allowed"))
        return await _send(request, _plain(404, f"no control endpoint {path}"))

    async def _set_quota(self, request: web.BaseRequest) -> web.Response:
        try:
            document = await request.json()
            quota = document["quota"]
        except (ValueError, KeyError, TypeError):
            return _plain(400, 'expected JSON {"quota": N} (N an integer >= 0, or null)')
        valid = quota is None or (type(quota) is int and quota >= 0)  # bool is not a quota
        if not valid:
            return _plain(400, f"quota must be an integer >= 0 or null, got {quota!r}")
        self.truth.set_quota(quota)
        return _json_response({"quota_left": quota})

    def _describe(self) -> dict[str, Any]:
        return {
            "seed": self._web.seed,
            "pages": self._web.pages,
            "cross_link_prob": self._web.cross_link_prob,
            "images": self._web.images,
            "history": self.truth.history_limit,
            "keep_alive": self._keep_alive,
            "api_limit": self._api_limit.to_json(),
            "hosts": {name: site.profile.to_json() for name, site in self._sites.items()},
        }


# --- response helpers ------------------------------------------------------------------------


async def _send(request: web.BaseRequest, response: web.StreamResponse) -> web.StreamResponse:
    if request.get(_CLOSE):
        response.force_close()
    await response.prepare(request)
    await response.write_eof()
    return response


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "on")


def _plain(status: int, text: str, headers: Mapping[str, str] | None = None) -> web.Response:
    all_headers = {"Content-Type": _TEXT, **(headers or {})}
    return web.Response(status=status, body=f"{text}\n".encode(), headers=all_headers)


def _json_response(document: Any) -> web.Response:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return web.Response(body=body, headers={"Content-Type": _JSON})


async def _drip(
    request: web.BaseRequest, body: bytes, content_type: str, rate: int
) -> web.StreamResponse:
    """Stream `body` at about `rate` bytes per second, in ten chunks a second."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = len(body)
    if request.get(_CLOSE):
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
        except ConnectionResetError:
            return response  # the client gave up; nothing more to send
    await response.write_eof()
    return response
