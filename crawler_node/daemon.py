"""`crawler-node run`: the node as a process — settings in, signals handled, exit code out."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from crawler_node.api.app import make_app
from crawler_node.node.node import Node
from crawler_node.runtime.gctune import tune_for_throughput
from crawler_node.runtime.malloctune import keep_heap_for_reuse
from crawler_node.settings import Settings, listen_address

log = logging.getLogger("crawler_node.daemon")


async def serve(settings: Settings) -> int:
    node = Node(settings)
    await node.start()
    runner = web.AppRunner(make_app(node), access_log=None, handle_signals=False)
    await runner.setup()
    host, port = listen_address(settings.listen)
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", settings.listen, exc)
        await node.stop()
        return 1
    bound_port = runner.addresses[0][1] if runner.addresses else port
    print(f"crawler-node {settings.node_id} listening on http://{host}:{bound_port}", flush=True)

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, node.request_stop)
    await node.wait_stop_requested()
    log.info("stopping: returning unfinished work to the frontier and flushing the store")
    await node.stop()
    await runner.cleanup()
    if node.fatal_error is not None:
        log.error("node stopped after a fatal error: %r", node.fatal_error)
        return 1
    log.info("stopped cleanly")
    return 0


def run(settings: Settings, *, log_level: str = "INFO") -> int:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format=f"%(asctime)s {settings.node_id} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    tune_for_throughput()
    keep_heap_for_reuse()
    return asyncio.run(serve(settings))
