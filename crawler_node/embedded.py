"""The Python API: a single-node crawl inside your asyncio program, its pages as an async iterator.

    from crawler_node import Crawl, make_settings

    settings = make_settings(seeds=["https://docs.example.org/"], data_dir="./data", max_depth=3)
    async with Crawl(settings) as crawl:
        async for page in crawl:
            print(page.status, page.url, len(page.links))

The node is the daemon's (node.Node), without its HTTP API: the same frontier, politeness, store
(WARC, crawl.log, items) and durable totals. Each fetch attempt of a page reaches the iterator
once it is stored and committed, through a queue of ``buffer`` pages; a consumer slower than the
crawl fills it, and then the store stage waits for room, which fills the store queue, which stops
the parsers, which stops the fetches (rule 1): a slow consumer slows the crawl and never grows a
queue. The iteration ends when the node is idle and every page was taken; leaving the ``async
with`` early stops the node (what was not taken is stored all the same).
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from crawler_node.core.encoding import decode_body
from crawler_node.node.node import Node
from crawler_node.node.stage_items import PageResult
from crawler_node.runtime.datadir import DataDirLock, claim_data_dir
from crawler_node.settings import Settings, SettingsError, settings_fields
from crawler_node.settings_sources import load_settings

IDLE_CHECK_S = 0.2  # how often the node is asked whether it is done, once the queue is empty


def make_settings(**values: Any) -> Settings:
    """Settings built in code as the command line builds them from its flags, by the same
    names (``seeds=[...]``, ``max_depth=3``, ``pace="adaptive"``): each value checked and
    coerced (``data_dir="./data"`` is a Path), an unknown name an error that names the nearest,
    and the pace's preset filling the host limits not given (``Settings(pace=...)`` alone does
    not: it is the flat record). The environment is not read."""
    known = [f.name for f in settings_fields()]
    for name in values:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise SettingsError(f"unknown setting {name!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    return load_settings(values, env={})


@dataclass(frozen=True, slots=True)
class Page:
    """One fetch attempt of a page, as stored: ``status`` None when no HTTP answer came (then
    ``error`` says why). ``body`` is as the server sent it (still content-encoded: ``decoded``
    undoes that); ``items`` the pipelines' items of the page; ``links`` its links in scope."""

    url: str
    status: int | None
    outcome: str
    depth: int
    attempt: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    content_type: str | None
    content_encoding: str | None
    error: str | None
    links: tuple[str, ...]
    items: tuple[Any, ...]

    def decoded(self, limit: int = 64 << 20) -> bytes:
        """The body with its Content-Encoding undone (at most ``limit`` bytes)."""
        return decode_body(self.body, self.content_encoding, limit).body

    @classmethod
    def of(cls, page: PageResult) -> Page:
        fetch, lease = page.fetch, page.lease
        return cls(url=lease.url, status=fetch.status, outcome=str(page.verdict.signal.outcome), depth=lease.depth,
                   attempt=lease.attempts, headers=tuple(fetch.headers), body=fetch.body,
                   content_type=fetch.content_type, content_encoding=fetch.content_encoding,
                   error=fetch.error_detail, links=tuple(entry.url for entry in page.links),
                   items=tuple(json.loads(item) for item in page.items))


class Crawl:
    """A single-node crawl run inside the caller's event loop (see the module's docstring)."""

    def __init__(self, settings: Settings, *, buffer: int = 16) -> None:
        """``settings``: built in code (``make_settings(seeds=[...], ...)``) or loaded
        (settings_sources.load_settings); checked here. ``buffer``: pages taken from the store
        and not yet by the iterator, at most."""
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        if settings.peers or settings.peer_dns:
            raise ValueError("Crawl runs one node: for a cluster, run crawler-node run with --peer")
        self._settings = settings.validate()
        self._config = self._settings.node_config()
        self._queue: asyncio.Queue[Page | None] = asyncio.Queue(maxsize=buffer)
        self._node: Node | None = None
        self._lock: DataDirLock | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closing = False
        self._error: BaseException | None = None  # why the crawl ended early (raised by the iterator)
        self.delivered = 0

    @property
    def node(self) -> Node:
        """The running node (its ``snapshot()`` is what GET /v1/status shows)."""
        if self._node is None:
            raise RuntimeError("the crawl is not running: use it as `async with Crawl(settings) as crawl`")
        return self._node

    @property
    def buffered(self) -> int:
        """Pages waiting for the iterator now (never more than ``buffer``)."""
        return self._queue.qsize()

    async def __aenter__(self) -> Crawl:
        self._lock = await asyncio.to_thread(claim_data_dir, self._settings.data_dir)
        node = self._node = Node(self._config)
        node.store.deliver = self._deliver
        try:
            await node.start()
        except BaseException:
            await node.stop()
            self._lock.release()
            raise
        self._watch = asyncio.create_task(self._watch_idle(), name="crawl-idle-watch")
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self._closing = True
        while not self._queue.empty():  # a store batch waiting for room goes on, and stops
            self._queue.get_nowait()
        if self._watch is not None:
            self._watch.cancel()
        try:
            if self._node is not None:
                await self._node.stop()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __aiter__(self) -> Crawl:
        return self

    async def __anext__(self) -> Page:
        page = await self._queue.get()
        if page is None:
            if self._error is not None:
                raise RuntimeError(f"the crawl stopped: {self._error!r}") from self._error
            raise StopAsyncIteration
        return page

    async def _deliver(self, pages: Sequence[PageResult]) -> None:
        """The store stage's hand-over, after each batch is committed: awaited, so a full
        queue holds the store stage (and behind it the whole pipeline)."""
        for page in pages:
            if self._closing:
                return
            fetch = page.fetch
            if page.kind == "robots" or (fetch.status is None and fetch.error is None):
                continue  # robots.txt, and URLs ended without a request (robots.txt, a dropped host)
            await self._queue.put(Page.of(page))
            self.delivered += 1

    async def _watch_idle(self) -> None:
        """The end: the node idle (nothing queued, leased or in flight, the store included)
        once every page was taken; then the iterator's end mark. A failure here, or a node
        that stopped on a fatal error, ends the iteration with that error, never a hang."""
        node = self.node
        try:
            while node.fatal_error is None:
                await asyncio.sleep(IDLE_CHECK_S)
                if self._queue.empty() and (await node.snapshot()).idle and self._queue.empty():
                    break
            else:
                self._error = node.fatal_error
        except Exception as exc:  # noqa: BLE001 - handed to the iterator, raised there
            self._error = exc
        await self._queue.put(None)
