"""The episode engine over a project's own verl tools (``multi_turn.tool_config_path`` / ``function_tool_path``).

With ``tool_backend: verl`` our loops call the ``BaseTool`` and ``FunctionTool`` objects verl loaded for the worker,
exactly as stock ``ToolAgentLoop`` does (``create`` → ``execute(..., agent_data=)`` → ``release`` per call; a function
tool is called directly), but keep our protocol parsing, schema checks, error classes, context budget, final turn
and export. Images a tool returns become new ``img_N`` of an episode-local register and enter the context.

``agent_data`` is an :class:`EpisodeData` carrying the ``AgentData`` attributes tools read (``image_data``,
``assistant_turns``, ``request_id``, ``extra_fields``), one object per episode, so tools that key per-episode state
on it (ours in ``verl_ext.tools.verl_tools`` do) keep working.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image
from verl.tools.function_tool import FunctionTool, normalize_function_tool_return

from verl_ext.rollout.protocols import ToolCall
from verl_ext.rollout.tool_backend import CallOutcome, QuestionImages, ToolCatalog


@dataclass(eq=False)  # identity hashing: tools key weak per-episode tables on it
class EpisodeData:
    image_data: list[Image.Image]
    request_id: str
    assistant_turns: int = 0
    extra_fields: dict[str, Any] = field(default_factory=dict)


def verl_tool_catalog(tools: Sequence[Any]) -> ToolCatalog:
    return ToolCatalog.from_schemas(
        [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in tools]
    )


class VerlToolsSession:
    """Same interface as ``ToolSession`` (open / call / close), over in-process verl tools."""

    def __init__(
        self, tools: Sequence[Any], catalog: ToolCatalog, tools_kwargs: dict[str, Any], request_id: str
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.catalog = catalog
        self.tools_kwargs = tools_kwargs or {}
        self.episode = EpisodeData(image_data=[], request_id=request_id)
        self.session_id: str | None = None
        self._images = 0

    async def open(
        self, question_images: QuestionImages, group_id: str | None, originals: Sequence[bytes | None] = ()
    ) -> list[str]:
        """verl tools get the images as the policy sees them (``originals`` are for the tool server's register)."""
        self.episode.image_data = list(await question_images())
        self.session_id = f"verl-tools:{self.episode.request_id}"
        return [self._next_ref() for _ in self.episode.image_data]

    async def close(self) -> None:
        self.session_id = None

    def _next_ref(self) -> str:
        self._images += 1
        return f"img_{self._images}"

    async def call(self, call: ToolCall, turn: int) -> CallOutcome:
        problem = self.catalog.check(call)
        if problem is not None:
            return CallOutcome(False, f"Error ({problem[0]}): {problem[1]}", error_class="agent", error_type=problem[0])
        tool = self.tools[call.name]
        self.episode.assistant_turns = turn + 1
        start = time.perf_counter()
        instance_id = None
        try:
            if isinstance(tool, FunctionTool):
                response, _, _ = normalize_function_tool_return(await tool.call(call.arguments))
            else:
                create_kwargs = self.tools_kwargs.get(call.name, {}).get("create_kwargs", {})
                instance_id, _ = await tool.create(create_kwargs=create_kwargs)
                response, _, _ = await tool.execute(instance_id, call.arguments, agent_data=self.episode)
        except Exception as e:  # noqa: BLE001  a project's tool may raise anything: the policy sees it, the rollout goes on
            return CallOutcome(
                False,
                f"Error: the tool {call.name} failed ({type(e).__name__}: {e})",
                error_class="tool",
                error_type=type(e).__name__,
                latency_s=time.perf_counter() - start,
            )
        finally:
            if instance_id is not None:
                await tool.release(instance_id)
        returned = response.image if isinstance(response.image, list) else [response.image] if response.image else []
        images = [(self._next_ref(), im.convert("RGB")) for im in returned if im is not None]
        self.episode.image_data.extend(im for _, im in images)
        return CallOutcome(True, response.text or "", images, latency_s=time.perf_counter() - start)
