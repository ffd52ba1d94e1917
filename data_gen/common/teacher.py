"""The model-backed teacher (Neos App. A, step 8, issue 6): an OpenAI-compatible chat model runs the episode with real
tool-server calls, and its successful episode replaces the programmatic expert's as SFT data and success reference.

Protocols (the papers' tool protocols), as the rollout's agent loops speak them and parsed by the rollout's own parser
(``verl_ext.rollout.protocols.parse_turn``):

- **neos**: the tool server's ``/v1/tools?protocol=neos`` schemas are offered as OpenAI ``tools``; each turn is one
  native function call or the final answer as plain text. A server without a tool parser may instead write the
  call as ``<tool_call>`` JSON in the text; both read the same.
- **modalsearch**: ReAct text, the tools listed in the system prompt; ``<think>`` then one ``<tool_call>`` JSON or
  ``<answer>``.

The question images go in as data URLs; images a call loads (FetchImage, CropImage, ``read_url`` of an image) come
back as data URLs in the tool message, after their register ids. The last of ``max_turns`` turns (the rollout's
default per protocol) offers no tools and asks for the answer, as in rollouts.

The episode is recorded with :class:`data_gen.common.episode.Episode`, the programmatic expert's form (each turn's
text is the model's), so verification, SFT export, success references and MEI pairs read it unchanged. It ends at
the first malformed turn or refused call: SFT data should not teach either. :class:`TeacherExpert` keeps an episode
only when it ends with an answer that matches the gold (aliases included), that some observation names when it is a
name the tools' text states (a right guess is not kept), and that the pipeline's SFT export accepts. Anything else
(a malformed turn, a refused call, a wrong, ungrounded or missing answer, a model that cannot be reached after
``1 + max_retries`` attempts or refuses the request with a 4xx) falls back to the programmatic expert for that task,
counted by reason. Tool-server failures stay infrastructure errors (they propagate), as for the programmatic expert.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from data_gen.common.episode import Episode, Expert, found, opened
from data_gen.common.llm import Usage, image_part
from verl_ext.reward.answers import answer_matches
from verl_ext.reward.judge import JudgeConfig, chat_message, png_part
from verl_ext.rollout.prompts import final_turn_instruction, system_prompt
from verl_ext.rollout.protocols import Protocol, parse_turn
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.rollout.settings import PROTOCOL_DEFAULTS  # the rollout's turn limits: one source for both
from verl_ext.tools.client import CallResult, ToolServerClient


@dataclass(frozen=True)
class Brief:
    """One task as the teacher gets it, the same for both pipelines."""

    id: str
    question: str
    image_urls: list[str]  # world URLs: the session's question images, img_1.. in order
    image_paths: list[Path]  # their files: the pixels sent to the model
    ground_truth: dict[str, Any]  # {"target", "aliases"}
    answer_in_text: bool  # the answer is a name the tools' text states (not read from pixels): it must be read there


class _Unusable(Exception):
    """Why the teacher's episode cannot be kept (the message is the counter's key)."""


class ModelTeacher:
    """Runs one task's episode with the model (see the module docstring)."""

    def __init__(self, client: ToolServerClient, config: JudgeConfig, http: aiohttp.ClientSession,
                 protocol: Protocol, *, max_turns: int | None = None) -> None:
        if not config.url:
            raise ValueError("a model teacher needs a chat-completions base URL")
        self.client, self.config, self.http, self.protocol = client, config, http, protocol
        self.max_turns = PROTOCOL_DEFAULTS[protocol]["max_turns"] if max_turns is None else max_turns
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        self.usage = Usage()
        self._tools: list[dict[str, Any]] | None = None

    async def episode(self, brief: Brief) -> TrajectoryRecord:
        """The teacher's episode, answered; raises :class:`_Unusable` when it cannot be kept."""
        if self._tools is None:
            self._tools = await self.client.list_tools(self.protocol)
        question = [*map(image_part, brief.image_paths), {"type": "text", "text": brief.question}]
        messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(self.protocol, self._tools)},
                                          {"role": "user", "content": question}]
        async with opened(self.client, brief.image_urls) as (episode, _):
            for turn in range(self.max_turns):
                final = turn == self.max_turns - 1
                if final:
                    messages.append({"role": "user", "content": final_turn_instruction(self.protocol)})
                native = self._tools if self.protocol == "neos" and not final else None
                message = await self._ask(messages, native)
                text = self._text(message)
                parsed = parse_turn(self.protocol, text)
                if parsed.error is not None:
                    raise _Unusable(f"malformed_turn:{parsed.error.type}")
                if parsed.answer is not None:
                    if not answer_matches(parsed.answer, brief.ground_truth):
                        raise _Unusable("wrong_answer")
                    if brief.answer_in_text and not _read(episode, brief.ground_truth):
                        raise _Unusable("ungrounded_answer")
                    episode.answer(text)
                    return episode.record(self.protocol, brief.question, brief.id, parsed.answer)
                if final:
                    raise _Unusable("no_answer")
                call = parsed.calls[0]
                if message.get("tool_calls"):  # recorded as a Hermes-style template renders it: arguments decoded
                    text = _content(message) + _tagged(call.name, call.arguments)
                result = await episode.call(call.name, call.arguments, pixels=True, text=text)
                if result is None:
                    raise _Unusable("call_error")
                messages += self._exchange(turn, message, text, call.name, call.arguments, result)
        raise AssertionError("unreachable: the final turn answers or raises")

    async def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        for attempt in range(1 + self.config.max_retries):
            if attempt:
                await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
            self.usage.calls += 1
            try:
                return await chat_message(self.http, self.config, messages, tools)
            except aiohttp.ClientResponseError as err:
                if 400 <= err.status < 500 and err.status not in (408, 429):  # e.g. a context overflow: final
                    raise _Unusable(f"http_{err.status}") from None
            except (aiohttp.ClientError, TimeoutError):
                continue
            except ValueError:  # JudgeReplyError, or a body that is not JSON at all
                raise _Unusable("not_a_completion") from None
        raise _Unusable("transport")

    def _text(self, message: dict[str, Any]) -> str:
        """The turn as text the rollout's parser reads: native calls written as the ``<tool_call>`` JSON a
        Hermes-style chat template renders them as."""
        calls = (message.get("tool_calls") or []) if self.protocol == "neos" else []
        if not isinstance(calls, list):
            raise _Unusable("not_a_completion")
        bodies = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                raise _Unusable("malformed_turn:malformed_call")
            bodies.append(_tagged(function.get("name"), function.get("arguments")))
        return _content(message) + "".join(bodies)

    def _exchange(self, turn: int, message: dict[str, Any], text: str, name: str, arguments: dict[str, Any],
                  result: CallResult) -> list[dict[str, Any]]:
        """The assistant turn and the tool turn as the model is shown them next: each loaded image's id, then its
        pixels, then the observation text (as the agent loop builds tool turns)."""
        observation: list[dict[str, Any]] = []
        for image in result.images:
            observation += [{"type": "text", "text": f"{image.ref}:"}, *([png_part(image.png)] if image.png else [])]
        observation.append({"type": "text", "text": result.text})
        if self.protocol != "neos":
            return [{"role": "assistant", "content": text}, {"role": "tool", "content": observation}]
        calls = message.get("tool_calls") or []
        call_id = str((calls[0].get("id") if calls else None) or f"call_{turn}")
        native = {"id": call_id, "type": "function",
                  "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
        return [{"role": "assistant", "content": text.split("<tool_call>")[0].strip(), "tool_calls": [native]},
                {"role": "tool", "tool_call_id": call_id, "content": observation}]


def _read(episode: Episode, ground_truth: dict[str, Any]) -> bool:
    """Some observation of the episode names the answer or an alias: it was found, not guessed (Neos App. A, step 8)."""
    names = [n for n in (ground_truth["target"], *ground_truth.get("aliases", [])) if n.strip()]
    return any(found(name, call.observation) for turn in episode.turns for call in turn.calls for name in names)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise _Unusable("not_a_completion")
    return content


def _tagged(name: Any, arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


class TeacherExpert:
    """The teacher first, then the programmatic ``fallback`` for any task whose teacher episode cannot be kept.

    ``brief(task)`` describes the task to the teacher; ``exportable(task, trajectory_json)`` raises ``ValueError``
    when the pipeline's SFT export cannot turn the episode into a row (e.g. pixels of a crop), which also falls back.
    """

    def __init__(self, teacher: ModelTeacher, fallback: Expert, brief: Callable[[Any], Brief],
                 exportable: Callable[[Any, dict[str, Any]], object]) -> None:
        self.teacher, self.fallback, self.brief, self.exportable = teacher, fallback, brief, exportable
        self.name = f"model_teacher({teacher.config.model})"
        self.episodes = 0

    async def solve(self, task: Any) -> tuple[bool, TrajectoryRecord, str]:
        """(solved, trajectory, why it failed or ''): the teacher's episode, or the fallback's."""
        self.episodes += 1
        try:
            record = await self.teacher.episode(self.brief(task))
            try:
                self.exportable(task, record.model_dump(mode="json"))
            except ValueError:
                raise _Unusable("not_exportable") from None
        except _Unusable as reason:
            self.teacher.usage.fallbacks[str(reason)] += 1
            return await self.fallback.solve(task)
        return True, record, ""

    def report(self) -> dict[str, Any]:
        """Chat requests, episodes, episodes kept, fallbacks to the programmatic expert by reason."""
        usage = self.teacher.usage.report()
        return {"model": self.teacher.config.model, "episodes": self.episodes,
                "kept": self.episodes - usage["fallbacks"], **usage}


@dataclass(frozen=True)
class TeacherSettings:
    chat: JudgeConfig
    max_turns: int | None = None  # None: the protocol's

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TeacherSettings | None:
        """From the flags (None: no teacher). A turn may reason at length before its call, hence the budgets."""
        if not args.teacher_url:
            return None
        chat = JudgeConfig(url=args.teacher_url, model=args.teacher_model, max_tokens=2048, timeout_s=300.0)
        return cls(chat, args.teacher_max_turns)

    def expert(self, client: ToolServerClient, http: aiohttp.ClientSession, protocol: Protocol, fallback: Expert,
               brief: Callable[[Any], Brief], exportable: Callable[[Any, dict[str, Any]], object]) -> TeacherExpert:
        teacher = ModelTeacher(client, self.chat, http, protocol, max_turns=self.max_turns)
        return TeacherExpert(teacher, fallback, brief, exportable)
