"""Outcome rewards through the registered ``neos_answer_judge`` reward manager (no LLM judge configured, so its
offline answer matcher decides), on the one-sample ``DataProto`` verl's agent loop hands a reward worker."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.trainer.ppo.reward import load_reward_manager

import verl_ext.reward.managers  # noqa: F401  (registers neos_answer_judge, as the plugin does)

REWARD_MANAGER = "neos_answer_judge"


def reward_manager(tokenizer):
    """The manager as verl loads it from ``reward.reward_manager``; build it inside a running event loop."""
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": None, "name": "compute_score"},
                "reward_manager": {"source": "register", "name": REWARD_MANAGER},
                "reward_kwargs": {"judge": {}},
            }
        }
    )
    return load_reward_manager(config, tokenizer)


def sample(output: AgentLoopOutput, question: str, ground_truth: dict[str, Any]) -> DataProto:
    """The fields verl's ``AgentLoopWorker._compute_score`` puts into the reward worker's batch for one trajectory
    (the ones a reward manager reads: tokens, attention mask, the dataset row, the agent loop's extra fields)."""
    prompts = torch.tensor([output.prompt_ids], dtype=torch.int64)
    responses = torch.tensor([output.response_ids], dtype=torch.int64)
    input_ids = torch.cat([prompts, responses], dim=1)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
        },
        batch_size=1,
    )
    row = {
        "reward_model": {"ground_truth": ground_truth, "style": "rule"},
        "extra_info": {"question": question},
    }
    non_tensor = {k: np.array([v]) for k, v in row.items()}
    non_tensor["tool_extra_fields"] = np.array([output.extra_fields], dtype=object)
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


async def score(manager, output: AgentLoopOutput, question: str, ground_truth: dict[str, Any]) -> tuple[float, str]:
    """(reward, the final answer text the judge read)."""
    result = await manager.run_single(sample(output, question, ground_truth))
    return float(result["reward_score"]), str(result["reward_extra_info"]["pred"])
