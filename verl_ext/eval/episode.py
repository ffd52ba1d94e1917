"""One evaluation episode: a policy behind an OpenAI-compatible endpoint, our tool server, the rollout's rules.

The endpoint sees chat messages, not token ids, so this is the message-level counterpart of the agent loops in
``verl_ext.rollout.agent_loop`` with their parts: the tool session (``ToolSession``: schema checks, errors classified
agent/tool), the turn parser of each protocol (``parse_turn``), the protocol prompts and final-turn instruction, the
per-protocol turn limits and error-streak rule (``PROTOCOL_DEFAULTS``), verl's observation truncation, and the
``TrajectoryRecord`` every consumer reads. Protocols:

- ``neos``: the tool schemas are offered as native ``tools``; a reply's ``tool_calls`` are the turn's calls (a
  server without a tool parser may write ``<tool_call>`` JSON in the text; both read the same); the observation
  goes back as a ``tool`` message with the call's id.
- ``modalsearch``: ReAct text with the tools listed in the system prompt; the observation goes back as the user
  turn ``<tool_response>...</tool_response>`` that Qwen's template renders a tool message as, so that any chat server
  takes it (a ``tool`` message without a native call is refused by strict servers).

Images: question images and images a call loads go to the model as data URLs, each after its register id, and are
saved once by content under the run's ``images/`` for the report. The last turn offers no tools and asks for the
answer. A reply the endpoint refuses with a 4xx other than 408/429 after the first turn (vLLM's answer to a context
overflow) ends the episode as ``context``; transport failures after ``1 + max_retries`` attempts raise
:class:`PolicyUnavailable` (the harness records a retryable error, never a wrong answer).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

import aiohttp
from PIL import Image

from tool_server.offline.pixels import open_flattened
from verl_ext.eval.benchmarks import EvalItem, ImageRef
from verl_ext.reward.judge import JudgeConfig, chat_reply, png_part
from verl_ext.rollout.agent_loop import truncate
from verl_ext.rollout.prompts import final_turn_instruction, system_prompt
from verl_ext.rollout.protocols import FormatError, Protocol, ToolCall, parse_turn
from verl_ext.rollout.record import CallRecord, ImageEntry, TerminationReason, TrajectoryRecord, TurnRecord
from verl_ext.rollout.settings import PROTOCOL_DEFAULTS
from verl_ext.rollout.tool_backend import CallOutcome, ToolSession, tool_catalog


class PolicyUnavailable(RuntimeError):
    """The policy endpoint could not be reached or answered garbage: an infrastructure error, retried on restart."""


@dataclass(frozen=True)
class PolicySettings:
    chat: JudgeConfig  # url, model, max_tokens per turn, timeout, retries
    sampling: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, ... sent with every request
    max_turns: int | None = None  # None: the protocol's (Neos 50, ModalSearcher 46)
    max_observation_chars: int = 8192
    truncate_side: str = "middle"
    call_timeout_s: float = 120.0
    max_concurrent_calls: int = 64


@dataclass
class TurnStat:
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float  # the policy's reply time


@dataclass
class EpisodeResult:
    record: TrajectoryRecord
    turn_stats: list[TurnStat]
    image_files: dict[str, str]  # register ref -> file name under the images dir
    response: str  # the final answer the judge sees ('' without one)


async def image_bytes(ref: ImageRef, http: aiohttp.ClientSession) -> bytes:
    """The encoded file of a question image: the row's bytes, the local file, or a download of its URL."""
    if ref.data:
        return ref.data
    assert ref.path is not None
    if ref.path.startswith(("http://", "https://")):
        async with http.get(ref.path) as resp:
            resp.raise_for_status()
            return await resp.read()
    return await asyncio.to_thread(Path(ref.path).read_bytes)


def save_image(images_dir: Path, data: bytes) -> str:
    """Writes an encoded image once by content and returns its file name (extension from its format)."""
    with Image.open(io.BytesIO(data)) as im:
        extension = (im.format or "png").lower()
    name = f"{hashlib.sha1(data).hexdigest()[:20]}.{extension}"
    target = images_dir / name
    if not target.exists():
        tmp = target.with_name(f"{name}.{uuid4().hex}.tmp")  # episodes may save the same picture at once
        tmp.write_bytes(data)
        tmp.replace(target)
    return name


def _save_pixels(images_dir: Path, image: Image.Image) -> str:
    return save_image(images_dir, _png(image))


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def turn_text(message: dict[str, Any]) -> str:
    """The reply as the rollout's parser reads it: native calls written as the ``<tool_call>`` JSON a Hermes-style
    template renders them as (OpenAI's JSON-string arguments decoded where they parse; otherwise left for the
    parser to report as a malformed call)."""
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        body = {"name": function.get("name"), "arguments": function.get("arguments")} if isinstance(
            function, dict) else call
        if isinstance(body, dict) and isinstance(body.get("arguments"), str):
            try:
                body["arguments"] = json.loads(body["arguments"])
            except json.JSONDecodeError:
                pass
        text += f"<tool_call>{json.dumps(body, ensure_ascii=False)}</tool_call>"
    return text


class Episode:
    """Runs one item under one protocol; one instance per episode."""

    def __init__(self, item: EvalItem, protocol: Protocol, policy: PolicySettings, tool_url: str,
                 http: aiohttp.ClientSession, images_dir: Path, run: int) -> None:
        self.item, self.protocol, self.policy, self.tool_url = item, protocol, policy, tool_url
        self.http, self.images_dir, self.run = http, images_dir, run
        self.max_turns = policy.max_turns or PROTOCOL_DEFAULTS[protocol]["max_turns"]
        self.max_errors = PROTOCOL_DEFAULTS[protocol]["max_consecutive_errors"]
        self.turns: list[TurnRecord] = []
        self.stats: list[TurnStat] = []
        self.register: list[ImageEntry] = []
        self.files: dict[str, str] = {}
        self.tokens = 0

    async def run_episode(self) -> EpisodeResult:
        catalog = await tool_catalog(self.tool_url, self.protocol, self.policy.call_timeout_s)
        session = ToolSession(self.tool_url, catalog, timeout_s=self.policy.call_timeout_s,
                              max_in_flight=self.policy.max_concurrent_calls)
        files = [await image_bytes(ref, self.http) for ref in self.item.images]

        async def question_images() -> list[Image.Image]:  # decoded only if the server refuses a file
            return await asyncio.to_thread(lambda: [open_flattened(f) for f in files])

        refs = await session.open(question_images, None, files)
        try:
            for ref, data in zip(refs, files):
                self.files[ref] = await asyncio.to_thread(save_image, self.images_dir, data)
                self.register.append(ImageEntry(ref=ref, source="question", turn=None, in_context=True))
            user: list[dict[str, Any]] = []
            for ref, data in zip(refs, files):
                user += [{"type": "text", "text": f"{ref}:"}, png_part(data, _mime(data))]
            user.append({"type": "text", "text": self.item.question})
            messages = [{"role": "system", "content": system_prompt(self.protocol, catalog.schemas)},
                        {"role": "user", "content": user}]
            termination, answer = await self._loop(messages, session, catalog.schemas)
        finally:
            await session.close()
        record = TrajectoryRecord(
            protocol=self.protocol, question=self.item.question, session_id=None,
            group_id=f"{self.item.benchmark}/{self.item.item_id}", mei_version=_mei_version(self.turns),
            termination_reason=termination,
            error_class_ended=self.turns[-1].error_class if termination in ("agent_errors", "tool_errors") else None,
            final_answer=answer, images=self.register, turns=self.turns)
        return EpisodeResult(record, self.stats, self.files, answer or "")

    async def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   turn: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The reply and usage; None when the endpoint refuses the context (a 4xx after the first turn)."""
        config = self.policy.chat
        for attempt in range(1 + config.max_retries):
            if attempt:
                await asyncio.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
            try:
                return await chat_reply(self.http, config, messages, tools, self.policy.sampling)
            except aiohttp.ClientResponseError as err:
                if 400 <= err.status < 500 and err.status not in (408, 429):
                    if turn:
                        return None
                    raise PolicyUnavailable(f"policy refused the first request: HTTP {err.status}") from None
                error = f"HTTP {err.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                error = f"{type(err).__name__}: {err}"
            except ValueError as err:  # not a completion
                error = f"{type(err).__name__}: {err}"
        raise PolicyUnavailable(f"policy unavailable after {1 + config.max_retries} attempts ({error[:200]})")

    async def _loop(self, messages: list[dict[str, Any]], session: ToolSession,
                    schemas: list[dict[str, Any]]) -> tuple[TerminationReason, str | None]:
        streak = 0
        for turn in range(self.max_turns):
            final = turn == self.max_turns - 1
            if final:
                messages.append({"role": "user", "content": final_turn_instruction(self.protocol)})
            tools = schemas if self.protocol == "neos" and not final else None
            start = time.perf_counter()
            reply = await self._ask(messages, tools, turn)
            if reply is None:
                return "context", None
            message, usage = reply
            completion = usage.get("completion_tokens")
            self.stats.append(TurnStat(usage.get("prompt_tokens"), completion, time.perf_counter() - start))
            span = (self.tokens, self.tokens + int(completion or 0))
            self.tokens = span[1]
            text = turn_text(message)
            parsed = parse_turn(self.protocol, text)
            base = {"index": turn, "span": span, "text": text, "tools_enabled": not final}
            if parsed.answer is not None:
                self.turns.append(TurnRecord(**base, outcome="answer"))
                return "answer", parsed.answer
            if final:
                error = parsed.error.type if parsed.error else "tools_disabled"
                self.turns.append(TurnRecord(**base, outcome="no_action", error_class="agent", error_type=error))
                return "max_turns", None
            if parsed.error is not None:
                outcome = CallOutcome(False, f"Error ({parsed.error.type}): {parsed.error.message}",
                                      error_class="agent", error_type=parsed.error.type)
                record = TurnRecord(**base, outcome="no_action", error_class="agent", error_type=parsed.error.type)
                call = None
            else:
                call = parsed.calls[0]
                outcome = await session.call(call, turn)
                record = self._call_turn(base, call, outcome)
                for ref, image in outcome.images:
                    self.files[ref] = await asyncio.to_thread(_save_pixels, self.images_dir, image)
                    self.register.append(ImageEntry(ref=ref, source=call.name, turn=turn, in_context=True))
            self.turns.append(record)
            messages += self._exchange(turn, message, text, call, outcome, parsed.error)
            streak = streak + 1 if record.error_class else 0
            if self.max_errors is not None and streak >= self.max_errors:
                return ("agent_errors" if record.error_class == "agent" else "tool_errors"), None
        raise AssertionError("unreachable: the final turn returns")

    def _call_turn(self, base: dict[str, Any], call: ToolCall, o: CallOutcome) -> TurnRecord:
        observation = truncate(o.text, self.policy.max_observation_chars, self.policy.truncate_side)
        record = CallRecord(tool_name=call.name, arguments=call.arguments, ok=o.ok, error_class=o.error_class,
                            error_type=o.error_type, observation=observation,
                            images_added=[ref for ref, _ in o.images], latency_s=o.latency_s,
                            mei_call_ids=[m["call_id"] for m in o.mei], mei_versions=[m["version"] for m in o.mei],
                            cached=o.cached)
        if o.ok:
            return TurnRecord(**base, outcome="call_ok", calls=[record])
        return TurnRecord(**base, outcome="call_error", calls=[record], error_class=o.error_class,
                          error_type=o.error_type)

    def _exchange(self, turn: int, message: dict[str, Any], text: str, call: ToolCall | None, o: CallOutcome,
                  error: FormatError | None) -> list[dict[str, Any]]:
        """The assistant turn and the observation as the model is shown them next (images after their ids)."""
        observation: list[dict[str, Any]] = []
        for ref, image in o.images:
            observation += [{"type": "text", "text": f"{ref}:"}, png_part(_png(image))]
        shown = truncate(o.text, self.policy.max_observation_chars, self.policy.truncate_side)
        if self.protocol != "neos":
            observation.insert(0, {"type": "text", "text": "<tool_response>\n"})
            observation.append({"type": "text", "text": f"{shown}\n</tool_response>"})
            return [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
        observation.append({"type": "text", "text": shown})
        if call is None:  # a format error: no call to answer, the error goes back as the user's turn
            return [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
        calls = message.get("tool_calls") or []
        call_id = str((calls[0].get("id") if calls and isinstance(calls[0], dict) else None) or f"call_{turn}")
        native = {"id": call_id, "type": "function",
                  "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
        return [{"role": "assistant", "content": text.split("<tool_call>")[0].strip(), "tool_calls": [native]},
                {"role": "tool", "tool_call_id": call_id, "content": observation}]


def _mime(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as im:
        return Image.MIME.get(im.format or "PNG", "image/png")


def _mei_version(turns: list[TurnRecord]) -> str | None:
    return next((v for t in turns for c in t.calls for v in c.mei_versions), None)
