"""verl reward-loop managers ``neos_answer_judge`` and ``modalsearch_reward`` (registered on import).

Config (both): ``reward.reward_manager.{source: register, name: <name>}``; judge settings under
``reward.reward_kwargs.judge`` (see ``JudgeConfig``; ``reward_kwargs`` is where verl's own dapo manager reads its
extra settings, and it is an open dict, unlike the typed ``reward.reward_manager``).

What each one-sample ``DataProto`` must carry (built by verl's agent loop, ``_compute_score``):
- ``batch["responses"]``, ``batch["attention_mask"]``: the multi-turn response, decoded with special tokens kept
  so the turns can be split;
- ``non_tensor_batch["reward_model"]["ground_truth"]``: a string or ``{"target", "aliases"}``;
- the question for the judge: ``extra_info["question"]``, else the last user message of ``raw_prompt``;
- contract with the rollout worker, read from ``tool_extra_fields`` (the agent loop's ``extra_fields``) or, when the
  reward is computed after rollout, from the same key at the top level of ``non_tensor_batch``:
  ``termination_reason`` in {``answer``, ``max_turns``, ``agent_errors``, ``tool_errors``, ...}; only
  ``modalsearch_reward`` acts on it (``agent_errors`` -> 0.1, ``tool_errors`` -> 0.0); others score normally.
  It is not echoed into ``reward_extra_info``: verl already copies every extra field into the batch under its own
  name, and a reward key of the same name would collide with it.

``reward.reward_kwargs.dump_trajectories: true`` (off by default; ``python -m verl_ext.eval verl`` sets it) adds two
string fields to every sample's ``reward_extra_info``, the one per-sample dict that verl's validation dump
(``trainer.validation_data_dir``) writes: ``neos_trajectory_json`` (the agent loop's ``TrajectoryRecord`` as JSON text;
verl's validation metrics skip strings) and ``neos_eval_key`` (the row's ``extra_info.neos_eval_key``, which the
evaluation harness writes into its validation rows to find each sample's benchmark item again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from verl_ext.reward.judge import AnswerJudge, JudgeConfig
from verl_ext.reward.outcome import score_turns
from verl_ext.reward.protocols import split_assistant_turns
from verl_ext.rollout.record import EVAL_KEY, RECORD_KEY, TRAJECTORY_JSON


def _question(non_tensor: Mapping[str, Any], extra_info: Mapping[str, Any]) -> str:
    if extra_info.get("question"):
        return str(extra_info["question"])
    messages = non_tensor.get("raw_prompt")
    for message in reversed(list(messages) if messages is not None else []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, (list, tuple, np.ndarray)) else []
            return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping)).strip()
    return ""


class _JudgedRewardManager(RewardManagerBase):
    """Shared plumbing: decoding as verl's naive manager does (last sequence, valid length), sample fields, judge."""

    def __init__(self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        reward_kwargs = config.reward.get("reward_kwargs", None) or {}
        self.judge = AnswerJudge(JudgeConfig.from_mapping(reward_kwargs.get("judge", None)))
        self.dump_trajectories = bool(reward_kwargs.get("dump_trajectories", False))
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.special_tokens = tuple(
            dict.fromkeys([*tokenizer.all_special_tokens, *(t.content for t in added.values() if t.special)])
        )

    async def _turns_and_fields(self, data: DataProto) -> tuple[list[str], dict[str, Any]]:
        data_item = data[-1:][0]  # for multi-sequence outputs only the last sequence is scored, as in verl
        response_ids = data_item.batch["responses"]
        valid_length = data_item.batch["attention_mask"][-response_ids.shape[-1] :].sum()
        valid_ids = response_ids[:valid_length]
        text = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(valid_ids, skip_special_tokens=False)
        )
        non_tensor = data_item.non_tensor_batch
        extra_info = non_tensor.get("extra_info", None) or {}
        agent_fields = non_tensor.get("tool_extra_fields", None) or {}
        termination = agent_fields.get("termination_reason", non_tensor.get("termination_reason", None))
        fields = {
            "ground_truth": non_tensor["reward_model"]["ground_truth"],
            "question": _question(non_tensor, extra_info),
            "termination_reason": str(termination or ""),
        }
        return split_assistant_turns(text, self.special_tokens), fields

    def _result(self, data: DataProto, score: float, info: dict[str, Any]) -> dict:
        if self.dump_trajectories:
            non_tensor = data[-1:][0].non_tensor_batch
            record = (non_tensor.get("tool_extra_fields", None) or {}).get(RECORD_KEY)
            extra_info = non_tensor.get("extra_info", None) or {}
            info = {**info, TRAJECTORY_JSON: json.dumps(record, ensure_ascii=False) if record is not None else "",
                    EVAL_KEY: str(extra_info.get(EVAL_KEY, ""))}
        return {"reward_score": score, "reward_extra_info": info}


@register("neos_answer_judge")
class NeosAnswerJudgeRewardManager(_JudgedRewardManager):
    """Binary correctness of the final assistant turn's plain text (Neos)."""

    async def run_single(self, data: DataProto) -> dict:
        turns, fields = await self._turns_and_fields(data)
        score, info = await score_turns(self.judge, "neos", turns, **fields)
        return self._result(data, score, info)


@register("modalsearch_reward")
class ModalSearchRewardManager(_JudgedRewardManager):
    """0.9·accuracy + 0.1·format; 0.1 after 3 consecutive agent errors; 0 after tool instability (ModalSearcher)."""

    async def run_single(self, data: DataProto) -> dict:
        turns, fields = await self._turns_and_fields(data)
        score, info = await score_turns(self.judge, "modalsearch", turns, **fields)
        return self._result(data, score, info)
