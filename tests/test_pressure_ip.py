"""Per-IP politeness for direct fetches: hosts that resolve to one address share its limit.

testweb is reached as a proxy, and with a proxy there is no per-IP limit (the node never
learns the sites' addresses), so this test serves pages itself: a small origin server on
127.0.0.1 answering for any Host, reached directly as two hosts, ``localhost:PORT`` and
``127.0.0.1:PORT``. The server records how many requests it had in flight at once."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from aiohttp import web
from conftest import read_crawl_log

PAGES = 20
LATENCY_S = 0.1


class OriginServer:
    """Serves / (linking /p/0 .. /p/N-1) and the pages, for any Host, with a fixed latency."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.peak_by_host: dict[str, int] = {}
        self._in_flight_by_host: dict[str, int] = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="origin", daemon=True)
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        host = request.host
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self._in_flight_by_host[host] = self._in_flight_by_host.get(host, 0) + 1
        self.peak_by_host[host] = max(self.peak_by_host.get(host, 0), self._in_flight_by_host[host])
        try:
            await asyncio.sleep(LATENCY_S)
            if request.path == "/":
                links = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(PAGES))
                return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
            if request.path.startswith("/p/"):
                return web.Response(text="<html><body>page</body></html>", content_type="text/html")
            return web.Response(status=404, text="not found")
        finally:
            self.in_flight -= 1
            self._in_flight_by_host[host] -= 1

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> OriginServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc_info) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def localhost_is_ipv4_loopback() -> bool:
    try:
        return socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.1"
    except OSError:
        return False


@pytest.mark.skipif(not localhost_is_ipv4_loopback(), reason="'localhost' does not resolve to 127.0.0.1 first here")
def test_hosts_on_one_address_share_its_limit(start_node):
    for ip_limit, name in ((2, "limited"), (0, "unlimited")):
        with OriginServer() as origin:
            seeds = [f"http://localhost:{origin.port}/", f"http://127.0.0.1:{origin.port}/"]
            node = start_node(name, seeds=seeds, extra_args=[
                "--allow-private", "--ip-inflight-limit", str(ip_limit),
                "--host-limit-start", "4", "--host-limit-ceiling", "4"])
            status = node.wait_idle(timeout_s=30)
            node.stop()
            lines = read_crawl_log(node.data_dir)
            assert sum(line["status"] == 200 for line in lines) == 2 * (PAGES + 1)
            if ip_limit:
                # two hosts, one address: together never more than the address's limit
                assert origin.peak <= ip_limit, origin.peak
                assert status["ip"]["shared_addresses"] == 1
                assert status["ip"]["busiest"][0] == {"ip": "127.0.0.1", "in_flight": 0, "hosts": 2}
            else:
                # the control run: without the shared limit the two hosts do add up
                assert origin.peak > 2, origin.peak
                assert status["ip"]["enabled"] is False
