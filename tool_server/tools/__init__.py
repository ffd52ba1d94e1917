"""Tool dispatch: validate, consult the result cache, run the handler of either protocol."""

from __future__ import annotations

import json
from typing import Any

from tool_server.cache import TieredCache, cache_key
from tool_server.protocol import validate
from tool_server.sessions import Session
from tool_server.tools import modal, neos
from tool_server.tools.base import CachedObservation, Call, Observation, ToolContext, pixels_digest

HANDLERS = {**neos.HANDLERS, **modal.HANDLERS}
CACHED = neos.CACHED | modal.CACHED

__all__ = ["CachedObservation", "Observation", "ToolContext", "ToolRunner"]


class ToolRunner:
    def __init__(self, ctx: ToolContext, cache: TieredCache | None) -> None:
        self.ctx = ctx
        self.cache = cache

    @staticmethod
    def _cache_arguments(session: Session, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Register ids are session-local: key image inputs by their pixels so equal queries share entries."""
        register = session.register
        if name == "ReverseImageSearch" and "image_token" in args:
            tokens = args["image_token"]
            return {
                **args,
                "image_token": [
                    pixels_digest(register.get(t, f"arguments/image_token/{i}")) for i, t in enumerate(tokens)
                ],
            }
        if name == "i2i_search" and args["image"].startswith("img_"):
            return {**args, "image": pixels_digest(register.get(args["image"], "arguments/image"))}
        return args

    async def call(
        self, session: Session, name: Any, arguments: Any, turn: int | None = None
    ) -> Observation | CachedObservation:
        observation = await self._call(session, name, arguments, turn)
        if self.ctx.online is not None and name in modal.HANDLERS:  # later calls may name these web resources by id
            self.ctx.online.ids.learn(
                observation.records if isinstance(observation, Observation) else json.loads(observation.blob)["records"]
            )
        return observation

    async def _call(
        self, session: Session, name: Any, arguments: Any, turn: int | None
    ) -> Observation | CachedObservation:
        args = validate(name, arguments)
        if self.cache is None or name not in CACHED:
            return await HANDLERS[name](self.ctx, Call(session, args, turn))
        tool = name if self.ctx.online is None else f"{name}@online"  # web results never answer world queries
        if name in neos.MEI_BACKED:  # a trajectory's MEI calls carry one version: never an older checkpoint's cache
            tool = f"{tool}@mei={self.ctx.mei.version}"
        key = cache_key(tool, self._cache_arguments(session, name, args), scope=session.group_id)
        computed: Observation | None = None

        async def compute() -> bytes | None:
            nonlocal computed
            computed = await HANDLERS[name](self.ctx, Call(session, args, turn))
            return None if computed.images else computed.to_cache()  # register entries are this session's own

        blob = await self.cache.get_or_compute(key, compute)
        if computed is not None:
            return computed
        assert blob is not None  # get_or_compute returns None only from a compute() of this caller
        return CachedObservation(blob)
