"""Async HTTP client for the tool server's contract (``tool_server/app.py``), independent of verl.

Both verl's ``BaseTool`` wrappers and our own agent loop talk to the server through this one client, so the
contract (paths, bodies, the ``{"error": {type, message, field}}`` shape) is spelled out in one place. Errors are
split by whose fault they are: :class:`ToolCallError` (a 4xx: the caller's arguments or session were wrong; show it
to the policy) and :class:`ToolServerUnavailable` (timeouts, refused connections, 5xx: infrastructure).
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import aiohttp
from PIL import Image


BUSY_FIRST_DELAY_S, BUSY_MAX_DELAY_S = 0.05, 2.0  # backoff of a session open the server is too busy to read
RETRY_LATER = frozenset({"server_busy", "client_quota", "image_process_failed"})  # "retry later", not "never"


class ToolServerError(Exception):
    """Any failure talking to the tool server; ``type``/``field`` mirror the server's error body."""

    def __init__(self, type: str, message: str, field: str | None = None, status: int | None = None) -> None:
        super().__init__(f"{type}: {message}" + (f" (field {field})" if field else ""))
        self.type = type
        self.message = message
        self.field = field
        self.status = status


class ToolCallError(ToolServerError):
    """The server refused the request (4xx): bad arguments, unknown image token or tool, expired session."""


class ToolServerUnavailable(ToolServerError):
    """No usable answer: connection failure, timeout, 5xx or a body that is not the contract's JSON."""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    images: list[str]  # register refs of the question images, in request order


@dataclass(frozen=True, slots=True)
class ImageResult:
    ref: str
    width: int
    height: int
    png: bytes | None  # only when the call asked for pixels


@dataclass(frozen=True, slots=True)
class CallResult:
    text: str
    images: list[ImageResult]
    records: list[dict[str, Any]]
    mei: list[dict[str, Any]]
    cached: bool


def _png(b64: str | None) -> bytes | None:
    return base64.b64decode(b64) if b64 is not None else None


class ToolServerClient:
    """One connection pool to one server; use as ``async with ToolServerClient(url) as c`` or call :meth:`close`.

    The aiohttp session is created on first use, inside the running event loop it will be bound to.
    """

    def __init__(
        self, base_url: str, *, timeout_s: float = 120.0, connect_timeout_s: float = 10.0, max_connections: int = 256
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections  # aiohttp's default of 100 would queue a worker's calls beyond it
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.busy_retries = 0  # session opens sent again after a 503 server_busy or a 429 client_quota

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = self._loop = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the pool is bound to (None before first use)."""
        return self._loop

    async def health(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """``GET /healthz`` with its own short timeout: is the server there at all (a probe, not a tool call)."""
        return await self._request("GET", "/healthz", timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def list_tools(self, protocol: str | None = None) -> list[dict[str, Any]]:
        params = {"protocol": protocol} if protocol else None
        return (await self._request("GET", "/v1/tools", params=params))["tools"]

    async def open_session(self, images: Sequence[str] = (), group_id: str | None = None) -> SessionInfo:
        """``images``: world image URLs or base64-encoded images; they become img_1.. in order. A 503 ``server_busy``
        (the server reads only so many large bodies at once, and refuses the rest before reading them) or a 429
        ``client_quota`` (this client holds its share of the server's bodies or images), or a 503
        ``image_process_failed`` (an image process died; the server replaced it) is sent again with exponential
        backoff until the client's timeout, then raised."""
        body: dict[str, Any] = {"images": list(images)}
        if group_id is not None:
            body["group_id"] = group_id
        deadline, delay = time.monotonic() + (self._timeout.total or 0.0), BUSY_FIRST_DELAY_S
        while True:
            try:
                data = await self._request("POST", "/v1/sessions", json=body)
                return SessionInfo(data["session_id"], list(data["images"]))
            except (ToolServerUnavailable, ToolCallError) as e:
                if e.type not in RETRY_LATER or time.monotonic() + delay > deadline:
                    raise
            self.busy_retries += 1
            await asyncio.sleep(delay)
            delay = min(2 * delay, BUSY_MAX_DELAY_S)

    async def close_session(self, session_id: str) -> None:
        await self._request("DELETE", f"/v1/sessions/{session_id}")

    async def call(
        self,
        session_id: str,
        name: str,
        arguments: Any,
        *,
        turn: int | None = None,
        include_pixels: bool = False,
    ) -> CallResult:
        body: dict[str, Any] = {"name": name, "arguments": arguments, "include_pixels": include_pixels}
        if turn is not None:
            body["turn"] = turn
        data = await self._request("POST", f"/v1/sessions/{session_id}/call", json=body)
        images = [ImageResult(i["ref"], i["width"], i["height"], _png(i.get("png_base64"))) for i in data["images"]]
        return CallResult(data["text"], images, data["records"], data["mei"], data["cached"])

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(limit=self.max_connections)
            )
            self._loop = asyncio.get_running_loop()
        try:
            async with self._http.request(method, self.base_url + path, **kwargs) as r:
                status = r.status
                try:
                    data = await r.json(content_type=None)
                except ValueError:
                    data = None
        except asyncio.TimeoutError:
            limit = kwargs.get("timeout", self._timeout).total
            raise ToolServerUnavailable("timeout", f"{method} {path} timed out after {limit}s") from None
        except aiohttp.ClientError as e:
            raise ToolServerUnavailable("connection_error", f"{method} {self.base_url}{path}: {e}") from None
        if not isinstance(data, dict):
            raise ToolServerUnavailable(
                "bad_response", f"{method} {path}: HTTP {status} without a JSON object", status=status
            )
        if status >= 400:
            err = data.get("error") if isinstance(data.get("error"), dict) else {}
            cls = ToolCallError if status < 500 else ToolServerUnavailable
            raise cls(err.get("type", "http_error"), err.get("message", f"HTTP {status}"), err.get("field"), status)
        return data


_SHARED: dict[tuple[str, float], ToolServerClient] = {}


def shared_client(base_url: str, timeout_s: float) -> ToolServerClient:
    """One pool per server, timeout and event loop, shared by every episode of a worker process.

    verl builds a new agent loop (and calls a new tool instance) per sample, so per-episode objects must not own
    connection pools; an aiohttp session is bound to the loop that made it, hence the loop check.
    """
    client = _SHARED.get((base_url, timeout_s))
    if client is None or client.loop not in (None, asyncio.get_running_loop()):
        client = _SHARED[(base_url, timeout_s)] = ToolServerClient(base_url, timeout_s=timeout_s)
    return client


async def close_shared_clients() -> None:
    """Close the pooled connections (worker shutdown); call from the event loop the episodes ran on."""
    clients = list(_SHARED.values())
    _SHARED.clear()
    for client in clients:
        await client.close()


def png_base64(image: Image.Image) -> str:
    """A PIL image as the base64 PNG the server's ``POST /v1/sessions`` accepts. zlib level 1: the same pixels
    (PNG is lossless) in about half the encode time of PIL's default 6, for a somewhat larger body; the encode is on
    every episode's path to its first turn."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode("ascii")
