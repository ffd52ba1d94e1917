"""Tool dispatch of checked calls: consult the result cache, run the handler of either protocol.

MEI-backed results (Neos §3.5, one MEI version per trajectory) are cached under the version fixed for the session,
never under the version the server knew before the call; a session whose version is not known yet (no activation
and no answer so far) runs them uncached and is fixed to the version of its first answer. An observation holding a
fallback answer (the MEI failed; the extractive stand-in answered) is not cached at all, so the model's answer is
computed again once it recovers.
"""

from __future__ import annotations

import json
from typing import Any

from tool_server.cache import TieredCache, cache_key
from tool_server.calls import ToolCall
from tool_server.errors import ToolError
from tool_server.pools import image_cost
from tool_server.sessions import RegisteredImage, Session
from tool_server.tools import modal, neos
from tool_server.tools.base import CachedObservation, Call, Observation, ToolContext, pixels_digest

HANDLERS = {**neos.HANDLERS, **modal.HANDLERS}
CACHED = neos.CACHED | modal.CACHED

__all__ = ["CachedObservation", "Observation", "ToolContext", "ToolRunner"]


class ToolRunner:
    def __init__(self, ctx: ToolContext, cache: TieredCache | None) -> None:
        self.ctx = ctx
        self.cache = cache

    async def _digest(self, entry: RegisteredImage) -> str:
        """:func:`pixels_digest`, hashed on the image pool (a 25 Mpx image is 100 MB to hash) and kept."""
        if entry.digest is None:
            entry.digest = await self.ctx.pools.run(image_cost(entry.width, entry.height), pixels_digest, entry)
        return entry.digest

    async def _cache_arguments(self, session: Session, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Register ids are session-local: key image inputs by their pixels so equal queries share entries."""
        register = session.register
        if name == "ReverseImageSearch" and "image_token" in args:
            tokens = args["image_token"]
            return {
                **args,
                "image_token": [
                    await self._digest(register.get(t, f"arguments/image_token/{i}")) for i, t in enumerate(tokens)
                ],
            }
        if name == "i2i_search" and args["image"].startswith("img_"):
            return {**args, "image": await self._digest(register.get(args["image"], "arguments/image"))}
        return args

    async def _key(self, session: Session, call: ToolCall) -> str:
        """The cache key; memoised on ``call`` when it does not depend on the session's register."""
        # web results never answer world queries; a trajectory's MEI calls carry its session's version ("mei:", not the
        # earlier "mei=": entries written before fallbacks were kept out of the cache are never read again)
        tool = call.name if self.ctx.online is None else f"{call.name}@online"
        if call.name in neos.MEI_BACKED:
            tool = f"{tool}@mei:{session.mei_version}"
        scope = session.group_id
        memo = call.key
        if memo is not None and memo[0] == tool and memo[1] == scope:
            return memo[2]
        args = await self._cache_arguments(session, call.name, call.arguments)
        key = cache_key(tool, args, scope=scope)
        if args is call.arguments:  # no register image in the key: the same for every session of this scope
            call.key = (tool, scope, key)
        return key

    async def run(self, session: Session, call: ToolCall) -> Observation | CachedObservation:
        """Run a checked call (:func:`tool_server.calls.parse_call`), answering from the cache where it may."""
        name = call.name
        unpinned = name in neos.MEI_BACKED and session.mei_version is None
        if self.cache is None or name not in CACHED or unpinned:
            observation = await HANDLERS[name](self.ctx, Call(session, call.arguments, call.turn))
        else:
            observation = await self._cached(session, call)
        if isinstance(observation, Observation) and observation.mei:
            self._fix_version(session, observation)
        if self.ctx.online is not None and name in modal.HANDLERS:  # later calls may name these web resources by id
            self.ctx.online.ids.learn(
                observation.records if isinstance(observation, Observation) else json.loads(observation.blob)["records"]
            )
        return observation

    async def _cached(self, session: Session, call: ToolCall) -> Observation | CachedObservation:
        computed: Observation | None = None

        async def compute() -> bytes | None:
            nonlocal computed
            computed = await HANDLERS[call.name](self.ctx, Call(session, call.arguments, call.turn))
            if computed.images or any(m["outcome"] == "fallback" for m in computed.mei):
                return None  # register entries are this session's own; a fallback is no model result
            return computed.to_cache()

        blob = await self.cache.get_or_compute(await self._key(session, call), compute)
        if computed is not None:
            return computed
        assert blob is not None  # get_or_compute returns None only from a compute() of this caller
        return CachedObservation(blob)

    @staticmethod
    def _fix_version(session: Session, observation: Observation) -> None:
        """Fix an unpinned session to the version of its first MEI answer; refuse a call whose concurrent MEI calls
        were answered by two versions (a checkpoint activated while it ran)."""
        versions = {m["version"] for m in observation.mei}
        if session.mei_version is None and len(versions) == 1:
            session.mei_version = versions.pop()
        elif len(versions) > 1:
            raise ToolError("mei_version_changed", f"this call's MEI answers came from {sorted(versions)}")
