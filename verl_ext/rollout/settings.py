"""Episode settings of the search agent loops, resolved from verl's own keys and ours (no verl import).

Where verl already has a key, the loop reads it (``rollout.multi_turn.max_assistant_turns``, ``max_parallel_calls``,
``max_tool_response_length``, ``tool_response_truncate_side``, ``rollout.response_length``). Ours live under verl's
extension point ``actor_rollout_ref.rollout.custom.neos_rollout`` (a plain dict), and an ``agent_loop_config_path``
entry may override any of them as constructor keywords. Per-protocol defaults are the papers': Neos 50 turns, no
error streak rule; ModalSearcher 46 turns, 3 consecutive errors end the episode, tool results cached per group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from verl_ext.rollout.prompts import final_turn_instruction
from verl_ext.rollout.protocols import Protocol
from verl_ext.tools.shards import server_urls

CUSTOM_KEY = "neos_rollout"
URL_ENV = "NEOS_TOOL_SERVER_URL"

PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "neos": {"max_turns": 50, "max_consecutive_errors": None, "group_cache": False},
    "modalsearch": {"max_turns": 46, "max_consecutive_errors": 3, "group_cache": True},
}


def truncate(text: str, limit: int, side: str) -> str:
    """verl's ``tool_response_truncate_side`` semantics, so a user's setting means the same in every loop."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


class EpisodeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Protocol
    tool_backend: Literal["server", "verl"] = (
        "server"  # verl: the worker's own verl tools (multi_turn.tool_config_path)
    )
    # required by the server backend: one URL, or several (a list, or comma-separated) to shard sessions over
    tool_server_url: str | list[str] | None = Field(None, min_length=1)
    max_turns: int = Field(ge=1)  # assistant turns; the last one has tools disabled
    max_parallel_calls: int = Field(1, ge=1)  # calls allowed in one turn (both papers: 1)
    max_observation_chars: int = Field(8192, ge=16)  # verl's multi_turn.max_tool_response_length
    truncate_side: Literal["left", "right", "middle"] = "middle"
    call_timeout_s: float = Field(120.0, gt=0)
    max_concurrent_calls: int = Field(256, ge=1)  # tool calls in flight per worker process, all episodes together
    max_consecutive_errors: int | None = Field(None, ge=1)
    group_cache: bool = False  # open sessions with the group uid: rollouts of one question share tool results
    response_budget: int = Field(ge=1)  # response tokens (verl pads to rollout.response_length)
    # Tokens one assistant turn may generate (None: up to what is left of the response budget, the server's cap): a
    # turn is a short reasoning step and one call, and a policy that rambles should not spend a turn's whole budget.
    max_turn_tokens: int | None = Field(None, ge=1)
    final_instruction: str = ""  # appended before the last turn; "" means the protocol's default
    system_prompt: str | None = None  # None: the protocol's default when the dataset prompt has no system message

    @field_validator("tool_server_url", mode="before")
    @classmethod
    def _server_list(cls, value: Any) -> Any:
        """Checked (:func:`server_urls`); a YAML list (an OmegaConf ListConfig here) as a plain list."""
        if value is None:
            return value
        urls = server_urls(value)
        return value if isinstance(value, str) else urls

    def final_turn_text(self) -> str:
        return self.final_instruction or final_turn_instruction(self.protocol)


def resolve_settings(
    protocol: Protocol, rollout_config: Mapping[str, Any], overrides: Mapping[str, Any]
) -> EpisodeSettings:
    """verl's keys, then ``rollout.custom.neos_rollout``, then constructor ``overrides``; unknown keys fail."""
    multi_turn = rollout_config.get("multi_turn") or {}
    values: dict[str, Any] = {"protocol": protocol, **PROTOCOL_DEFAULTS[protocol]}
    if multi_turn.get("max_assistant_turns"):
        values["max_turns"] = multi_turn["max_assistant_turns"]
    for ours, theirs in (
        ("max_parallel_calls", "max_parallel_calls"),
        ("max_observation_chars", "max_tool_response_length"),
        ("truncate_side", "tool_response_truncate_side"),
    ):
        if multi_turn.get(theirs) is not None:
            values[ours] = multi_turn[theirs]
    values["response_budget"] = rollout_config.get("response_length")
    if os.environ.get(URL_ENV):
        values["tool_server_url"] = os.environ[URL_ENV]
    values.update(dict((rollout_config.get("custom") or {}).get(CUSTOM_KEY) or {}))
    values.update(overrides)
    settings = EpisodeSettings.model_validate(values)
    if settings.tool_backend == "server" and not settings.tool_server_url:
        raise ValueError(
            f"no tool server URL: set actor_rollout_ref.rollout.custom.{CUSTOM_KEY}.tool_server_url or ${URL_ENV} "
            f"(or tool_backend: verl to use the tools of multi_turn.tool_config_path)"
        )
    return settings
