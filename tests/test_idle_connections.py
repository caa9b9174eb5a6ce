"""A crawl over many hosts keeps a bounded number of idle connections open.

aiohttp pools keep-alive connections per target host and does not count idle ones against its
limit, so a node crawling many hosts kept one socket open per host it fetched from in the last
keep-alive period (15 s): ~20,000 at 2,000 hosts/s, through a proxy as directly. That runs a
node into RLIMIT_NOFILE (1,024 by default under many service managers) and holds a proxy's
sockets for nothing. `--keepalive-hosts N` bounds the hosts whose idle connections are kept; the
least recently released are closed first.

What the server observed decides: the sockets testweb (the proxy here, kept alive) has open
from the node, sampled while the node crawls 1,500 one-page hosts and after it is idle.
"""

from __future__ import annotations

import json
import time
import urllib.request

import psutil
import pytest

HOSTS = 1_500
KEEPALIVE_HOSTS = 40
GLOBAL_INFLIGHT = 32
# Sockets in use by requests (at most the in-flight slots, robots.txt included) and the idle
# ones kept, plus a margin for connections closing as a sample is taken.
BOUND = GLOBAL_INFLIGHT + KEEPALIVE_HOSTS + 16
CRAWL_TIMEOUT_S = 120.0
SAMPLE_S = 0.05
TESTWEB_ARGS = ["--images", "0", "--cross-link-prob", "0", "--history", "0"]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def connections_from(server_pid: int, server_port: int, client_pid: int) -> int:
    """Established TCP connections to the server's port whose other end is the client's."""
    client_ports = {c.laddr.port for c in psutil.Process(client_pid).net_connections(kind="tcp")
                    if c.raddr and c.raddr.port == server_port and c.status == psutil.CONN_ESTABLISHED}
    return sum(1 for c in psutil.Process(server_pid).net_connections(kind="tcp")
               if c.laddr.port == server_port and c.raddr and c.raddr.port in client_ports
               and c.status == psutil.CONN_ESTABLISHED)


def submit(node_url: str, urls: list[str]) -> None:
    request = urllib.request.Request(f"{node_url}/v1/urls", data=json.dumps({"urls": urls}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=30) as response:
        answer = json.load(response)
    assert answer["accepted"] == len(urls), answer


@pytest.mark.timeout(300)
def test_a_crawl_of_many_hosts_keeps_at_most_keepalive_hosts_idle_connections(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=1, extra_args=TESTWEB_ARGS)
    node = start_node(proxy=web.url, extra_args=["--keepalive-hosts", str(KEEPALIVE_HOSTS),
                                                 "--global-inflight", str(GLOBAL_INFLIGHT)])
    assert node.pid is not None
    submit(node.url, [f"http://site-{k}.test/" for k in range(HOSTS)])

    peak, samples = 0, 0
    deadline = time.monotonic() + CRAWL_TIMEOUT_S
    while True:
        totals = web.stats(summary=True)["totals"]
        fetched = totals["urls"] - totals["robots_urls"]
        peak = max(peak, connections_from(web.pid, web.port, node.pid))
        samples += 1
        if fetched >= HOSTS:
            break
        assert time.monotonic() < deadline, f"{fetched} of {HOSTS} hosts fetched in {CRAWL_TIMEOUT_S:g} s"
        time.sleep(SAMPLE_S)
    status = node.wait_idle(timeout_s=60)
    after = connections_from(web.pid, web.port, node.pid)

    assert status["frontier"]["queued"] == 0
    assert samples >= 3, "the crawl ended before the connections could be sampled"
    assert peak <= BOUND, f"the node held up to {peak} connections open to the proxy (bound {BOUND})"
    # Idle, only the kept ones remain (within keep-alive time, before aiohttp's own cleanup).
    assert after <= KEEPALIVE_HOSTS, f"{after} connections left open once idle (kept at most {KEEPALIVE_HOSTS})"
