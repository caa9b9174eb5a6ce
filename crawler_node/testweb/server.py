"""The testweb HTTP server: a forward proxy in front of the synthetic web.

Clients reach it as their HTTP proxy, so requests arrive in absolute form
(`GET http://site-3.test/p/17 HTTP/1.1`); origin form with a `Host` header works too.
aiohttp resolves both into `request.url`: for absolute form it takes scheme, host and port from
the request target (ignoring the Host header, as RFC 9112 §3.2.2 asks), otherwise from `Host`.

Paths under `/_testweb/` are the ground-truth endpoints, answered whatever the host.
`GET /_testweb/stats` takes query flags: `summary=1` (totals only, cheap at any size),
`host=H` (repeatable: only these hosts and their URLs), `history=1` (each host's recent requests).

Every response is written out inside the handler (prepare + write_eof), so the in-flight
counters drop only once the body (including a slow drip) has been handed to the transport, and
the body bytes a host is credited with are those actually written (none for HEAD or a 304).

Every 200 with content (pages, images, robots.txt, the bomb) carries ETag and Last-Modified and
honours If-None-Match / If-Modified-Since (see `representations`); on a host with `gzip`, HTML is
sent gzip-encoded to clients whose Accept-Encoding allows it, with `Vary: Accept-Encoding`.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from crawler_node.testweb.changes import ChangeClock
from crawler_node.testweb.graph import SyntheticWeb
from crawler_node.testweb.ground_truth import DEFAULT_HISTORY, GroundTruth, Visit
from crawler_node.testweb.pages import gzip_bomb, with_revision
from crawler_node.testweb.profile import ApiLimit, HostProfile
from crawler_node.testweb.refusals import RefusalState, refuses
from crawler_node.testweb.refusals import answer as refusal_answer
from crawler_node.testweb.representations import (
    Representation,
    RepresentationCache,
    accepts_gzip,
    is_not_modified,
    represent,
    strong_etag,
)
from crawler_node.testweb.responses import (
    CLOSE,
    SENT,
    drip,
    json_response,
    plain,
    send,
    validated,
)
from crawler_node.testweb.url_shapes import LEGACY_CONTENT_TYPE

_HTML = "text/html; charset=utf-8"
# A sitemap's Content-Type by its format; gzip'd ones (F.gz) are application/gzip files.
_SITEMAP_TYPES = {"xml": "application/xml", "txt": "text/plain; charset=utf-8", "rss": "application/rss+xml",
                  "atom": "application/atom+xml"}
_CONTROL = "/_testweb/"


@dataclass(slots=True)
class _Site:
    """Runtime state of one synthetic host: its settings and its own behaviour RNG, so the
    error/jitter draws of one host do not depend on traffic to other hosts."""

    name: str
    profile: HostProfile
    seed: int
    robots: Representation | None
    refusals: RefusalState | None = None  # set when the profile refuses (testweb.refusals)
    # Made on first use: a Random holds 2.5 KB of state, 500 MB for a web of 200,000 hosts.
    # Seeded from the names alone, so when it is made does not change what it draws.
    _rng: random.Random | None = field(default=None, init=False, repr=False)

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}|{self.name}|behaviour")
        return self._rng


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
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._web = web_graph
        self._api_limit = api_limit
        self._keep_alive = keep_alive
        self._wall_clock = wall_clock
        # When every stable resource was last modified: the second testweb started, so no
        # Last-Modified is ever in the future.
        self._started = math.floor(wall_clock())
        self._last_change = float(self._started)  # the latest changing page's modification
        self._revision = 0  # the last revision a changing page was rendered with, on any host
        self._t0 = wall_clock()  # the pages with a change_rate change from here (testweb.changes)
        self.changes = ChangeClock(web_graph.seed)
        self._sites: dict[str, _Site] = {}
        for host in web_graph.hosts:
            profile = profiles.get(host, HostProfile())
            robots = None
            robots_txt = web_graph.robots_txt(host)
            if robots_txt is not None:
                # the byte-order mark, when asked for, is only served: the rules (and the
                # ground truth's reading of them, graph.expected_urls) are the text after it
                bom = b"\xef\xbb\xbf" if profile.robots_bom else b""
                robots = represent(bom + robots_txt.encode("utf-8"), modified=self._started)
            self._sites[host] = _Site(name=host, profile=profile, seed=web_graph.seed, robots=robots,
                                      refusals=RefusalState() if refuses(profile) else None)
        self.truth = GroundTruth(web_graph.hosts, quota=api_limit.quota, history_limit=history_limit)
        self._cache = RepresentationCache(cache_bytes)
        self._bombs: dict[int, Representation] = {}
        self._expected_json: bytes | None = None
        self._runner: web.ServerRunner | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = any free port); return the address actually bound."""
        loop = asyncio.get_running_loop()
        for size in sorted({s.profile.gzip_bomb for s in self._sites.values()} - {0}):
            # ~0.2 s per GiB of zeros; done before the ready line so /bomb is instant.
            bomb = await loop.run_in_executor(None, gzip_bomb, size)
            self._bombs[size] = Representation(bomb, strong_etag(bomb), self._started, "gzip")
        # The expected set (which also lays out every host) is computed before serving, so a
        # test asking for it mid-crawl never stalls the event loop (~50 ms per 1,000 pages).
        self._expected_json = await loop.run_in_executor(None, self._ground_truth_json)
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
            request[CLOSE] = True
        path = request.rel_url.raw_path
        if path.startswith(_CONTROL):
            return await self._control(request, path)
        try:
            url = request.url
            host = (url.host or "").rstrip(".")
            port = url.port
        except ValueError:
            return await send(request, plain(400, "bad request target or Host header"))
        site = self._sites.get(host)
        if site is None or port not in (80, None) or url.scheme != "http":
            self.truth.misdirected += 1
            return await send(
                request, plain(421, f"{url.host}:{port} is not part of the synthetic web")
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
                return await send(
                    request, plain(429, "too many requests", {"Retry-After": retry_after})
                )
            await self._delay(site)
            response = await self._serve(request, site, path, visit)
            status = response.status
            return response
        finally:
            self.truth.end(visit, status, body_bytes=request.get(SENT, 0))
            self.truth.api_end()

    async def _api_refusal(self, request: web.BaseRequest, reason: str) -> web.StreamResponse:
        headers = {self._api_limit.header: reason}
        if reason == "concurrency":
            headers["Retry-After"] = "1"
            return await send(request, plain(429, "API concurrency limit exceeded", headers))
        return await send(request, plain(509, "API quota exhausted", headers))

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
            return await send(request, plain(405, "method not allowed", {"Allow": "GET, HEAD"}))
        if path == "/robots.txt":
            if site.robots is None:
                return await send(request, plain(404, "no robots.txt here"))
            return await self._answer(request, visit, site.robots, {"Content-Type": "text/plain"})
        resource = self._web.resolve(site.name, path)
        if resource is None:
            return await send(request, plain(404, "not found"))
        profile = site.profile
        if site.refusals is not None and resource.kind != "redirect":
            refusal = refusal_answer(profile, site.refusals, host=site.name, path=path, now=self.truth.now())
            if refusal is not None:
                self.truth.refused(visit, refusal.kind)
                response = web.Response(status=refusal.status, body=refusal.body, headers=refusal.headers)
                return await send(request, response)
        if profile.error_rate > 0 and site.rng.random() < profile.error_rate:
            self.truth.errored(visit)
            return await send(request, plain(profile.error_status, "synthetic server error"))
        kind = resource.kind
        if kind == "redirect":
            location = resource.location or "/"
            return await send(
                request,
                plain(resource.status, f"moved to {location}", {"Location": location}),
            )
        if kind == "bomb":
            bomb = self._bombs[profile.gzip_bomb]
            return await self._answer(request, visit, bomb, {"Content-Type": _HTML})
        drip_rate = profile.drip_bytes_per_s
        if kind == "sitemap":
            sitemap = self._stable(site.name, path, lambda: self._web.sitemap(site.name, path))
            content_type = _SITEMAP_TYPES.get(resource.format, "application/gzip")
            return await self._answer(request, visit, sitemap, {"Content-Type": content_type}, drip_rate)
        if kind == "image":
            image = self._stable(site.name, path, lambda: self._web.image(site.name, resource.index))
            return await self._answer(request, visit, image, {"Content-Type": "image/png"}, drip_rate)
        compress = profile.gzip and accepts_gzip(request.headers.get("Accept-Encoding"))
        if (profile.change_rate > 0 or profile.change_paths) and kind == "page" and path != "/":
            page = self._versioned(site, path, compress=compress)
        else:
            page = self._page(site.name, path, compress=compress)
        headers = {"Content-Type": LEGACY_CONTENT_TYPE if kind == "legacy" else _HTML}
        if profile.gzip:
            headers["Vary"] = "Accept-Encoding"  # on identity answers too: they vary as well
        return await self._answer(request, visit, page, headers, drip_rate)

    def _page(self, host: str, path: str, *, compress: bool) -> Representation:
        """The HTML at `path` as this visit gets it: a changing page gets the next revision
        (never cached), any other page the same bytes every time."""
        if not self._web.changes(host, path):
            return self._stable(host, path, lambda: self._web.render(host, path), compress=compress)
        stable = self._stable(host, path, lambda: self._web.render(host, path))
        self._revision += 1
        # Modified now; never earlier than the last change, should the wall clock step back.
        self._last_change = max(self._last_change, self._wall_clock())
        body = with_revision(stable.body, self._revision)
        return represent(body, modified=self._last_change, compress=compress)

    def _versioned(self, site: _Site, path: str, *, compress: bool) -> Representation:
        """A page of a host with a change_rate as it is now: its version's bytes, modified at its
        last change. Serving it (a 200 or a 304) is a fetch of the current version."""
        now = self._wall_clock() - self._t0
        profile = site.profile
        rate = profile.change_rate_of(path)
        version, changed_at = self.changes.version(site.name, path, rate, profile.change_spread, now)
        self.changes.served(site.name, path, now)
        stable = self._stable(site.name, path, lambda: self._web.render(site.name, path))
        body = with_revision(stable.body, version) if version else stable.body
        modified = max(self._t0 + changed_at, float(self._started)) if version else float(self._started)
        return represent(body, modified=modified, compress=compress)

    def freshness(self, *, since: float = 0.0, buckets: int = 0, pages: bool = False) -> dict[str, Any]:
        return self.changes.report(self._wall_clock() - self._t0, since=since, buckets=buckets, pages=pages)

    def _stable(
        self, host: str, path: str, render: Callable[[], bytes], *, compress: bool = False
    ) -> Representation:
        key = (host, path, "gzip" if compress else "identity")
        representation = self._cache.get(key)
        if representation is None:
            body = self._stable(host, path, render).body if compress else render()
            representation = represent(body, modified=self._started, compress=compress)
            self._cache.put(key, representation)
        return representation

    async def _answer(
        self,
        request: web.BaseRequest,
        visit: Visit,
        representation: Representation,
        headers: Mapping[str, str],
        drip_bytes_per_s: int | None = None,
    ) -> web.StreamResponse:
        """A 200 with `representation`, or a 304 when the request's validators match it."""
        not_modified = is_not_modified(
            representation,
            if_none_match=request.if_none_match,
            if_modified_since=request.if_modified_since,
        )
        if not_modified:
            self.truth.not_modified(visit)
            # A 304 carries the validators and the Vary a 200 would have (RFC 9110 15.4.5).
            kept = {name: value for name, value in headers.items() if name == "Vary"}
            return await send(request, validated(web.Response(status=304, headers=kept), representation))
        all_headers = dict(headers)
        if representation.encoding is not None:
            all_headers["Content-Encoding"] = representation.encoding
        if drip_bytes_per_s:
            streamed = validated(web.StreamResponse(headers=all_headers), representation)
            return await drip(request, streamed, representation.body, drip_bytes_per_s)
        response = web.Response(body=representation.body, headers=all_headers)
        return await send(request, validated(response, representation))

    # --- ground-truth endpoints --------------------------------------------------------------

    async def _control(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        name = path[len(_CONTROL) :]
        method = request.method
        if name == "expected" and method == "GET":
            if self._expected_json is None:  # only when start() was bypassed
                self._expected_json = self._ground_truth_json()
            return await send(request, json_response(self._expected_json))
        if name == "stats" and method == "GET":
            query = request.rel_url.query
            hosts = query.getall("host", None)
            snapshot = self.truth.snapshot(
                summary=_flag(query.get("summary")), hosts=hosts, history=_flag(query.get("history"))
            )
            return await send(request, json_response(snapshot))
        if name == "freshness" and method == "GET":
            query = request.rel_url.query
            try:
                since, buckets = float(query.get("since", "0")), min(int(query.get("buckets", "0")), 1000)
            except ValueError:
                return await send(request, plain(400, "since (seconds) and buckets (an integer) are numbers"))
            report = self.freshness(since=since, buckets=buckets, pages=_flag(query.get("pages")))
            return await send(request, json_response(report))
        if name == "hosts" and method == "GET":
            return await send(request, json_response(self._describe()))
        if name == "reset" and method == "POST":
            self.truth.reset()
            return await send(request, json_response({"ok": True}))
        if name == "api/quota" and method == "POST":
            return await send(request, await self._set_quota(request))
        if name in ("expected", "stats", "hosts", "reset", "api/quota", "freshness"):
            return await send(request, plain(405, "method not allowed"))
        return await send(request, plain(404, f"no control endpoint {path}"))

    async def _set_quota(self, request: web.BaseRequest) -> web.Response:
        try:
            document = await request.json()
            quota = document["quota"]
        except (ValueError, KeyError, TypeError):
            return plain(400, 'expected JSON {"quota": N} (N an integer >= 0, or null)')
        valid = quota is None or (type(quota) is int and quota >= 0)  # bool is not a quota
        if not valid:
            return plain(400, f"quota must be an integer >= 0 or null, got {quota!r}")
        self.truth.set_quota(quota)
        return json_response({"quota_left": quota})

    def _ground_truth_json(self) -> bytes:
        """/_testweb/expected: the expected URLs, and which of them change on every visit."""
        urls = self._web.expected_urls()
        return json.dumps({"urls": urls, "changing": self._web.changing_urls(urls)}).encode()

    def _describe(self) -> dict[str, Any]:
        return {
            "seed": self._web.seed,
            "pages": self._web.pages,
            "cross_link_prob": self._web.cross_link_prob,
            "tree_only": self._web.tree_only,
            "images": self._web.images,
            "history": self.truth.history_limit,
            "keep_alive": self._keep_alive,
            "api_limit": self._api_limit.to_json(),
            "hosts": {name: site.profile.to_json() for name, site in self._sites.items()},
        }


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "on")
