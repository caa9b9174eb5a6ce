"""The API's listening socket: aiohttp's server with a read timeout and a bound on connections.

aiohttp's server has neither a request-header timeout nor a connection limit of its own. Its
keep-alive timer comes close to the first: it is armed when a connection opens and again after
each response, is not pushed back by bytes that arrive, and closes the connection if no whole
request has arrived when it fires. Set to the read timeout, it closes a client that drips its
headers (slowloris) as surely as an idle one. Bodies are read by the handlers under the same
timeout (api.app.read_body). The connection bound is the protocol factory below: past it a new
connection gets a 503 and is closed at once, so a flood costs a file descriptor for a moment,
never a handler. A request aiohttp cannot parse is the client's fault (answered 400): it is not
logged as an error with the parser's traceback, which any client could fill the log with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("crawler_node.api")

MAX_CONNECTIONS = 1000  # open API connections; peers keep a few each, dashboards and CLIs one
_BUSY_TEXT = b"too many connections to this node\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\nConnection: close\r\n"
         b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT))


class _ClientErrors(logging.Filter):
    """aiohttp logs a request it could not parse at ERROR, with the parser's traceback. Such a
    request becomes one line at DEBUG (dropped unless the log is that verbose); a handler's own
    exception (a 500) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        record.msg, record.args = "%s: %s %s", (record.getMessage(), type(exc).__name__, exc.code)
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return log.isEnabledFor(logging.DEBUG)


_server_log = logging.getLogger("crawler_node.api.server")
_server_log.addFilter(_ClientErrors())


class _Refuse(asyncio.Protocol):
    """A connection past the bound: told so, and closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: uvloop's is no asyncio.Transport subclass (an isinstance check
        # failed there, and each connection past the bound was reset with a traceback).
        cast(asyncio.WriteTransport, transport).write(_BUSY)
        transport.close()


class ApiListener:
    def __init__(self, *, app: web.Application, host: str, port: int, read_timeout_s: float,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        if read_timeout_s <= 0 or max_connections < 1:
            raise ValueError("need read_timeout_s > 0 and max_connections >= 1")
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=read_timeout_s,
                                     logger=_server_log)
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._server: asyncio.base_events.Server | None = None
        self.refused = 0  # connections turned away at the bound

    async def start(self) -> int:
        """Listen; returns the bound port. Raises OSError when the address cannot be had."""
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self._host, self._port, reuse_address=True,
                                                backlog=128)
        return self._server.sockets[0].getsockname()[1]

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        if len(server.connections) >= self._max_connections:
            self.refused += 1
            if self.refused in (1, 100) or self.refused % 10_000 == 0:
                log.warning("%d API connections open: refusing new ones (%d so far)",
                            self._max_connections, self.refused)
            return _Refuse()
        return server()

    async def close(self) -> None:
        # Stop accepting first, then let aiohttp finish or close what is open.
        if self._server is not None:
            self._server.close()
        await self._runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
