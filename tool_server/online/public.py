"""Session images exposed at a public URL for exactly as long as a reverse-image API needs to fetch them.

A Lens-style API takes the *URL* of the query image and fetches it itself, so an image that exists only in a
session's visual register (a question image sent as base64, a crop) has to be reachable from the internet for the
length of the call. The operator names the server's public base URL (``--public-base-url``, e.g. the address of a
reverse proxy in front of the tool server); :meth:`PublicImages.exposed` publishes the PNG under an unguessable
one-off name below ``/v1/public-images/`` and withdraws it when the call returns, so nothing stays readable.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from tool_server.errors import ToolError

PUBLIC_PATH = "/v1/public-images/"


class PublicImages:
    def __init__(self, base_url: str, *, ttl_s: float = 120.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"public base URL must be http(s)://..., got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._ttl_s = ttl_s  # upper bound, should a call be cancelled between publish and withdraw
        self._images: dict[str, tuple[bytes, float]] = {}

    def __len__(self) -> int:
        return len(self._images)

    @asynccontextmanager
    async def exposed(self, png: bytes) -> AsyncIterator[str]:
        """The public URL of ``png`` while the block runs."""
        now = time.monotonic()
        for stale in [k for k, (_, expiry) in self._images.items() if expiry < now]:
            del self._images[stale]
        name = secrets.token_urlsafe(24) + ".png"
        self._images[name] = (png, now + self._ttl_s)
        try:
            yield f"{self.base_url}{PUBLIC_PATH}{name}"
        finally:
            self._images.pop(name, None)

    async def handle(self, request: web.Request) -> web.Response:
        """``GET /v1/public-images/{name}``: the PNG while its reverse search runs, else 404."""
        item = self._images.get(request.match_info["name"])
        if item is None or item[1] < time.monotonic():
            raise ToolError("not_found", "no such image: public images exist only while a reverse search runs")
        return web.Response(body=item[0], content_type="image/png", headers={"Cache-Control": "no-store"})
