"""verl ``BaseTool`` wrappers over the tool server, for projects that run stock verl's ``ToolAgentLoop``.

One class, :class:`ToolServerTool`, serves every tool of both protocols: the tool name comes from the YAML's
``tool_schema``, the server URL and whether to return pixels from its ``config`` (``recipes/tools/*.yaml``).

Per-episode state. verl 0.9.1's ``ToolAgentLoop._call_tool`` runs ``create(create_kwargs=...)``, then
``execute(instance_id, args, agent_data=agent_data)``, then ``release(instance_id)`` for every single call, so a
tool instance lives for one call while the server session (its visual register img_1, img_2, ...) must live for
the episode. ``create`` and ``release`` are told nothing about the episode; only ``execute`` gets ``agent_data``,
the loop's ``AgentData``, which lives exactly as long as the episode. Sessions therefore sit in a process-wide
table weakly keyed by that object:

- the episode's first call opens the session (parallel first calls of one turn share the opening); it registers
  as img_1.. the ``images`` of the call's ``create_kwargs`` (world URLs or base64) if given, else the question
  images as verl decoded them (``agent_data.image_data``, sent as PNG), with ``create_kwargs["group_id"]``;
- every later call of the episode, through whichever tool, uses that session;
- when the episode's ``AgentData`` is garbage-collected (after ``run`` returns), a finalizer deletes the session
  on the server; the server's session TTL reaps what that misses (a killed worker, a closed event loop).

Keyed by the object, not ``agent_data.request_id``: under ``full_determinism`` verl's request ids are
``det-{priority}`` and repeat from step to step.

Limits: ``release`` cannot close the session (it is not told which call was the episode's last); a session the
server evicted mid-episode is not reopened (the policy gets the ``unknown_session`` error, its register is gone);
a call without ``agent_data`` (outside ``ToolAgentLoop``) is refused; verl validates ``tool_schema`` into its own
pydantic models, which keep only ``type``/``description``/``enum`` per property, so the prompt lacks the
``items``/``minItems``/``anyOf`` keywords that the server enforces (its error messages tell the policy instead).

Errors: a 4xx from the server (bad arguments, unknown img_N, ...) becomes a text response for the policy; an
infrastructure failure (:class:`ToolServerUnavailable`) raises, and ``ToolAgentLoop`` logs it and answers the
policy with an error text.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from tool_server.offline.pixels import open_flattened
from verl_ext.tools.client import (
    SessionInfo,
    ToolCallError,
    ToolServerClient,
    ToolServerError,
    png_base64,
    shared_client,
)
from verl_ext.tools.shards import server_urls

log = logging.getLogger(__name__)

_EPISODES: weakref.WeakKeyDictionary[Any, asyncio.Future[SessionInfo]] = weakref.WeakKeyDictionary()
_CLOSING: set[asyncio.Task[None]] = set()


async def _close_quietly(client: ToolServerClient, session_id: str) -> None:
    try:
        await client.close_session(session_id)
    except ToolServerError as e:  # the TTL reaps it
        log.debug("closing tool-server session %s failed: %s", session_id, e)


def _close_later(loop: asyncio.AbstractEventLoop, client: ToolServerClient, session_id: str) -> None:
    """Runs when the episode is collected, possibly outside the loop: hand the DELETE to the session's loop."""

    def spawn() -> None:
        task = loop.create_task(_close_quietly(client, session_id))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(spawn)
        except RuntimeError:  # closed in between; the TTL reaps it
            pass


async def _open(agent_data: Any, client: ToolServerClient, create_kwargs: dict[str, Any]) -> SessionInfo:
    images = create_kwargs.get("images")
    if images is None:
        images = await asyncio.to_thread(lambda: [png_base64(i) for i in agent_data.image_data or []])
    session = await client.open_session(images, create_kwargs.get("group_id"))
    weakref.finalize(agent_data, _close_later, asyncio.get_running_loop(), client, session.session_id)
    return session


async def _episode_session(agent_data: Any, client: ToolServerClient, create_kwargs: dict[str, Any]) -> SessionInfo:
    opening = _EPISODES.get(agent_data)
    if opening is None:
        opening = _EPISODES[agent_data] = asyncio.ensure_future(_open(agent_data, client, create_kwargs))
    try:
        return await asyncio.shield(opening)
    except BaseException:
        failed = opening.done() and (opening.cancelled() or opening.exception() is not None)
        if failed and _EPISODES.get(agent_data) is opening:  # let the episode's next call try again
            del _EPISODES[agent_data]
        raise


class ToolServerTool(BaseTool):
    """Any tool-server tool; ``config``: ``base_url``, ``timeout_s`` (120), ``include_pixels`` (false)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        if not config.get("base_url"):
            raise ValueError(f"{self.name}: config.base_url (the tool server's URL) is required")
        self.base_url = str(config["base_url"])
        if len(server_urls(self.base_url)) > 1:  # a session's calls must reach the one server holding its register
            raise ValueError(f"{self.name}: config.base_url names several servers ({self.base_url!r}); verl's tools "
                             "use one (our agent loops shard sessions over several: tool_server_url)")
        self.timeout_s = float(config.get("timeout_s", 120.0))
        self.include_pixels = bool(config.get("include_pixels", False))
        self._create_kwargs: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        self._create_kwargs[instance_id] = dict(kwargs.get("create_kwargs") or {})
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            raise TypeError(f"{self.name}: execute() needs agent_data (the episode), as ToolAgentLoop passes it")
        client = shared_client(self.base_url, self.timeout_s)
        try:
            session = await _episode_session(agent_data, client, self._create_kwargs.get(instance_id, {}))
            result = await client.call(
                session.session_id,
                self.name,
                parameters,
                turn=getattr(agent_data, "assistant_turns", None),
                include_pixels=self.include_pixels,
            )
        except ToolCallError as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {"error": e.type}
        images = [open_flattened(i.png) for i in result.images if i.png is not None]
        metrics = {"cached": result.cached, "new_images": [i.ref for i in result.images]}
        # verl refuses image=None: a text-only response leaves the field out
        response = ToolResponse(text=result.text, image=images) if images else ToolResponse(text=result.text)
        return response, 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._create_kwargs.pop(instance_id, None)
