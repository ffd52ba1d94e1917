"""The aiohttp application: health, metrics, tool schemas, sessions and tool calls.

Every failure is a JSON body ``{"error": {"type", "message", "field"}}``: bad input is a 4xx naming the offending
field; an unexpected exception is a 500 with a generic message (details go to the log, never to the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from tool_server.bodies import QUOTA_DELAY_S, BodyBudget, BodyLimits, close_after, held_back
from tool_server.cache import TieredCache
from tool_server.calls import CALL_FIELDS, CallMemo, check_keys, json_object, parse_call
from tool_server.errors import ToolError
from tool_server.limits import (
    MAX_BODY_BYTES,
    MAX_CALL_BODY_BYTES,
    MAX_GROUP_ID_CHARS,
    MAX_URL_CHARS,
    MAX_VERSION_CHARS,
    check_text,
    quote,
)
from tool_server.loop import loop_name
from tool_server.memory import MemoryBudget
from tool_server.mei.schema import EvidenceInterface
from tool_server.metrics import Metrics
from tool_server.offline.pixels import (
    DEFAULT_MAX_PIXELS,
    PROBE_CHARS,
    decode_base64_image,
    probe_base64_size,
    set_pil_pixel_limit,
)
from tool_server.offline.world import OfflineWorld
from tool_server.online.public import PUBLIC_PATH
from tool_server.online.web import OnlineBackends
from tool_server.image_processes import CutString, ImageProcesses
from tool_server.pools import CLIENT, Pools, decode_cost, encode_cost
from tool_server.protocol import PROTOCOL_OF, tool_schemas
from tool_server.sessions import Session, SessionStore, pixel_bytes
from tool_server.tools import Observation, ToolContext, ToolRunner
from tool_server.tools.ops import load_image

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]



@dataclass(frozen=True, slots=True)
class ServerSettings:
    session_ttl_s: float = 3600.0
    max_sessions: int = 100_000
    max_register_images: int = 512
    max_sessions_per_client: int = 10_000  # a tenth of the server: one client cannot take every session
    max_session_image_bytes: int = 512 * 2**20  # decoded pixels of one register (a 25 Mpx image is 100 MB)
    memory_budget_bytes: int = 16 * 2**30  # registers, their PNGs, the cache's memory level, bodies (memory.py)
    client_memory_share: float = 0.5  # of the memory budget, one client's registers
    client_heavy_jobs: int = 8  # one client's jobs queued or running on the large_image pool (pools.Pools)
    memory_min_idle_s: float = 60.0  # a session idle this long may be evicted to make room for another's images
    session_id_prefix: str = "s_"
    client_header: str | None = None  # behind the --workers router: the header naming the client's address
    quota_delay_s: float = QUOTA_DELAY_S  # a 429 client_quota is answered this late (0 behind the router: it waits)
    max_pixels: int = DEFAULT_MAX_PIXELS
    image_processes: int = 1  # spawned processes for large bodies' and images' base64 and parsing (0: threads)
    image_process_min_bytes: int = 2**20  # a body, base64 image or PNG this large goes to them
    bodies: BodyLimits = BodyLimits()  # request bodies read at once, their deadline and minimum rate


def _error(status: int, type_: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"type": type_, "message": message, "field": field}}, status=status)


def _json_errors(handler: Handler) -> Handler:
    """``handler`` with every failure answered as a JSON error body.

    Per handler rather than as an app middleware: any middleware makes aiohttp run each request through two extra
    layers (it adds its own current-app fixer), a measurable share of a cached call's CPU.
    """

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ToolError as e:
            request.app[METRICS].error(e.type)
            response = web.json_response({"error": e.to_json()}, status=e.status)
            if close_after(request, e):  # refused or cut mid-body
                response.force_close()
            await held_back(response, e.type, request.app[SETTINGS].quota_delay_s)
            return response
        except web.HTTPException as e:
            if e.status < 400:
                raise
            type_ = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(e.status, "http_error")
            request.app[METRICS].error(type_)
            return _error(e.status, type_, e.reason or type_)
        except Exception:
            log.exception("unexpected error in %s %s", request.method, request.path)
            request.app[METRICS].error("internal_error")
            return _error(500, "internal_error", "the server failed on this request; the failure has been logged")

    return answer


async def _no_route(request: web.Request) -> web.Response:
    """Every request no route takes: 405 where another route has the path, else 404 (as aiohttp's router says)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


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
        evicted=dict(sessions.evictions),
        image_bytes=sessions.image_bytes,
        memory=request.app[MEMORY],
        search_restarts=request.app[WORLD].search_restarts,
        image_restarts=processes.restarts if (processes := request.app[RUNNER].ctx.pools.processes) else 0,
        online=online.counters() if online is not None else None,
        borrowed={"bodies": request.app[BODIES].share.borrowed, "images": sessions.share.borrowed},
    )
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Format": "0.0.4"})


async def tools(request: web.Request) -> web.Response:
    protocol = request.query.get("protocol")
    if protocol not in (None, "neos", "modalsearch"):
        raise ToolError("invalid_request", f"protocol must be neos or modalsearch, got {quote(protocol)}", "protocol")
    return web.json_response({"tools": tool_schemas(protocol)})


def client_of(request: web.BaseRequest) -> str | None:
    """The client a quota is kept for: its address, or behind the ``--workers`` router the one it names."""
    header = request.app[SETTINGS].client_header
    return (request.headers.get(header) if header else None) or request.remote


async def create_session(request: web.Request, raw: bytes | bytearray) -> web.Response:
    pools = request.app[RUNNER].ctx.pools
    CLIENT.set(client_of(request))  # this request's task: the heavy pools count its jobs
    if pools.processes is None or len(raw) < pools.processes.min_bytes:
        return await _open(request, json_object(raw, optional=True), {})
    # parsed on the event loop, a 48 MB body held it ~100 ms: its long strings are cut out in an image process
    small, cuts = await pools.run("large_image", pools.processes.cut_long_strings, raw)
    try:
        return await _open(request, json_object(small, optional=True), cuts)
    finally:
        for file in {cut.file for cut in cuts.values()}:
            file.close()


async def _open(request: web.Request, body: dict, cuts: dict[str, CutString]) -> web.Response:
    """Open a session from its parsed ``body``; ``cuts``: the strings cut out of it before it was parsed, by the
    placeholder that stands for each (only question images may be that long)."""
    check_keys(body, {"images", "group_id", "mei_version"})
    images, group_id = body.get("images", []), body.get("group_id")
    mei_version = body.get("mei_version", request.app[RUNNER].ctx.mei.version)
    for key, limit in (("group_id", MAX_GROUP_ID_CHARS), ("mei_version", MAX_VERSION_CHARS)):
        if isinstance(body.get(key), str) and body[key] in cuts:
            raise ToolError("input_too_long", f"{key} is over {limit} characters", key)
    if mei_version is not None:
        _check_version(mei_version, "mei_version")
    settings: ServerSettings = request.app[SETTINGS]
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise ToolError("invalid_request", "images must be a list of base64 images or image URLs", "images")
    if len(images) > settings.max_register_images:
        raise ToolError("invalid_request", f"at most {settings.max_register_images} question images", "images")
    if group_id is not None and not isinstance(group_id, str):
        raise ToolError("invalid_request", "group_id must be a string", "group_id")
    if group_id is not None:
        check_text(group_id, MAX_GROUP_ID_CHARS, "group_id")
    for i, item in enumerate(images):
        if item.startswith(("http://", "https://")):
            check_text(item, MAX_URL_CHARS, f"images/{i}")
    ctx = request.app[RUNNER].ctx
    store: SessionStore = request.app[SESSIONS]
    session = store.create(group_id, mei_version, client=CLIENT.get())
    try:
        for i, item in enumerate(images):
            if item.startswith(("http://", "https://")):
                pixels = (await load_image(ctx, item, f"images/{i}"))[1]
                # taken from the session's and the server's budgets as each is decoded (store.get: still there)
                store.get(session.id).register.append(pixels, item)
            else:
                text = cuts.get(item, item)
                await _question_image(ctx, store.get(session.id), text, f"images/{i}", settings.max_pixels)
    except BaseException:
        store.discard(session.id)
        raise
    return web.json_response(
        {"session_id": session.id, "images": session.register.refs(), "mei_version": session.mei_version}
    )


async def _question_image(
    ctx: ToolContext, session: Session, item: str | CutString, field: str, max_pixels: int
) -> None:
    """Decode a base64 question image into ``session``'s register on the pool its header's size calls for (> 4 Mpx:
    ``large_image``; they all went to ``image``, where 16 clients' 25 Mpx opens held another's FetchImage 0.8 s),
    its pixels taken from the budgets before it is decoded; a PNG of exactly its pixels is kept to be sent as is.
    A string cut out of its body is decoded in an image process."""
    cut = isinstance(item, CutString)
    size = probe_base64_size(item.head(PROBE_CHARS) if cut else item)
    register = session.register
    held = pixel_bytes(*size) if size is not None and size[0] * size[1] <= max_pixels else 0
    register.reserve(1, held)  # the register's room too: nothing else appends to a session not yet returned
    try:
        decode = ctx.pools.processes.decode_base64 if cut else decode_base64_image
        pixels, png = await ctx.pools.run(decode_cost(size), decode, item, max_pixels=max_pixels, field=field)
        actual = pixel_bytes(pixels.width, pixels.height)
        if actual > held:
            register.reserve(0, actual - held)
        held = actual
    except BaseException:
        register.release(held)
        raise
    entry = register.append_reserved(pixels, "question")
    if png is not None:
        register.keep_png(entry, png)


def _check_version(version: object, field: str) -> None:
    """An MEI version as a client may give it: a non-empty string of at most :data:`MAX_VERSION_CHARS`."""
    if not isinstance(version, str) or not version:
        raise ToolError("invalid_request", f"{field} must be a non-empty string", field)
    check_text(version, MAX_VERSION_CHARS, field)


async def mei_version(request: web.Request, raw: bytes | bytearray) -> web.Response:
    """``GET``: the active MEI version. ``POST {"version": V}``: a checkpoint was activated behind the MEI endpoint;
    sessions created from now on are fixed to V (the trainer calls it right after the MEI server loads V). Both answer
    ``interface``: ``model`` (``--mei-endpoint``) or ``extractive``, so a trainer can refuse to co-evolve with a tool
    server whose answers no checkpoint changes."""
    mei = request.app[RUNNER].ctx.mei
    previous = mei.version
    if request.method == "POST":
        body = json_object(raw, optional=False)
        check_keys(body, {"version"})
        version = body.get("version")
        _check_version(version, "version")
        mei.activate(version)
        log.info("MEI version %s activated (was %s)", version, previous)
    return web.json_response({"version": mei.version, "previous": previous, "interface": mei.interface})


async def delete_session(request: web.Request) -> web.Response:
    request.app[SESSIONS].delete(request.match_info["session_id"])
    return web.json_response({"deleted": request.match_info["session_id"]})


async def call_tool(request: web.Request) -> web.Response:
    start = time.perf_counter()
    app = request.app
    session = app[SESSIONS].get(request.match_info["session_id"])
    client = client_of(request)
    CLIENT.set(client)  # this request's task: the heavy pools count its jobs
    raw = await app[BODIES].receive(request, MAX_CALL_BODY_BYTES, client)
    try:
        return await _answer_call(request, session, raw, start)
    finally:
        app[BODIES].release(len(raw), client)


async def _answer_call(request: web.Request, session, raw: bytes, start: float) -> web.Response:
    app = request.app
    call = app[CALLS].get(raw)
    if call is None:
        body = json_object(raw, optional=False)
        check_keys(body, CALL_FIELDS)
        try:
            call = parse_call(body)
        except ToolError as e:
            name = body.get("name")
            label = name if isinstance(name, str) and name in PROTOCOL_OF else "unknown"
            app[METRICS].observe(label, e.status, time.perf_counter() - start)
            raise
        app[CALLS].put(raw, call)
    status, cached = 200, False
    try:
        observation = await app[RUNNER].run(session, call)
        cached = observation.cached
        if call.include_pixels and getattr(observation, "images", None):
            body = await _with_pixels(app[RUNNER].ctx, session, observation)
        else:
            body = observation.body(include_pixels=call.include_pixels)
        return await _send_charged(request, web.Response(body=body, content_type="application/json"), len(body))
    except ToolError as e:
        status = e.status
        raise
    except Exception:
        status = 500
        raise
    finally:
        app[METRICS].observe(call.name, status, time.perf_counter() - start, cached=cached)


async def _with_pixels(ctx: ToolContext, session: Session, observation: Observation) -> bytes:
    """The ``include_pixels`` answer, encoded on the pool of its largest image (``encode``, or ``large_image`` past
    4 Mpx); the PNGs are kept on their register entries while the budgets have room (a crop asked again with pixels
    is not encoded again)."""
    largest = max(observation.images, key=lambda e: e.pixels)
    cost = encode_cost(largest.width, largest.height)
    body, pngs = await ctx.pools.run(cost, observation.with_pixels, ctx.world, ctx.pools.processes)
    for entry, png in zip(observation.images, pngs):
        session.register.keep_png(entry, png)
    return body


async def _send_charged(request: web.Request, response: web.Response, nbytes: int) -> web.Response:
    """Write ``response`` now, its ``nbytes`` of body charged to the memory budget until written: a client that reads
    its answers slowly holds them (a 12 Mpx crop with pixels is 48 MB) in the server's memory as long as it likes.
    One that does not fit after reclaiming is 503 ``server_busy``."""
    memory = request.app[MEMORY]
    if not memory.take("responses", nbytes):
        raise ToolError("server_busy", f"a {nbytes}-byte answer would pass the server's memory budget; retry later")
    try:
        await response.prepare(request)
        await response.write_eof()  # returns once the rest is in the transport's buffer below its high-water mark
    finally:
        memory.give("responses", nbytes)
    return response


async def _trim_when_due(memory: MemoryBudget, every_s: float = 1.0) -> None:
    """Background task: give the heap's free memory back to the OS (``malloc_trim``, in a thread: it walks the heap)
    once enough client data was released (``allocator.Trimmer``); RSS otherwise stayed at an attack's peak."""
    while True:
        await asyncio.sleep(every_s)
        if memory.trimmer.due():
            await asyncio.to_thread(memory.trimmer.trim)


WORLD = web.AppKey("world", OfflineWorld)
SESSIONS = web.AppKey("sessions", SessionStore)
RUNNER = web.AppKey("runner", ToolRunner)
CACHE = web.AppKey("cache", object)
METRICS = web.AppKey("metrics", Metrics)
SETTINGS = web.AppKey("settings", ServerSettings)
CALLS = web.AppKey("calls", CallMemo)
BODIES = web.AppKey("bodies", BodyBudget)
MEMORY = web.AppKey("memory", MemoryBudget)


def _with_body(handler: Callable[[web.Request, bytes | bytearray], Awaitable[web.StreamResponse]]) -> Handler:
    """A handler given its request's body (up to ``MAX_BODY_BYTES``), read within the process's body budget."""

    async def answer(request: web.Request) -> web.StreamResponse:
        client = client_of(request)
        raw = await request.app[BODIES].receive(request, MAX_BODY_BYTES, client)
        try:
            return await handler(request, raw)
        finally:
            request.app[BODIES].release(len(raw), client)

    return answer


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
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    memory = MemoryBudget(settings.memory_budget_bytes)
    if cache is not None:
        cache.attach(memory)  # its memory level gives entries back first when images or bodies need the room
    app[MEMORY] = memory
    app[BODIES] = BodyBudget(settings.bodies, memory)
    app[WORLD] = world
    app[SESSIONS] = SessionStore(
        ttl_s=settings.session_ttl_s,
        max_sessions=settings.max_sessions,
        max_sessions_per_client=settings.max_sessions_per_client,
        max_images=settings.max_register_images,
        max_session_bytes=settings.max_session_image_bytes,
        memory=memory,
        client_share=settings.client_memory_share,
        memory_min_idle_s=settings.memory_min_idle_s,
        id_prefix=settings.session_id_prefix,
    )
    pools = online.pools if online is not None else Pools()  # one set of pools for the whole process
    pools.client_heavy_jobs = settings.client_heavy_jobs
    if settings.image_processes and pools.processes is None:
        pools.processes = ImageProcesses(
            settings.image_processes, settings.max_pixels, settings.image_process_min_bytes
        )
    app[RUNNER] = ToolRunner(
        ToolContext(world=world, mei=mei, max_pixels=settings.max_pixels, online=online, pools=pools), cache
    )
    app[CACHE] = cache
    app[METRICS] = Metrics()
    app[SETTINGS] = settings
    app[CALLS] = CallMemo()
    router, wrap = app.router, _json_errors
    router.add_post("/v1/sessions/{session_id}/call", wrap(call_tool))  # the router tries it first under /v1/sessions
    router.add_get("/healthz", wrap(healthz))
    router.add_get("/metrics", wrap(metrics))
    router.add_get("/v1/tools", wrap(tools))
    router.add_post("/v1/sessions", wrap(_with_body(create_session)))
    router.add_delete("/v1/sessions/{session_id}", wrap(delete_session))
    router.add_get("/admin/mei_version", wrap(_with_body(mei_version)))
    router.add_post("/admin/mei_version", wrap(_with_body(mei_version)))
    if online is not None and online.public is not None:  # query images for the reverse-image API
        router.add_get(PUBLIC_PATH + "{name}", wrap(online.public.handle))
    router.add_route("*", "/{tail:.*}", wrap(_no_route))  # last: what no other route takes

    async def lifecycle(app: web.Application):
        tasks = [asyncio.create_task(app[SESSIONS].run_evictor()), asyncio.create_task(_trim_when_due(memory))]
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if hasattr(mei, "close"):
            await mei.close()
        if cache is not None:
            await cache.close()
        if online is not None:
            await online.close()
        pools.close()

    app.cleanup_ctx.append(lifecycle)
    return app
