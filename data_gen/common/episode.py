"""Tool calls of a programmatic agent in one tool-server session, kept as the turns of a ``TrajectoryRecord``.

The offline probes and experts of both pipelines run real calls through this, so their episodes have the same
shape as policy rollouts (SFT data, success references). One call per turn; ``span`` is (0, 0) because a
programmatic agent generates no tokens. Agent-caused call errors become ``call_error`` turns; infrastructure
failures (``ToolServerUnavailable``) propagate to the caller, which records them as retryable errors.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from verl_ext.rollout.record import CallRecord, Protocol, TrajectoryRecord, TurnRecord
from verl_ext.tools.client import ToolCallError, ToolServerClient


def found(name: str, text: str) -> bool:
    """``name`` occurs in ``text`` as a whole word or phrase, any case."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments})


class Episode:
    def __init__(self, client: ToolServerClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.turns: list[TurnRecord] = []

    async def call(self, name: str, arguments: dict[str, Any], *, pixels: bool = False):
        """The call's result, or None when the server rejected the call (recorded as an agent error)."""
        start = time.perf_counter()
        index = len(self.turns)
        try:
            result = await self.client.call(self.session_id, name, arguments, turn=index, include_pixels=pixels)
        except ToolCallError as err:
            call = CallRecord(tool_name=name, arguments=arguments, ok=False, error_class="agent", error_type=err.type,
                              observation=err.message, latency_s=time.perf_counter() - start)
            self.turns.append(TurnRecord(index=index, span=(0, 0), text=call_text(name, arguments),
                                         outcome="call_error", calls=[call], error_class="agent", error_type=err.type))
            return None
        call = CallRecord(tool_name=name, arguments=arguments, ok=True, observation=result.text,
                          images_added=[i.ref for i in result.images], latency_s=time.perf_counter() - start,
                          mei_call_ids=[m["call_id"] for m in result.mei],
                          mei_versions=[m["version"] for m in result.mei], cached=result.cached)
        self.turns.append(TurnRecord(index=index, span=(0, 0), text=call_text(name, arguments), outcome="call_ok",
                                     calls=[call]))
        return result

    def answer(self, text: str) -> None:
        self.turns.append(TurnRecord(index=len(self.turns), span=(0, 0), text=text, outcome="answer",
                                     tools_enabled=False))


async def expert_episode(
    client: ToolServerClient,
    images: Sequence[str],
    walk: Callable[[Episode, list[str]], Awaitable[str]],
    *,
    protocol: Protocol,
    question: str,
    group_id: str,
    answer: str,
    render: Callable[[str | None], str],
) -> tuple[bool, TrajectoryRecord, str]:
    """Open a session with the question's ``images``, let ``walk`` make the calls (it returns why it failed, or
    ''), close the session and answer (``render(answer)`` on success, ``render(None)`` otherwise).
    Returns (solved, the episode as a trajectory, why)."""
    session = await client.open_session(list(images))
    episode = Episode(client, session.session_id)
    try:
        why = await walk(episode, session.images)
    finally:
        await client.close_session(session.session_id)
    final = None if why else answer
    episode.answer(render(final))
    record = TrajectoryRecord(protocol=protocol, question=question, session_id=session.session_id, group_id=group_id,
                              mei_version=None, termination_reason="answer", final_answer=final, turns=episode.turns)
    return why == "", record, why
