"""Client connections on a budget: a cap on open connections and idle timeouts, set by the server.

aiohttp's ``AppRunner`` keeps an idle connection for 3,630 s and accepts every connection: 1,100 idle sockets against
a 1,024 file limit made every new client fail with resets. Here a connection over the cap gets one 503 JSON answer
and is closed at once (its file descriptor freed; the open connections keep working), one idle longer than the
keep-alive timeout is closed, and one that started a request but has not finished its headers within the header
timeout is cut (a client trickling a header byte at a time). aiohttp's own answers to requests it cannot parse (a bad
request line, a header over its size limit) are our JSON error body, not its plain text.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from tool_server.errors import ToolError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    """``max_connections``: open client connections of one listening process; ``keepalive_s``: how long a connection
    may wait with no request (from its start or its last answer); ``header_timeout_s``: how long a request's headers
    may take from their first byte; ``drain_s``: how long requests in flight at SIGTERM may take to finish before
    their connections are closed (aiohttp's own 60 s outlasts the 30 s that ``launch.served``, the Ray fleet and
    process managers wait before killing, which would skip the server's cleanup)."""

    max_connections: int = 4096
    keepalive_s: float = 75.0
    header_timeout_s: float = 10.0
    drain_s: float = 10.0


def _refusal(limit: int) -> bytes:
    """The whole HTTP answer to a connection over the cap: our JSON error body, then the server closes."""
    body = json.dumps(
        {
            "error": {
                "type": "too_many_connections",
                "message": f"the server holds its cap of {limit} open connections; retry shortly",
                "field": None,
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode() + body


# aiohttp's own error answers (a request it could not parse, a handler that failed or timed out) by status
_AIOHTTP_ERROR_TYPES = {400: "bad_http_request", 413: "body_too_large", 500: "internal_error", 504: "timeout"}


def _json_error(status: int, message: str | None) -> web.Response:
    """Our error body for one of aiohttp's own error answers (it closes the connection, as aiohttp's does)."""
    type_ = _AIOHTTP_ERROR_TYPES.get(status, "http_error")
    error = ToolError(type_, message or HTTPStatus(status).phrase)  # clips a message quoting the client's bytes
    response = web.json_response({"error": error.to_json()}, status=status)
    response.force_close()
    return response


class _Handler(RequestHandler):
    """aiohttp's connection handler with a deadline on a request's headers, armed by its first bytes (aiohttp's own
    keep-alive timer covers a connection that sends nothing), and JSON error bodies for aiohttp's own errors."""

    def __init__(self, manager: GuardedServer, *, header_timeout_s: float, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._header_deadline: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count > before:
            self._disarm()
        elif self._header_deadline is None and self._idle():
            count = self._request_count
            self._header_deadline = self._loop.call_later(self._header_timeout_s, self._headers_late, count)

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # its logging, and its refusal once bytes were sent
        return _json_error(status, message if status < 500 else None)  # a 5xx message may hold a traceback

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _idle(self) -> bool:
        """Waiting for a request (not reading a body of one being handled)."""
        return not self._request_in_progress and not self._messages

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self, count: int) -> None:
        self._header_deadline = None
        if self._request_count == count and self._idle():
            self.force_close()


class GuardedServer(web.Server):
    """aiohttp's server with :class:`ConnectionLimits`: refuses connections over the cap, times out slow headers."""

    def __init__(self, *args, limits: ConnectionLimits, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.refused = 0

    def __call__(self) -> RequestHandler:
        return _Handler(
            self, loop=self._loop, header_timeout_s=self.limits.header_timeout_s, **self._kwargs
        )

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if len(self._connections) < self.limits.max_connections:
            super().connection_made(handler, transport)
            return
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning("%d connections refused at the cap of %d", self.refused, self.limits.max_connections)
        transport.write(_refusal(self.limits.max_connections))
        handler.force_close()  # closes the transport once the answer is written; the handler never starts


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server applies ``limits`` (aiohttp's runner takes no server class, so the one it
    built is rebuilt as a :class:`GuardedServer` with the same handler and arguments)."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs) -> None:
        super().__init__(app, keepalive_timeout=limits.keepalive_s, shutdown_timeout=limits.drain_s, **kwargs)
        self._limits = limits

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        return GuardedServer(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            limits=self._limits,
            **server._kwargs,
        )
