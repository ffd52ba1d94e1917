"""Request bodies, checked: JSON objects in general and the tool call's ``{name, arguments, turn, include_pixels}``.

A rollout repeats calls byte for byte (a group's members searching the same query), and once such a call's answer is
cached, checking its body again costs more than the answer. :class:`CallMemo` keeps the checked :class:`ToolCall` of
recent bodies, so a repeated body skips JSON decoding, the argument check and (``ToolCall.key``) the cache-key hash. A
checked call depends on its body alone, never on the session, so sharing it between sessions is safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tool_server.cache import LRU
from tool_server.errors import ToolError
from tool_server.limits import quote
from tool_server.protocol import validate

CALL_FIELDS = frozenset({"name", "arguments", "turn", "include_pixels"})


def json_object(raw: bytes, *, optional: bool) -> dict[str, Any]:
    """``raw`` decoded as a JSON object (an empty body is ``{}`` when ``optional``); else ``invalid_request``."""
    if not raw.strip():
        if optional:
            return {}
        raise ToolError("invalid_request", "request body must be a JSON object", "body")
    try:
        body = orjson.loads(raw)  # a fifth of json.loads' cost; NaN and Infinity are not JSON here either
    except orjson.JSONDecodeError as e:
        raise ToolError("invalid_request", f"request body is not valid JSON: {e}", "body") from None
    if not isinstance(body, dict):
        raise ToolError("invalid_request", "request body must be a JSON object", "body")
    return body


def check_keys(body: dict[str, Any], allowed: frozenset[str] | set[str]) -> None:
    if extra := sorted(set(body) - allowed):
        raise ToolError(
            "invalid_request", f"unexpected field {quote(extra[0])}; allowed: {', '.join(sorted(allowed))}", extra[0]
        )


@dataclass(slots=True)
class ToolCall:
    """A checked call. ``arguments`` may be shared by every session that sends the same body: handlers only read it."""

    name: str
    arguments: dict[str, Any]
    turn: int | None
    include_pixels: bool
    key: tuple[str, str | None, str] | None = None  # (tool variant, scope, cache key) of the last lookup


def parse_call(body: dict[str, Any]) -> ToolCall:
    """The call of a decoded body whose keys passed :func:`check_keys`; ``ToolError`` names the first bad field."""
    turn, include_pixels = body.get("turn"), body.get("include_pixels", False)
    if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool) or turn < 0):
        raise ToolError("invalid_request", "turn must be a non-negative integer", "turn")
    if not isinstance(include_pixels, bool):
        raise ToolError("invalid_request", "include_pixels must be true or false", "include_pixels")
    name = body.get("name")
    return ToolCall(name, validate(name, body.get("arguments", {})), turn, include_pixels)


class CallMemo:
    """The checked :class:`ToolCall` of recent bodies, by their bytes; bodies over ``max_body`` bytes are not kept,
    so the memo holds at most ``max_items * max_body`` bytes of keys."""

    def __init__(self, max_items: int = 4096, max_body: int = 4096) -> None:
        self._calls: LRU[bytes, ToolCall] = LRU(max_items)
        self._max_body = max_body

    def get(self, raw: bytes) -> ToolCall | None:
        return self._calls.get(raw)

    def put(self, raw: bytes, call: ToolCall) -> None:
        if len(raw) <= self._max_body:
            self._calls.put(raw, call)

    def __len__(self) -> int:
        return len(self._calls)
