"""Reading one assistant turn under each protocol (no verl import): a tool call, a final answer, or a format error.

Neos (the papers' tool protocols): one native function call (Qwen/Hermes ``<tool_call>{"name", "arguments"}</tool_call>``) or the final
answer as plain text; reasoning in ``<think>`` is dropped. ModalSearcher: a reasoning block, then exactly one
``<tool_call>`` JSON or one ``<answer>``. Anything else is a :class:`FormatError` that the loop shows to the policy as
an observation (agent-caused), never an exception out of the rollout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Protocol = Literal["neos", "modalsearch"]

_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_MODALSEARCH_TURN = re.compile(
    r"\A\s*<(think|thinking)>(?P<reason>.*?)</\1>\s*"
    r"(?:<tool_call>(?P<call>.*?)</tool_call>|<answer>(?P<answer>.*?)</answer>)\s*\Z",
    re.DOTALL,
)
_MODALSEARCH_TAGS = ("<think>", "<thinking>", "<tool_call>", "<answer>")


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FormatError:
    type: str  # malformed_call, too_many_calls, empty_turn, bad_format
    message: str  # shown to the policy
    raw: str = ""  # the offending text, for the record


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    error: FormatError | None = None


def _decode_call(body: str) -> ToolCall | FormatError:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return FormatError("malformed_call", f"the tool call is not valid JSON ({e.msg} at char {e.pos})", body)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
        return FormatError(
            "malformed_call", 'a tool call must be a JSON object {"name": ..., "arguments": {...}}', body
        )
    arguments = call["arguments"]
    if isinstance(arguments, str):  # some chat formats carry arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return FormatError("malformed_call", f"arguments of {call['name']!r} must be a JSON object", body)
    return ToolCall(call["name"], arguments)


def parse_neos_turn(text: str, *, max_calls: int = 1) -> ParsedTurn:
    visible = _THINK_BLOCK.sub("", text)
    if "<think>" in visible or "<thinking>" in visible:
        return ParsedTurn(error=FormatError("bad_format", "the reasoning block is not closed", text))
    bodies = _TOOL_CALL.findall(visible)
    rest = _TOOL_CALL.sub("", visible)
    if "<tool_call>" in rest or "</tool_call>" in rest:
        return ParsedTurn(error=FormatError("malformed_call", "a <tool_call> tag is not closed", text))
    if not bodies:
        answer = rest.replace("</think>", "").replace("</thinking>", "").strip()
        if not answer:
            return ParsedTurn(error=FormatError("empty_turn", "the turn has neither a tool call nor an answer", text))
        return ParsedTurn(answer=answer)
    if len(bodies) > max_calls:
        return ParsedTurn(
            error=FormatError("too_many_calls", f"{len(bodies)} tool calls in one turn; at most {max_calls}", text)
        )
    calls = []
    for body in bodies:
        decoded = _decode_call(body)
        if isinstance(decoded, FormatError):
            return ParsedTurn(error=decoded)
        calls.append(decoded)
    return ParsedTurn(calls=calls)


def parse_modalsearch_turn(text: str) -> ParsedTurn:
    match = _MODALSEARCH_TURN.match(text)
    # The lazy groups would let a second tag hide inside the reasoning or call body: count the tags explicitly.
    if match is None or sum(text.count(tag) for tag in _MODALSEARCH_TAGS) != 2:
        return ParsedTurn(
            error=FormatError(
                "bad_format",
                "write reasoning in <think>...</think>, then exactly one <tool_call>{...}</tool_call> or "
                "<answer>...</answer>",
                text,
            )
        )
    if not match.group("reason").strip():
        return ParsedTurn(error=FormatError("bad_format", "the reasoning block is empty", text))
    if match.group("answer") is not None:
        answer = match.group("answer").strip()
        if not answer:
            return ParsedTurn(error=FormatError("empty_turn", "the <answer> block is empty", text))
        return ParsedTurn(answer=answer)
    decoded = _decode_call(match.group("call"))
    if isinstance(decoded, FormatError):
        return ParsedTurn(error=decoded)
    return ParsedTurn(calls=[decoded])


def parse_turn(protocol: Protocol, text: str, *, max_calls: int = 1) -> ParsedTurn:
    if protocol == "neos":
        return parse_neos_turn(text, max_calls=max_calls)
    return parse_modalsearch_turn(text)
