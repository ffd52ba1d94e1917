"""One question's group of rollouts through verl's real agent loop ``neos_search_agent``.

The loop is instantiated from verl's agent-loop registry as verl's ``AgentLoopWorker`` does (Hydra, the trainer
config, a ``server_manager``); its ``server_manager`` is the in-process ``TransformersGenerateClient`` (the CPU
backend) behind a :class:`~verl_ext.walkthrough.behaviour.PlanBoundClient`, and its tools are a real tool server
over HTTP. The ``G`` episodes of a group run concurrently on one event loop, as in a rollout worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from verl_ext.rollout.hf_generate import TransformersGenerateClient
from verl_ext.rollout.instantiate import instantiate_agent_loop
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.walkthrough.behaviour import Plan, PlanBoundClient, ScriptedBehaviourPolicy

AGENT = "neos_search_agent"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}  # Neos Table 12: T = 1, top-p 1


@dataclass(frozen=True)
class RolloutSettings:
    """The rollout keys the walkthrough sets (verl's own names); observations are cut short to keep CPU passes quick."""

    prompt_length: int = 4096
    response_length: int = 16384
    max_tool_response_length: int = 1500  # characters of each observation the policy sees
    max_turn_tokens: int = 512  # generation budget of one turn


def trainer_config(url: str, settings: RolloutSettings) -> DictConfig:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": settings.prompt_length,
                    "response_length": settings.response_length,
                    "multi_turn": {"max_tool_response_length": settings.max_tool_response_length},
                    "custom": {"neos_rollout": {"tool_server_url": url}},
                }
            },
            "data": {},
        }
    )


async def run_group(
    client: TransformersGenerateClient,
    policy: ScriptedBehaviourPolicy,
    plans: Sequence[Plan],
    raw_prompt: list[dict],
    uid: str,
    config,
) -> list[tuple[AgentLoopOutput, TrajectoryRecord]]:
    """Run one episode per plan concurrently; outputs in plan order."""

    async def episode(plan: Plan) -> tuple[AgentLoopOutput, TrajectoryRecord]:
        loop = instantiate_agent_loop(AGENT, PlanBoundClient(client, policy, plan), client.processor, config)
        out = await loop.run(dict(SAMPLING), raw_prompt=raw_prompt, uid=uid)
        return out, TrajectoryRecord.model_validate(out.extra_fields[RECORD_KEY])

    return list(await asyncio.gather(*(episode(plan) for plan in plans)))
