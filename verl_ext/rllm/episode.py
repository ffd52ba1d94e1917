"""One search episode over the tool server, driven turn by turn from outside (no verl, no rLLM import).

The rLLM adapters (``env``, ``workflow``, ``flow``) own the model calls; this owns the protocol, exactly as our verl
agent loops run it: the session and its visual register (question images are img_1..), parsing each assistant turn
(``verl_ext.rollout.protocols``), schema checks and error classes (``verl_ext.rollout.tool_backend``), the images a
call loads, the turn budget with its tools-disabled last turn, ModalSearcher's error streak, and the reward at the
end (``verl_ext.reward.outcome``).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tool_server.offline.pixels import open_flattened
from verl_ext.reward.judge import AnswerJudge, JudgeConfig
from verl_ext.reward.outcome import score_turns
from verl_ext.rollout.prompts import final_turn_instruction, system_prompt
from verl_ext.rollout.protocols import Protocol, ToolCall, parse_turn
from verl_ext.rollout.settings import PROTOCOL_DEFAULTS, URL_ENV, truncate
from verl_ext.rollout.tool_backend import CallOutcome, ToolSession, tool_catalog
from verl_ext.tools.client import ToolServerClient
from verl_ext.tools.shards import server_urls

# The dataset's ``agent_name`` column (data generation writes it) names the protocol of a row.
PROTOCOL_OF_AGENT: dict[str, Protocol] = {"neos_search_agent": "neos", "modalsearch_react_agent": "modalsearch"}
DEFAULT_URL = "http://127.0.0.1:8080"
# Our termination reasons (verl_ext.rollout.record) as the names of rLLM's ``TerminationReason``.
RLLM_TERMINATION: dict[str, str] = {
    "answer": "ENV_DONE",
    "agent_errors": "ENV_DONE",
    "tool_errors": "ENV_DONE",
    "max_turns": "MAX_TURNS_EXCEEDED",
    "response_length": "MAX_RESPONSE_LENGTH_EXCEEDED",
    "context": "MAX_PROMPT_LENGTH_EXCEEDED",
}


class SearchSettings(BaseModel):
    """Per-protocol defaults are the papers' (``PROTOCOL_DEFAULTS``: Neos 50 turns; ModalSearcher 46 turns, 3
    consecutive errors end an episode, tool results shared within a group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Protocol
    tool_server_url: str = Field(default_factory=lambda: os.environ.get(URL_ENV) or DEFAULT_URL, min_length=1)
    max_turns: int = Field(ge=1)
    max_consecutive_errors: int | None = Field(None, ge=1)
    group_cache: bool = False
    max_parallel_calls: int = Field(1, ge=1)
    max_observation_chars: int = Field(8192, ge=16)
    truncate_side: Literal["left", "right", "middle"] = "middle"
    call_timeout_s: float = Field(120.0, gt=0)
    max_concurrent_calls: int = Field(256, ge=1)
    system_prompt: str | None = None
    final_instruction: str = ""
    judge: dict[str, Any] = Field(default_factory=dict)  # JudgeConfig keys; no url: the rule matcher decides

    @field_validator("tool_server_url")
    @classmethod
    def _one_server(cls, value: str) -> str:
        if len(server_urls(value)) > 1:
            raise ValueError(f"rLLM episodes use one tool server (its own connection pool); got several: {value!r}")
        return value

    @classmethod
    def for_protocol(cls, protocol: Protocol, **overrides: Any) -> SearchSettings:
        return cls.model_validate({"protocol": protocol, **PROTOCOL_DEFAULTS[protocol], **overrides})

    def judge_config(self) -> JudgeConfig:
        return JudgeConfig.from_mapping(self.judge)


@dataclass(frozen=True)
class SearchTask:
    """What an episode needs from a dataset row: the question, its images as encoded files, the reference."""

    question: str
    ground_truth: Any
    images: tuple[bytes, ...] = ()
    protocol: Protocol | None = None  # the row's own (its agent_name), if it names one
    group_id: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], base_dir: Path | None = None) -> SearchTask:
        """A row of our task parquet (verl's ``prompt``/``images``/``reward_model``/``extra_info`` columns) or of the
        rLLM benchmark export (``question``, ``images`` as paths under ``base_dir``, ``ground_truth``), as a plain
        dict, an HF datasets row (images may be decoded PIL images) or a pandas row (list cells are numpy arrays)."""
        row = plain(row)
        extra = row.get("extra_info") or {}
        question = row.get("question") or extra.get("question") or _prompt_text(row.get("prompt"))
        if not question:
            raise ValueError("task row has no question (question, extra_info.question or a user prompt message)")
        ground_truth = ground_truth_of(row)
        agent = row.get("agent_name")
        protocol = PROTOCOL_OF_AGENT.get(agent) if agent else None
        if agent and protocol is None:
            raise ValueError(f"task row's agent_name {agent!r} is none of {sorted(PROTOCOL_OF_AGENT)}")
        images = tuple(_image_file(item, base_dir) for item in list(row.get("images") or []))
        return cls(str(question), ground_truth, images, protocol, row.get("group_id"))


def plain(value: Any) -> Any:
    """``value`` as plain Python, recursively: a pandas row as a dict, numpy arrays and scalars (pandas' cells) as
    lists and numbers, so that rows from pandas, HF datasets and dicts read alike (``array or []`` raises)."""
    if hasattr(value, "to_dict"):  # a pandas Series
        value = value.to_dict()
    if hasattr(value, "tolist"):  # a numpy array or scalar
        value = value.tolist()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def ground_truth_of(row: Mapping[str, Any]) -> Any:
    """The reference answer of a task row: ``ground_truth`` (benchmark export) or ``reward_model.ground_truth``."""
    row = plain(row)
    ground_truth = row.get("ground_truth", (row.get("reward_model") or {}).get("ground_truth"))
    if ground_truth is None:
        raise ValueError("task row has no ground_truth (ground_truth or reward_model.ground_truth)")
    return ground_truth


def _prompt_text(prompt: Any) -> str:
    for message in reversed(list(prompt) if prompt is not None else []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content.replace("<image>", "").strip()
            return " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, Mapping)).strip()
    return ""


def _image_file(item: Any, base_dir: Path | None) -> bytes:
    """An encoded image file from a parquet cell (``{"bytes": ...}``), raw bytes, a data URI, a path or a PIL image
    (HF datasets' ``Image`` feature decodes to one)."""
    if isinstance(item, Mapping):
        item = item.get("bytes") or item.get("path") or item.get("image")
    if isinstance(item, Image.Image):
        return png_bytes(item)
    if isinstance(item, bytes | bytearray):
        return bytes(item)
    if isinstance(item, str) and item.startswith("data:"):
        return base64.b64decode(item.split(",", 1)[1])
    if isinstance(item, str):
        path = Path(item) if base_dir is None else base_dir / item
        return path.read_bytes()
    raise ValueError(f"unsupported question image {type(item).__name__}: give bytes, a data URI or a file path")


@dataclass(frozen=True)
class Observation:
    """What one call returned to the policy: its text and the images it loaded, as (register ref, pixels)."""

    text: str
    images: tuple[tuple[str, Image.Image], ...] = ()
    call_id: str | None = None  # the OpenAI tool_call id the observation answers (native calls), if any

    @property
    def refs(self) -> list[str]:
        return [ref for ref, _ in self.images]

    def labelled_text(self) -> str:
        """The text, preceded by the refs of the images shown with it (they render before the text)."""
        if not self.images:
            return self.text
        return f"Images shown above, in order: {', '.join(self.refs)}.\n{self.text}"


@dataclass
class SearchEpisode:
    """Use: ``await open()``; per turn, if ``final_turn`` show ``final_instruction``, generate, ``await act(text)``
    (observations to show, or None when the episode ended); then ``await score(judge)`` and ``await close()``."""

    task: SearchTask
    settings: SearchSettings
    client: ToolServerClient | None = None  # a pool the caller owns; default: the process's shared one
    turn: int = 0
    turn_texts: list[str] = field(default_factory=list)
    answer: str | None = None
    termination_reason: str = "max_turns"
    done: bool = False
    error_streak: int = 0
    register: list[str] = field(default_factory=list)  # refs the session holds, question images first
    calls: list[dict[str, Any]] = field(default_factory=list)  # per call: turn, name, ok, error class/type, refs
    question_images: list[Image.Image] = field(default_factory=list)  # decoded, in register order
    _session: ToolSession | None = field(default=None, init=False, repr=False)
    _schemas: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)

    @property
    def protocol(self) -> Protocol:
        return self.settings.protocol

    async def open(self) -> list[str]:
        """Opens the session with the question images (img_1..); returns their refs."""
        s = self.settings
        catalog = await tool_catalog(s.tool_server_url, s.protocol, s.call_timeout_s, self.client)
        self._schemas = catalog.schemas
        self._session = ToolSession(
            s.tool_server_url,
            catalog,
            timeout_s=s.call_timeout_s,
            max_in_flight=s.max_concurrent_calls,
            client=self.client,
        )
        group_id = self.task.group_id if s.group_cache else None
        images = await asyncio.to_thread(lambda: [open_flattened(b) for b in self.task.images])

        async def policy_images() -> list[Image.Image]:
            return images

        self.register = list(await self._session.open(policy_images, group_id, list(self.task.images)))
        self.question_images = images
        return self.register

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    @property
    def native_tools(self) -> list[dict[str, Any]] | None:
        """Neos passes its tools natively (the chat template lists them); ModalSearcher lists them in the prompt."""
        return self._schemas if self.protocol == "neos" else None

    @property
    def system_prompt(self) -> str:
        return self.settings.system_prompt or system_prompt(self.protocol, self._schemas)

    @property
    def final_turn(self) -> bool:
        return self.turn == self.settings.max_turns - 1

    @property
    def final_instruction(self) -> str:
        return self.settings.final_instruction or final_turn_instruction(self.protocol)

    async def act(self, text: str) -> list[Observation] | None:
        """Runs one assistant turn written as ``text`` (Qwen's form: ``<tool_call>`` JSON for calls; see
        ``assistant_text`` for OpenAI-native calls). Returns the observations to show, or None when it ended."""
        if self.done:
            raise RuntimeError("the episode has ended; score and close it")
        s, turn = self.settings, self.turn
        self.turn_texts.append(text)
        self.turn += 1
        parsed = parse_turn(self.protocol, text, max_calls=s.max_parallel_calls)
        if parsed.answer is not None:
            return self._end("answer", answer=parsed.answer)
        if turn == s.max_turns - 1:  # tools are disabled in the last turn: a call here is not run
            return self._end("max_turns")
        if parsed.error is not None:
            error = parsed.error
            outcomes = [CallOutcome(False, f"Error ({error.type}): {error.message}", error_class="agent",
                                    error_type=error.type)]
            calls: list[ToolCall] = []
        else:
            calls = parsed.calls
            outcomes = await asyncio.gather(*(self._session.call(c, turn) for c in calls))
        failed = next((o for o in outcomes if not o.ok), None)
        self.error_streak = self.error_streak + 1 if failed else 0
        for call, o in zip(calls, outcomes):
            self.register += [ref for ref, _ in o.images]
            self.calls.append({"turn": turn, "name": call.name, "ok": o.ok, "error_class": o.error_class,
                               "error_type": o.error_type, "images": [ref for ref, _ in o.images]})
        if s.max_consecutive_errors is not None and self.error_streak >= s.max_consecutive_errors:
            return self._end("agent_errors" if failed.error_class == "agent" else "tool_errors")
        return [
            Observation(truncate(o.text, s.max_observation_chars, s.truncate_side), tuple(o.images))
            for o in outcomes
        ]

    def _end(self, reason: str, answer: str | None = None) -> None:
        self.termination_reason, self.answer, self.done = reason, answer, True

    def end_early(self, reason: str) -> None:
        """The driver stopped the episode (context or response budget, timeout): record why."""
        if not self.done:
            self._end(reason)

    async def score(self, judge: AnswerJudge) -> tuple[float, dict[str, Any]]:
        """The reward our verl reward managers give this episode (``neos_answer_judge`` / ``modalsearch_reward``)."""
        return await score_turns(
            judge,
            self.protocol,
            [t for t in self.turn_texts if t.strip()],
            question=self.task.question,
            ground_truth=self.task.ground_truth,
            termination_reason=self.termination_reason,
        )

    def summary(self) -> dict[str, Any]:
        """Plain-JSON facts of the episode for rLLM's ``info``/``metadata`` fields."""
        return {
            "protocol": self.protocol,
            "termination_reason": self.termination_reason,
            "final_answer": self.answer,
            "turns": self.turn,
            "register": list(self.register),
            "calls": list(self.calls),
        }

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def native_calls(tool_calls: Iterable[Any]) -> list[dict[str, Any]]:
    """A turn's native tool calls in OpenAI's dict form, ``{"id", "type": "function", "function": {"name",
    "arguments"}}``, from whatever form an engine returned: OpenAI's objects (``ChatCompletionMessageFunctionToolCall``,
    ``.function.name``; rLLM's ``OpenAIEngine`` in chat mode), rLLM's ``ToolCall`` (``.name``; its chat parsers, as
    in ``VerlEngine``) or dicts of either shape. ``id`` is None where the engine gives none (calls parsed from text)."""
    calls = []
    for call in tool_calls:
        fn = _field(call, "function") or call
        calls.append({"id": _field(call, "id"), "type": "function",
                      "function": {"name": _field(fn, "name"), "arguments": _field(fn, "arguments")}})
    return calls


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def assistant_text(content: str | None, tool_calls: Iterable[Any] = ()) -> str:
    """An assistant turn in Qwen's text form from an OpenAI-style message: the content, then each native call (any
    form ``native_calls`` reads) as ``<tool_call>{"name", "arguments"}</tool_call>`` (arguments may arrive as a JSON
    string), so that both protocols' parsers and the reward read one form whichever API produced the turn."""
    parts = [content or ""]
    for call in native_calls(tool_calls):
        fn = call["function"]
        arguments = fn["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass  # the parser reports the malformed call to the policy
        parts.append(
            "<tool_call>\n" + json.dumps({"name": fn["name"], "arguments": arguments}, ensure_ascii=False)
            + "\n</tool_call>"
        )
    return "\n".join(p for p in parts if p)


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def png_data_uri(image: Image.Image) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")
