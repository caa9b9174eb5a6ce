"""Helpers for cluster tests: several real nodes on distinct loopback addresses."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from pathlib import Path

import psutil
from conftest import read_crawl_log, wait_until  # noqa: F401 - wait_until re-exported for the cluster tests

from crawler_node.tools.node_process import NodeProcess, free_port

FAST_CLUSTER = ["--heartbeat-interval-s", "0.3", "--startup-grace-s", "2.5", "--retry-base-s", "0.1"]
# A node with peers refuses to start without a cluster secret (or --insecure-open-cluster).
SECURED = ["--secret", "cluster-test-token"]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def plan(ids: list[str], first_ip: int = 2) -> dict[str, tuple[str, int]]:
    """node id -> (loopback address, free port): 127.0.0.2, .3, ..."""
    addresses = {}
    for offset, node_id in enumerate(ids):
        host = f"127.0.0.{first_ip + offset}"
        addresses[node_id] = (host, free_port(host))
    return addresses


def peers_of(addresses: dict[str, tuple[str, int]]) -> dict[str, str]:
    return {node_id: f"http://{host}:{port}" for node_id, (host, port) in addresses.items()}


def get_json(url: str, timeout: float = 5.0) -> dict:
    with _OPENER.open(url, timeout=timeout) as response:
        return json.loads(response.read())


def owner_of(node: NodeProcess, host: str) -> str:
    return get_json(f"{node.url}/v1/ring?host={host}")["owner"]


def logged_urls(nodes: list[NodeProcess]) -> dict[str, list[dict]]:
    return {node.node_id: read_crawl_log(node.data_dir) for node in nodes}


def missing(nodes: list[NodeProcess], expected: set[str]) -> str:
    """'' when every expected URL is in some node's crawl.log; else which are not, with what
    each node's frontier says of them (state, attempts, outbox, replica), to tell a URL that
    was dropped from one that was marked seen or is still owed to a peer."""
    seen = set()
    for data_dir in {node.data_dir for node in nodes}:
        seen.update(line["url"] for line in read_crawl_log(Path(data_dir)))
    lost = sorted(expected - seen)
    if not lost:
        return ""
    report = [f"{len(lost)} of {len(expected)} URLs never fetched"]
    for node in nodes:
        with sqlite3.connect(f"file:{Path(node.data_dir) / 'frontier.sqlite3'}?mode=ro", uri=True) as db:
            for url in lost[:5]:
                report.append(
                    f"  {node.node_id} {url}: urls(state, attempts, hops)="
                    f"{db.execute('SELECT state, attempts, hops FROM urls WHERE url = ?', (url,)).fetchall()}"
                    " outbox(peer, seen)="
                    f"{db.execute('SELECT peer, seen FROM outbox WHERE url = ?', (url,)).fetchall()}"
                    f" replica={bool(db.execute('SELECT 1 FROM replica WHERE url = ?', (url,)).fetchall())}")
    return "\n".join(report)


def cluster_idle(node: NodeProcess) -> bool:
    try:
        return node.status()["idle"] is True
    except Exception:  # noqa: BLE001 - a node may be restarting
        return False


def kill_and_reap(node: NodeProcess) -> None:
    """SIGKILL the node and wait for its workers (parser, store) to go too, so a restart finds
    its data directory free; a worker that outlives its node is killed by PID."""
    assert node.pid is not None
    workers = psutil.Process(node.pid).children()
    node.kill()
    try:
        wait_until(lambda: not any(_alive(worker) for worker in workers), 10, "the killed node's workers to exit",
                   interval=0.01)
    finally:
        for worker in workers:
            if _alive(worker):
                worker.kill()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
