"""`crawler-node run`: the node as a process — settings in, signals handled, exit code out."""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from crawler_node.api.app import make_app
from crawler_node.api.listener import ApiListener
from crawler_node.api.status import cluster_status, heard_status, node_activity, node_status
from crawler_node.batch import IdleExit
from crawler_node.cluster.activity import Check, View, idle_check, view_of
from crawler_node.config import ConfigError, TestHooks
from crawler_node.datadir_layout import FRONTIER_FILENAME
from crawler_node.node.node import Node
from crawler_node.runtime.datadir import DataDirError, DiskFull, claim_data_dir
from crawler_node.runtime.eventloop import loop_factory
from crawler_node.runtime.frontier_guard import rebuild_hint
from crawler_node.runtime.gctune import tune_for_throughput
from crawler_node.runtime.identity import Identity, claim_identity, read_identity_or_none
from crawler_node.runtime.malloctune import keep_heap_for_reuse
from crawler_node.settings import Settings, SettingsError, listen_address
from crawler_node.tools.report import RateWindow, cluster_members, finished_log_line, progress_log_line

log = logging.getLogger("crawler_node.daemon")


IDLE_CHECK_S = 5.0  # how soon "crawl finished" is said, at most, once the cluster is idle


class ProgressLog:
    """The daemon's progress: a line every ``interval_s`` (fetched, the rate over that window,
    queued, finished / known), and one "crawl finished" line when the cluster becomes idle --
    never while a member that may hold work is down: then it says so, in those words.

    A member reads its peers' statuses only when their heartbeats' activity could change what it
    says (cluster.activity): not while the cluster is busy (a line is then made of what the
    heartbeats say: api.status.heard_status), and not again while all say what they said when a
    read found the cluster idle (the line is then that read's again)."""

    def __init__(self, node: Node, *, interval_s: float) -> None:
        self._node = node
        self._interval_s = interval_s
        self._rates = RateWindow()
        self._last_line = 0.0
        self._said: str | None = None  # the idle state last said, so each is said once
        self._idle_view: View | None = None  # the activities when a read last found the cluster idle
        self._idle_status: dict[str, Any] | None = None  # ... and what it read

    def start(self) -> None:
        self._last_line = time.monotonic()
        self._rates.rate("fetched", 0, self._last_line)
        self._node.supervisor.recurring("progress-log", self.round, every_s=min(IDLE_CHECK_S, self._interval_s))

    async def round(self) -> None:
        now = time.monotonic()
        line_due = now - self._last_line >= self._interval_s
        local = await node_status(self._node)
        if not line_due and not local["idle"]:
            self._said = None  # busy here: the cluster is not idle, no need to ask the others
            return
        cluster = self._node.cluster
        view = None
        if not cluster.is_single:
            peers = cluster.peer_activity()
            check = Check.BUSY
            if local["idle"]:
                view = view_of(node_activity(self._node), peers)
                check = idle_check(view, self._idle_view)
            if check is Check.UNCHANGED and self._idle_status is not None:
                if line_due:
                    self._line(self._idle_status, now)
                return
            if check is Check.BUSY:
                self._said = None  # busy here, or a peer's heartbeat says it is
                if not line_due:
                    return
                # the line from what the heartbeats say, when that is enough (no pause, and
                # every peer's activity known): no read of the statuses while crawling either
                heard = heard_status(local, peers)
                if heard is not None:
                    self._line(heard, now)
                    return
        try:
            status = await cluster_status(self._node, local)
        except RecursionError:
            # A peer's status nested past the JSON decoder's limit (a hostile or broken member):
            # cluster.peer_statuses lets that error through. Say so in one line, ask again later.
            log.warning("progress: a member's status could not be read (nested too deeply); skipped this round")
            return
        if line_due:
            self._line(status, now)
        state = status.get("crawl_state", "")
        idle = state == "idle"
        self._idle_view, self._idle_status = (view, status) if idle and view is not None else (None, None)
        if not state.startswith("idle"):
            self._said = None
        elif state != self._said and any(member.get("fetched") for member in cluster_members(status)):
            self._said = state
            if idle:
                log.info("%s", finished_log_line(status))
            else:
                log.warning("%s", state)

    def _line(self, status: dict[str, Any], now: float) -> None:
        window_s = now - self._last_line
        self._last_line = now
        rate = self._rates.rate("fetched", status["counters"]["fetched"], now)
        log.info("%s", progress_log_line(status, rate, window_s))


def open_cluster_refusal(settings: Settings) -> str | None:
    """Why this node must not start: peer endpoints open to anyone, not asked for. None: fine."""
    if (settings.peers or settings.peer_dns) and not settings.secret and not settings.insecure_open_cluster:
        return ("a node with peers (--peer or --peer-dns) needs --secret (or CRAWLER_SECRET): without it anyone "
                "who reaches this port can join, take an arc of the crawl, or mark URLs seen; "
                "--insecure-open-cluster starts it open anyway")
    return None


def _has_contact(user_agent: str) -> bool:
    """A contact URL or address in the user agent, and not the placeholder of the default."""
    return ("http://" in user_agent or "https://" in user_agent or "@" in user_agent) \
        and "example.invalid" not in user_agent


async def serve(settings: Settings) -> int:
    if (refusal := open_cluster_refusal(settings)) is not None:
        log.error("%s", refusal)
        return 2
    if (settings.peers or settings.peer_dns) and not settings.secret:
        log.warning("--insecure-open-cluster: the peer endpoints (join, leave, members, forwarded URLs) are open "
                    "to anyone who can reach %s", settings.listen)
    if settings.proxy is None and not _has_contact(settings.user_agent):
        log.warning("the user agent %r names no way to reach you (a +https://... page or an email): site "
                    "operators who see this crawler cannot contact its operator; set --user-agent", settings.user_agent)
    try:
        lock = claim_data_dir(settings.data_dir)
    except DataDirError as exc:
        log.error("%s", exc)
        return 2
    try:
        if (refusal := _claim_identity(settings)) is not None:
            log.error("%s", refusal)
            return 2
        return await _serve(settings)
    finally:
        lock.release()


def _claim_identity(settings: Settings) -> str | None:
    data_dir = Path(settings.data_dir)
    before = read_identity_or_none(data_dir)
    refusal = claim_identity(data_dir, Identity(settings.node_id, settings.crawl_name), rename=settings.rename_node,
                             clustered=bool(settings.peers or settings.peer_dns))
    if refusal is None and before is not None and before.node_id != settings.node_id:
        log.warning("--rename-node: data directory %s renamed from node %r to %r", data_dir, before.node_id,
                    settings.node_id)
    return refusal


async def _serve(settings: Settings) -> int:
    try:  # the tests' hooks (config.TestHooks) come with the environment
        config = settings.node_config(hooks=TestHooks.from_env())
    except (SettingsError, ConfigError) as exc:
        log.error("%s", exc)
        return 2
    node = Node(config)
    try:
        await node.start()
    except DataDirError as exc:
        # A part of the data directory the checks before could not see, or a disk full already.
        if isinstance(exc, DiskFull):
            node.fail(exc)  # says it, once
        else:
            log.error("%s", exc)
        await node.stop()
        return 1 if isinstance(exc, DiskFull) else 2
    except sqlite3.DatabaseError as exc:
        # A page of the frontier the start-up guard did not read is damaged (garbage written
        # into the middle of the file): one line that says how to go on, not a traceback.
        log.error("the frontier %s is damaged: %s. %s", node.data_dir / FRONTIER_FILENAME, exc,
                  rebuild_hint(node.data_dir))
        try:
            await node.stop()
        except Exception as stop_error:  # noqa: BLE001 - the stop meets the same damage: said once above
            log.debug("stop after a damaged frontier: %r", stop_error)
        return 2
    host, port = listen_address(settings.listen)
    listener = ApiListener(app=make_app(node), host=host, port=port, read_timeout_s=settings.api_read_timeout_s)
    try:
        bound_port = await listener.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", settings.listen, exc)
        await listener.close()
        await node.stop()
        return 1
    print(f"crawler-node {settings.node_id} listening on http://{host}:{bound_port}", flush=True)
    if settings.progress_interval_s:
        ProgressLog(node, interval_s=settings.progress_interval_s).start()
    idle_exit = None
    if settings.exit_when_idle:
        idle_exit = IdleExit(node, timeout_s=settings.idle_timeout_s, has_seeds=bool(settings.seeds))
        idle_exit.start()

    loop = asyncio.get_running_loop()
    # POST /v1/control/stop (api.control) calls the same request_stop: one way to stop.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, node.request_stop)
    await node.wait_stop_requested()
    if isinstance(node.fatal_error, DiskFull):
        log.info("stopping: nothing more can be written; the pages not stored are fetched again next run")
    else:
        log.info("stopping: returning unfinished work to the frontier and flushing the store")
    await node.stop(hand_off=idle_exit is not None and idle_exit.hand_off)
    await listener.close()
    if idle_exit is not None:
        idle_exit.after_stop()
    if isinstance(node.fatal_error, DiskFull):
        return 1  # said when it happened, in the one line an operator needs
    if node.fatal_error is not None:
        log.error("node stopped after a fatal error: %r", node.fatal_error)
        return 1
    log.info("stopped cleanly")
    return idle_exit.exit_code if idle_exit is not None and idle_exit.exit_code is not None else 0


def run(settings: Settings, *, log_level: str = "INFO") -> int:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format=f"%(asctime)s {settings.node_id} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    tune_for_throughput()
    keep_heap_for_reuse()
    try:
        name, factory = loop_factory(settings.event_loop)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    log.info("event loop: %s", name)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(serve(settings))
