"""A stand-in cluster member whose inbound is always full: heartbeats answer, POST /v1/urls
answers 429 with Retry-After. Run as a script: python fake_peer.py HOST PORT RETRY_AFTER"""

import sys
import time

from aiohttp import web


def main() -> None:
    host, port, retry_after = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    posts: list[float] = []

    async def members(request):
        return web.json_response({"node_id": "fake", "members": []})

    async def urls(request):
        await request.read()
        posts.append(time.time())
        return web.json_response({"error": "inbound_full"}, status=429, headers={"Retry-After": retry_after})

    async def stats(request):
        return web.json_response({"posts": posts})

    async def healthz(request):
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/v1/members", members)
    app.router.add_post("/v1/urls", urls)
    app.router.add_get("/_fake/stats", stats)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host=host, port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
