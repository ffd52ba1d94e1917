"""The aiohttp application: health, metrics, tool schemas, sessions and tool calls.

Every failure is a JSON body ``{"error": {"type", "message", "field"}}``: bad input is a 4xx naming the offending
field; an unexpected exception is a 500 with a generic message (details go to the log, never to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tool_server.cache import TieredCache
from tool_server.errors import ToolError
from tool_server.loop import loop_name
from tool_server.mei.schema import EvidenceInterface
from tool_server.metrics import Metrics
from tool_server.offline.pixels import DEFAULT_MAX_PIXELS, decode_base64_image, set_pil_pixel_limit
from tool_server.offline.world import OfflineWorld
from tool_server.online.public import PUBLIC_PATH
from tool_server.online.web import OnlineBackends
from tool_server.protocol import PROTOCOL_OF, tool_schemas
from tool_server.sessions import SessionStore
from tool_server.tools import ToolContext, ToolRunner
from tool_server.tools.ops import load_image

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 2**20  # question images arrive base64 in the session body


@dataclass(frozen=True, slots=True)
class ServerSettings:
    session_ttl_s: float = 3600.0
    max_sessions: int = 100_000
    max_register_images: int = 512
    max_pixels: int = DEFAULT_MAX_PIXELS


def _error(status: int, type_: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"type": type_, "message": message, "field": field}}, status=status)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    metrics: Metrics = request.app[METRICS]
    try:
        return await handler(request)
    except ToolError as e:
        metrics.error(e.type)
        return web.json_response({"error": e.to_json()}, status=e.status)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        type_ = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(e.status, "http_error")
        metrics.error(type_)
        return _error(e.status, type_, e.reason or type_)
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        metrics.error("internal_error")
        return _error(500, "internal_error", "the server failed on this request; the failure has been logged")


async def _json_body(request: web.Request, *, optional: bool) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise ToolError("invalid_request", "request body must be a JSON object", "body")
    try:
        body = orjson.loads(raw)  # a fifth of json.loads' cost; NaN and Infinity are not JSON here either
    except orjson.JSONDecodeError as e:
        raise ToolError("invalid_request", f"request body is not valid JSON: {e}", "body") from None
    if not isinstance(body, dict):
        raise ToolError("invalid_request", "request body must be a JSON object", "body")
    return body


def _check_keys(body: dict[str, Any], allowed: set[str]) -> None:
    if extra := sorted(set(body) - allowed):
        raise ToolError(
            "invalid_request", f"unexpected field {extra[0]!r}; allowed: {', '.join(sorted(allowed))}", extra[0]
        )


async def healthz(request: web.Request) -> web.Response:
    world: OfflineWorld = request.app[WORLD]
    return web.json_response(
        {
            "status": "ok",
            "world": world.content_hash,
            "features_ready": world.features_ready(),
            "sessions": len(request.app[SESSIONS]),
            "event_loop": loop_name(),
        }
    )


async def metrics(request: web.Request) -> web.Response:
    cache: TieredCache | None = request.app[CACHE]
    mei, online = request.app[RUNNER].ctx.mei, request.app[RUNNER].ctx.online
    sessions: SessionStore = request.app[SESSIONS]
    text = request.app[METRICS].render(
        cache=cache.stats() if cache is not None else {},
        coalesced=cache.coalesced if cache is not None else 0,
        mei=mei.counters() if hasattr(mei, "counters") else {},
        sessions=len(sessions),
        evicted=sessions.evicted,
        online=online.counters() if online is not None else None,
    )
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Format": "0.0.4"})


async def tools(request: web.Request) -> web.Response:
    protocol = request.query.get("protocol")
    if protocol not in (None, "neos", "modalsearch"):
        raise ToolError("invalid_request", f"protocol must be neos or modalsearch, got {protocol!r}", "protocol")
    return web.json_response({"tools": tool_schemas(protocol)})


async def create_session(request: web.Request) -> web.Response:
    body = await _json_body(request, optional=True)
    _check_keys(body, {"images", "group_id"})
    images, group_id = body.get("images", []), body.get("group_id")
    settings: ServerSettings = request.app[SETTINGS]
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise ToolError("invalid_request", "images must be a list of base64 images or image URLs", "images")
    if len(images) > settings.max_register_images:
        raise ToolError("invalid_request", f"at most {settings.max_register_images} question images", "images")
    if group_id is not None and not isinstance(group_id, str):
        raise ToolError("invalid_request", "group_id must be a string", "group_id")
    ctx = request.app[RUNNER].ctx
    decoded = []
    for i, item in enumerate(images):
        if item.startswith(("http://", "https://")):
            decoded.append(((await load_image(ctx, item, f"images/{i}"))[1], item))
        else:
            pixels = await asyncio.to_thread(
                decode_base64_image, item, max_pixels=settings.max_pixels, field=f"images/{i}"
            )
            decoded.append((pixels, "question"))
    session = request.app[SESSIONS].create(group_id)
    refs = [session.register.append(pixels, source).ref for pixels, source in decoded]
    return web.json_response({"session_id": session.id, "images": refs})


async def delete_session(request: web.Request) -> web.Response:
    request.app[SESSIONS].delete(request.match_info["session_id"])
    return web.json_response({"deleted": request.match_info["session_id"]})


async def call_tool(request: web.Request) -> web.Response:
    start = time.perf_counter()
    session = request.app[SESSIONS].get(request.match_info["session_id"])
    body = await _json_body(request, optional=False)
    _check_keys(body, {"name", "arguments", "turn", "include_pixels"})
    name, turn, include_pixels = body.get("name"), body.get("turn"), body.get("include_pixels", False)
    label = name if isinstance(name, str) and name in PROTOCOL_OF else "unknown"
    status, cached = 200, False
    try:
        if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool) or turn < 0):
            raise ToolError("invalid_request", "turn must be a non-negative integer", "turn")
        if not isinstance(include_pixels, bool):
            raise ToolError("invalid_request", "include_pixels must be true or false", "include_pixels")
        observation = await request.app[RUNNER].call(session, name, body.get("arguments", {}), turn)
        cached = observation.cached
        return web.Response(body=observation.body(include_pixels=include_pixels), content_type="application/json")
    except ToolError as e:
        status = e.status
        raise
    except Exception:
        status = 500
        raise
    finally:
        request.app[METRICS].observe(label, status, time.perf_counter() - start, cached=cached)


WORLD = web.AppKey("world", OfflineWorld)
SESSIONS = web.AppKey("sessions", SessionStore)
RUNNER = web.AppKey("runner", ToolRunner)
CACHE = web.AppKey("cache", object)
METRICS = web.AppKey("metrics", Metrics)
SETTINGS = web.AppKey("settings", ServerSettings)


def create_app(
    *,
    world: OfflineWorld,
    mei: EvidenceInterface,
    cache: TieredCache | None = None,
    settings: ServerSettings = ServerSettings(),
    online: OnlineBackends | None = None,
) -> web.Application:
    """The server; ``online`` backends (closed with the app) answer web search and non-world URLs."""
    set_pil_pixel_limit(settings.max_pixels)
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    app[WORLD] = world
    app[SESSIONS] = SessionStore(
        ttl_s=settings.session_ttl_s, max_sessions=settings.max_sessions, max_images=settings.max_register_images
    )
    app[RUNNER] = ToolRunner(
        ToolContext(world=world, mei=mei, max_pixels=settings.max_pixels, online=online), cache
    )
    app[CACHE] = cache
    app[METRICS] = Metrics()
    app[SETTINGS] = settings
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/tools", tools)
    app.router.add_post("/v1/sessions", create_session)
    app.router.add_delete("/v1/sessions/{session_id}", delete_session)
    app.router.add_post("/v1/sessions/{session_id}/call", call_tool)
    if online is not None and online.public is not None:  # query images for the reverse-image API
        app.router.add_get(PUBLIC_PATH + "{name}", online.public.handle)

    async def lifecycle(app: web.Application):
        evictor = asyncio.create_task(app[SESSIONS].run_evictor())
        yield
        evictor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await evictor
        if hasattr(mei, "close"):
            await mei.close()
        if cache is not None:
            await cache.close()
        if online is not None:
            await online.close()

    app.cleanup_ctx.append(lifecycle)
    return app
