"""Both managers built the way verl builds them (``load_reward_manager`` from the registry) and driven through
``run_single`` on a real one-sample DataProto laid out as verl's agent loop lays it out (``_compute_score``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

import verl_ext.reward.managers  # noqa: F401  (registers the managers, as the plugin does)

from .conftest import judge_server

CALL = '<think>Look it up.</think><tool_call>{"name": "t2t_search", "arguments": {"query": "tower"}}</tool_call>'
TOOL = "<|im_end|>\n<|im_start|>user\n<tool_response>\nresult\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def _data(tokenizer, response: str, ground_truth: object, **extra_fields: object) -> DataProto:
    prompt = tokenizer.encode("<|im_start|>user\nWhich city?<|im_end|>\n<|im_start|>assistant\n")
    response_ids = tokenizer.encode(response + "<|im_end|>")
    prompts, responses = torch.tensor([prompt]), torch.tensor([response_ids + [tokenizer.pad_token_id or 0] * 3])
    attention = torch.cat([torch.ones(1, len(prompt) + len(response_ids)), torch.zeros(1, 3)], dim=1).long()
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "attention_mask": attention,
            "input_ids": torch.cat([prompts, responses], dim=1),
        },
        batch_size=1,
    )
    kwargs = {
        "data_source": "test",
        "reward_model": {"ground_truth": ground_truth, "style": "rule"},
        "extra_info": {"question": "Which city?"},
        "raw_prompt": [{"role": "user", "content": "Which city?"}],
    }
    non_tensor = {k: np.array([v]) for k, v in kwargs.items()}
    non_tensor["tool_extra_fields"] = np.array([extra_fields], dtype=object)
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def _score(name: str, tokenizer, data: DataProto, judge: dict | None = None) -> dict:
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": None, "name": "compute_score"},
                "reward_manager": {"source": "register", "name": name},
                "reward_kwargs": {"judge": judge or {}},
            }
        }
    )

    async def main():  # verl builds managers inside the reward worker's running loop
        return await load_reward_manager(config, tokenizer).run_single(data)

    return asyncio.run(main())


def test_neos_rule_and_llm(tokenizer) -> None:
    data = _data(tokenizer, CALL + TOOL + "<think>Found it.</think>\n\nThe answer is Paris.", "Paris")
    out = _score("neos_answer_judge", tokenizer, data)
    assert out["reward_score"] == 1.0
    assert out["reward_extra_info"]["judge"] == "rule"
    assert out["reward_extra_info"]["pred"] == "The answer is Paris."
    wrong = _score("neos_answer_judge", tokenizer, _data(tokenizer, "Paris, Texas", "Paris"))
    assert wrong["reward_score"] == 0.0

    async def with_judge(model: str):
        async with judge_server() as (url, calls):
            config = OmegaConf.create(
                {
                    "reward": {
                        "custom_reward_function": {"path": None},
                        "reward_manager": {"source": "register", "name": "neos_answer_judge"},
                        "reward_kwargs": {
                            "judge": {"url": url, "model": model, "max_retries": 1, "retry_backoff_s": 0}
                        },
                    }
                }
            )
            return await load_reward_manager(config, tokenizer).run_single(data), calls

    out, _ = asyncio.run(with_judge("no"))
    assert (out["reward_score"], out["reward_extra_info"]["judge"]) == (0.0, "llm")
    out, calls = asyncio.run(with_judge("malformed"))
    assert (out["reward_score"], out["reward_extra_info"]["judge"], calls["malformed"]) == (1.0, "rule_fallback", 2)


def _modal(tokenizer, response: str, **extra: object) -> dict:
    return _score(
        "modalsearch_reward", tokenizer, _data(tokenizer, response, {"target": "Paris", "aliases": []}, **extra)
    )


@pytest.mark.parametrize(
    ("response", "termination", "score", "acc", "fmt"),
    [
        (CALL + TOOL + "<think>Done.</think><answer>Paris</answer>", "answer", 0.9 * 1 + 0.1 * 1, 1.0, 1.0),
        (CALL + TOOL + "<answer>Paris</answer>", "answer", 0.9 * 1 + 0.1 * 0, 1.0, 0.0),  # no reasoning
        (CALL + TOOL + "<think>Done.</think><answer>Lyon</answer>", "answer", 0.9 * 0 + 0.1 * 1, 0.0, 1.0),
        # Hand-computed r = 0.9 r_acc + 0.1 r_fmt (ModalSearcher, Section 3.3): r_fmt = 1 when all tool calls follow
        # the format, so a well-formed rollout cut at the turn limit keeps it: 0.9 * 0 + 0.1 * 1.
        (CALL + TOOL + CALL, "max_turns", 0.1, 0.0, 1.0),
        # One malformed call the policy recovered from, then a correct answer: 0.9 * 1 + 0.1 * 0.
        (CALL + TOOL + "<think>r</think><tool_call>{not json}</tool_call>" + TOOL + "<think>Done.</think>"
         "<answer>Paris</answer>", "answer", 0.9, 1.0, 0.0),
        # Cut at the turn limit on a malformed call: 0.9 * 0 + 0.1 * 0.
        (CALL + TOOL + "<think>r</think><tool_call>{not json}</tool_call>", "max_turns", 0.0, 0.0, 0.0),
        (CALL + TOOL + "<think>Done.</think><answer>Paris</answer>", None, 1.0, 1.0, 1.0),  # no reason recorded
        (CALL + TOOL + "<tool_call>oops", "agent_errors", 0.1, 0.0, 0.0),
        (CALL + TOOL + "<think>Done.</think><answer>Paris</answer>", "tool_errors", 0.0, 0.0, 1.0),
    ],
)
def test_modalsearch_branches(tokenizer, response, termination, score, acc, fmt) -> None:
    extra = {} if termination is None else {"termination_reason": termination}
    out = _modal(tokenizer, response, **extra)
    assert out["reward_score"] == pytest.approx(score)
    info = out["reward_extra_info"]
    assert (info["acc"], info["fmt"]) == (acc, fmt)


def test_extra_info_is_flat_with_fixed_keys(tokenizer) -> None:
    """verl stacks reward_extra_info per key across samples: every branch must give the same flat keys."""
    outs = [
        _modal(tokenizer, "<think>r</think><answer>Paris</answer>", termination_reason=t)
        for t in ("answer", "agent_errors", "tool_errors")
    ]
    keys = {frozenset(o["reward_extra_info"]) for o in outs}
    assert len(keys) == 1
    assert all(isinstance(v, (str, int, float)) for o in outs for v in o["reward_extra_info"].values())
    neos = _score("neos_answer_judge", tokenizer, _data(tokenizer, "Paris", "Paris"))
    assert set(neos["reward_extra_info"]) == set(outs[0]["reward_extra_info"]) - {"fmt"}
