"""Tool calls of an agent in one tool-server session, kept as the turns of a ``TrajectoryRecord``.

The offline probes and experts of both pipelines and the model-backed teacher run real calls through this, so their
episodes have the same shape as policy rollouts (SFT data, success references). One call per turn; ``span`` is
(0, 0): no tokens of ours were generated (a teacher's text is recorded, its tokens stay with its server).
Agent-caused call errors become ``call_error`` turns; infrastructure failures (``ToolServerUnavailable``) propagate
to the caller, which records them as retryable errors.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any, Protocol as Interface

from verl_ext.rollout.record import CallRecord, Protocol, TrajectoryRecord, TurnRecord
from verl_ext.tools.client import ToolCallError, ToolServerClient


def found(name: str, text: str) -> bool:
    """``name`` occurs in ``text`` as a whole word or phrase, any case."""
    return _whole_word(name).search(text) is not None


@lru_cache(maxsize=65_536)
def _whole_word(name: str) -> re.Pattern[str]:
    """Compiled once per name: a run checks tens of thousands of (name, text) pairs over a few thousand names, more
    than ``re``'s own cache of 512 patterns holds (a run spent a quarter of its CPU recompiling)."""
    return re.compile(rf"(?<!\w){re.escape(name)}(?!\w)", re.IGNORECASE)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments})


class Episode:
    def __init__(self, client: ToolServerClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.turns: list[TurnRecord] = []

    async def call(self, name: str, arguments: dict[str, Any], *, pixels: bool = False, text: str | None = None,
                   reasoning: str = ""):
        """The call's result, or None when the server rejected the call (recorded as an agent error). ``text``: the
        turn's assistant text when a model wrote it (default: the call as JSON); ``reasoning``: a programmatic
        agent's words before the call, recorded as a model's turn is (reasoning, then ``<tool_call>...``)."""
        start = time.perf_counter()
        index = len(self.turns)
        if text is None:
            text = f"{reasoning}\n<tool_call>{call_text(name, arguments)}</tool_call>" if reasoning \
                else call_text(name, arguments)
        try:
            result = await self.client.call(self.session_id, name, arguments, turn=index, include_pixels=pixels)
        except ToolCallError as err:
            call = CallRecord(tool_name=name, arguments=arguments, ok=False, error_class="agent", error_type=err.type,
                              observation=err.message, latency_s=time.perf_counter() - start)
            self.turns.append(TurnRecord(index=index, span=(0, 0), text=text, outcome="call_error", calls=[call],
                                         error_class="agent", error_type=err.type))
            return None
        call = CallRecord(tool_name=name, arguments=arguments, ok=True, observation=result.text,
                          images_added=[i.ref for i in result.images], latency_s=time.perf_counter() - start,
                          mei_call_ids=[m["call_id"] for m in result.mei],
                          mei_versions=[m["version"] for m in result.mei], cached=result.cached)
        self.turns.append(TurnRecord(index=index, span=(0, 0), text=text, outcome="call_ok", calls=[call]))
        return result

    def answer(self, text: str) -> None:
        self.turns.append(TurnRecord(index=len(self.turns), span=(0, 0), text=text, outcome="answer",
                                     tools_enabled=False))

    def record(self, protocol: Protocol, question: str, group_id: str, final: str | None) -> TrajectoryRecord:
        """The episode so far as a trajectory that ended with an answer (``final``: the answer, None if none)."""
        return TrajectoryRecord(protocol=protocol, question=question, session_id=self.session_id, group_id=group_id,
                                mei_version=None, termination_reason="answer", final_answer=final, turns=self.turns)


class Expert(Interface):
    """What a pipeline's verification step runs: one episode per task, (solved, trajectory, why it failed or '')."""

    name: str

    async def solve(self, task: Any) -> tuple[bool, TrajectoryRecord, str]: ...


@asynccontextmanager
async def opened(client: ToolServerClient, images: Sequence[str]) -> AsyncIterator[tuple[Episode, list[str]]]:
    """A tool-server session with the question ``images`` (world URLs): its episode and the images' refs; closed
    on exit, whatever happened."""
    session = await client.open_session(list(images))
    try:
        yield Episode(client, session.session_id), session.images
    finally:
        await client.close_session(session.session_id)


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
    async with opened(client, images) as (episode, refs):
        why = await walk(episode, refs)
    final = None if why else answer
    episode.answer(render(final))
    return why == "", episode.record(protocol, question, group_id, final), why
