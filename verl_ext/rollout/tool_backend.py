"""The episode's view of the tool server: one session, schema-checked calls, errors classified by whose fault.

Shared per worker process (verl builds a new agent loop per sample): the HTTP pool, the tool schemas with their
compiled validators, and the semaphore that bounds tool calls in flight across all episodes.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

import jsonschema
from PIL import Image

from tool_server.offline.pixels import open_flattened
from verl_ext.rollout.media import media_parts, session_png
from verl_ext.rollout.protocols import Protocol, ToolCall
from verl_ext.tools.client import SessionInfo, ToolCallError, ToolServerClient, ToolServerError
from verl_ext.tools.shards import ServerShards, server_gone, server_urls, shared_shards

# The policy's copies of the question images (verl's decoded, resized images), awaited only by a session that needs
# them: both session kinds' ``open`` take it.
QuestionImages = Callable[[], Awaitable[Sequence[Image.Image]]]


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    schemas: list[dict[str, Any]]  # OpenAI function schemas, as the server (or the verl tools) list them
    validators: dict[str, jsonschema.protocols.Validator]

    @classmethod
    def from_schemas(cls, schemas: list[dict[str, Any]]) -> ToolCatalog:
        validators = {}
        for schema in schemas:
            params = schema["function"].get("parameters") or {"type": "object"}
            validators[schema["function"]["name"]] = jsonschema.validators.validator_for(params)(params)
        return cls(schemas, validators)

    def check(self, call: ToolCall) -> tuple[str, str] | None:
        """``(error_type, message)`` when the call cannot be valid, else None."""
        validator = self.validators.get(call.name)
        if validator is None:
            return "unknown_tool", f"unknown tool {call.name!r}; available: {', '.join(self.validators)}"
        error = next(iter(validator.iter_errors(call.arguments)), None)
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return "invalid_arguments", f"{call.name}: {where}: {error.message}"


@dataclass(slots=True)
class CallOutcome:
    ok: bool
    text: str
    images: list[tuple[str, Image.Image]] = field(default_factory=list)  # (register ref, pixels) new this call
    withheld: dict[str, str] = field(default_factory=dict)  # ref -> why the policy's processor could not show it
    error_class: str | None = None  # "agent" | "tool"
    error_type: str | None = None
    latency_s: float = 0.0
    mei: list[dict[str, str]] = field(default_factory=list)
    cached: bool = False
    session_lost: bool = False  # the server holding the session is gone: the episode cannot go on

    @property
    def shown_images(self) -> list[tuple[str, Image.Image]]:
        return [(ref, image) for ref, image in self.images if ref not in self.withheld]


_CATALOGS: dict[tuple[tuple[str, ...], str], ToolCatalog] = {}
_CATALOG_LOCKS: dict[tuple[tuple[str, ...], str, int], asyncio.Lock] = {}
_SEMAPHORES: dict[tuple[int, int], asyncio.Semaphore] = {}


async def tool_catalog(
    base_url: str | Sequence[str], protocol: Protocol, timeout_s: float, client: ToolServerClient | None = None
) -> ToolCatalog:
    """The protocol's tools from ``GET /v1/tools``, fetched once per process (through ``client`` when the caller owns
    one, else from the first healthy server of ``base_url``: one URL or several, :func:`server_urls`)."""
    urls = tuple(server_urls(base_url))
    key = (urls, protocol)
    if key in _CATALOGS:
        return _CATALOGS[key]
    lock = _CATALOG_LOCKS.setdefault((*key, id(asyncio.get_running_loop())), asyncio.Lock())
    async with lock:
        if key not in _CATALOGS:
            if client is not None:
                schemas = await client.list_tools(protocol)
            else:
                _, schemas = await shared_shards(urls, timeout_s).place(protocol, lambda c: c.list_tools(protocol))
            _CATALOGS[key] = ToolCatalog.from_schemas(schemas)
    return _CATALOGS[key]


def _semaphore(limit: int) -> asyncio.Semaphore:
    key = (id(asyncio.get_running_loop()), limit)
    if key not in _SEMAPHORES:
        _SEMAPHORES[key] = asyncio.Semaphore(limit)
    return _SEMAPHORES[key]


class ToolSession:
    """One episode's session on a tool server (its visual register lives there).

    ``base_url``: one server or several (:func:`server_urls`); with several, :meth:`open` places the session by its
    shard key on a healthy one (:class:`ServerShards`) and every later call goes there. A server that is gone (a
    refused connection its health probe confirms, or a router's ``worker_unavailable``) has lost the session: the
    call's outcome says so (``session_lost``) and the agent loop ends the episode as tool instability."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        catalog: ToolCatalog,
        *,
        timeout_s: float,
        max_in_flight: int,
        client: ToolServerClient | None = None,
        shard_key: str | None = None,
    ) -> None:
        # ``client``: a pool the caller owns (one bound to its own event loop); by default the process's shared ones.
        # ``shard_key``: places the session among several servers (default: a random key)
        self.shard_key = shard_key or uuid.uuid4().hex
        urls = server_urls(base_url)
        self.shards: ServerShards | None = None if client is not None else shared_shards(urls, timeout_s)
        self.client = client or self.shards.client(urls[0])
        self.catalog = catalog
        self.max_in_flight = max_in_flight
        self.session_id: str | None = None

    async def open(
        self, question_images: QuestionImages, group_id: str | None, originals: Sequence[bytes | None] = ()
    ) -> list[str]:
        """Registers the question images as img_1..; returns their refs. Where the dataset row holds an image's
        encoded file (``originals[i]``), the server gets that file, as a search engine gets the uploaded picture and
        as data generation registered it (reverse search ranks near-identical candidates by pixels, so the resized
        copy the policy sees can rank them differently); otherwise the policy's copy as PNG, from a per-process cache
        by content (``media.session_png``: a group's rollouts share the image). ``question_images`` gives the policy's
        copies (verl's decoded, resized images) when they are needed: so when every image has its file, the session
        opens while the agent loop is still decoding them. A file the server refuses (over its pixel limit,
        undecodable) falls back to the policy's copies rather than failing the episode."""

        async def open_on(payloads: list[str]) -> SessionInfo:
            if self.shards is None:
                return await self.client.open_session(payloads, group_id=group_id)
            self.client, info = await self.shards.place(
                self.shard_key, lambda client: client.open_session(payloads, group_id=group_id)
            )
            return info

        def encode(images: Sequence[Image.Image], files: Sequence[bytes | None]) -> list[str]:
            return [
                base64.b64encode(file).decode("ascii") if file else session_png(image)
                for image, file in zip_longest(images, files)
            ]

        files = list(originals)
        if files and all(files):
            payloads = await asyncio.to_thread(encode, (), files)
        else:
            images = await question_images()
            payloads = await asyncio.to_thread(encode, images, files[: len(images)]) if images else []
        try:
            info = await open_on(payloads)
        except ToolCallError:
            if not any(files):
                raise
            copies = await asyncio.to_thread(encode, await question_images(), ())
            info = await open_on(copies)
        self.session_id = info.session_id
        return info.images

    async def _server_gone(self) -> bool:
        return await (self.shards.gone(self.client) if self.shards is not None else server_gone(self.client))

    async def close(self) -> None:
        if self.session_id is not None:
            session_id, self.session_id = self.session_id, None
            try:
                await self.client.close_session(session_id)
            except ToolServerError:
                pass  # the server's session TTL reaps what a failed delete leaves

    async def call(self, call: ToolCall, turn: int) -> CallOutcome:
        problem = self.catalog.check(call)
        if problem is not None:
            return CallOutcome(False, f"Error ({problem[0]}): {problem[1]}", error_class="agent", error_type=problem[0])
        start = time.perf_counter()
        try:
            async with _semaphore(self.max_in_flight):
                result = await self.client.call(
                    self.session_id, call.name, call.arguments, turn=turn, include_pixels=True
                )
        except ToolServerError as e:
            # 4xx: the arguments or references were wrong; otherwise (timeouts, refused connections, 5xx) the tool
            lost = False
            if isinstance(e, ToolCallError):
                text, error_class = f"Error ({e.type}): {e.message}", "agent"
            else:
                text, error_class = (
                    f"Error: the tool is unavailable ({e.type}); try again or continue differently.",
                    "tool",
                )
                lost = e.type == "worker_unavailable" or (e.type == "connection_error" and await self._server_gone())
            return CallOutcome(
                False,
                text,
                error_class=error_class,
                error_type="session_lost" if lost else e.type,
                latency_s=time.perf_counter() - start,
                session_lost=lost,
            )
        pixels = [i for i in result.images if i.png]
        # Decoding off the event loop, but only when there is something to decode: the default executor is busy
        # with every episode's token renders, and a call without images should not queue behind them.
        images = await asyncio.to_thread(lambda: [(i.ref, open_flattened(i.png)) for i in pixels]) if pixels else []
        return CallOutcome(
            True, result.text, images, latency_s=time.perf_counter() - start, mei=result.mei, cached=result.cached
        )


def encoded_question_images(messages: Sequence[dict[str, Any]]) -> list[bytes | None]:
    """The encoded file of each image part of ``messages``, in order, where the part carries one: verl's
    ``RLHFDataset`` puts a parquet image (``{"bytes": ..., "path": ...}``) into the prompt as ``{"type": "image",
    **image}``. None for parts given as PIL images, paths or URLs (their pixels are registered as the policy sees
    them)."""
    return [
        bytes(data) if isinstance(data := part.get("bytes"), bytes | bytearray) and data else None
        for part in media_parts(messages)
        if part.get("type") == "image"
    ]
