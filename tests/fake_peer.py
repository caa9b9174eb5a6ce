"""A stand-in cluster member, run as a script:

    python fake_peer.py HOST PORT RETRY_AFTER [--mode MODE]

Modes:
  full-inbound (the default): heartbeats answer well-formed; POST /v1/urls answers 429 with
      Retry-After: RETRY_AFTER, as a peer whose inbound is always full.
  malformed-members: GET /v1/members answers 200 with a malformed body, a different one each
      second, cycling through MALFORMED_MEMBERS (one second per body, longer than a heartbeat
      interval, so every node polling it sees every kind). POST /v1/urls as above.

GET /_fake/stats: {"posts": [epoch times of POST /v1/urls], "members_served": {kind: count},
"members_for_s": seconds since the first GET /v1/members (null before it),
"members_idle_s": seconds since the latest one (null before it)}.
The cluster token is never checked.
"""

from __future__ import annotations

import argparse
import time

from aiohttp import web

# kind -> (content type, body): each is wrong in its own way for {"members": [{"id", "url"}, ...]}.
MALFORMED_MEMBERS: dict[str, tuple[str, bytes]] = {
    "list-not-object": ("application/json", b'["members", []]'),
    "members-string": ("application/json", b'{"members": "x"}'),
    "members-ints": ("application/json", b'{"members": [1, 2]}'),
    "member-id-int": ("application/json", b'{"members": [{"id": 5}]}'),
    "leaving-string-members-object": ("application/json", b'{"leaving": "yes", "members": {}}'),
    "not-json": ("application/json", b"<html>\x00\xff garbage, not JSON"),
}
SLOT_S = 1.0  # each malformed body is served for this long


def make_app(*, mode: str, retry_after: str) -> web.Application:
    posts: list[float] = []
    served: dict[str, int] = dict.fromkeys(MALFORMED_MEMBERS, 0)
    kinds = list(MALFORMED_MEMBERS)
    started = time.monotonic()
    members_at: dict[str, float] = {}  # "first" and "latest" GET /v1/members (monotonic)

    async def members(request: web.Request) -> web.Response:
        now = time.monotonic()
        members_at.setdefault("first", now)
        members_at["latest"] = now
        if mode == "full-inbound":
            return web.json_response({"node_id": "fake", "members": []})
        kind = kinds[int((now - started) / SLOT_S) % len(kinds)]
        served[kind] += 1
        content_type, body = MALFORMED_MEMBERS[kind]
        return web.Response(status=200, body=body, headers={"Content-Type": content_type})

    async def urls(request: web.Request) -> web.Response:
        await request.read()
        posts.append(time.time())
        return web.json_response({"error": "inbound_full"}, status=429, headers={"Retry-After": retry_after})

    async def stats(request: web.Request) -> web.Response:
        now = time.monotonic()
        return web.json_response({
            "posts": posts,
            "members_served": served,
            "members_for_s": now - members_at["first"] if members_at else None,
            "members_idle_s": now - members_at["latest"] if members_at else None,
        })

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/v1/members", members)
    app.router.add_post("/v1/urls", urls)
    app.router.add_get("/_fake/stats", stats)
    app.router.add_get("/healthz", healthz)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("retry_after", help="Retry-After of the 429 answers to POST /v1/urls")
    parser.add_argument("--mode", choices=("full-inbound", "malformed-members"), default="full-inbound")
    args = parser.parse_args()
    app = make_app(mode=args.mode, retry_after=args.retry_after)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
