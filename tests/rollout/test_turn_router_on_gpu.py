"""Turn-level routing over two real ``hf`` rollout servers sharing one GPU (the tiny Qwen2.5-VL is ~20 MB).

verl's replica layout gives ``main_ppo`` one ``hf`` replica per GPU (hybrid: one per trainer rank; two FSDP ranks
cannot share a device), so this test builds the pool as verl's elastic trainers do: ``LLMServerManager.create_empty``
(the balancer from ``recipes/routers/least_loaded.yaml``) and ``add_servers`` with two ``HFRolloutServer`` actors of
half a GPU each. Our ``modalsearch_react_agent`` runs two episodes through verl's ``LLMServerClient``; the random
model writes neither a call nor an answer, so each turn's format error is the next observation (the 3-error rule
off) and every episode runs its 6 turns. On a
machine without CUDA the servers run on CPU (the same test, slower). Run on the H200::

    PYTHONPATH=/tmp/site:$PWD NEOS_TINY_VL_DIR=.gpu/tiny-vl \\
      python -m pytest -o python_files='test_*_on_gpu.py' -m gpu tests/rollout/test_turn_router_on_gpu.py -s
"""

from __future__ import annotations

import asyncio

import pytest
import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import RolloutConfig
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import RolloutMode

from verl_ext.rollout.hf_replica import HFRolloutServer

from .test_turn_router_on_cpu import ROUTERS, Pool, tools  # noqa: F401  (tools: the module's FunctionTool fixture)

pytestmark = pytest.mark.gpu


async def test_two_hf_replicas_on_one_gpu_share_each_episodes_turns(
    ray_cluster, compose_ppo_config, tiny_vl_model_dir, tiny_vl_processor, tools  # noqa: F811
):
    on_gpu = torch.cuda.is_available()
    config = compose_ppo_config(
        tiny_vl_model_dir,
        f"actor_rollout_ref.rollout.router_config_path={ROUTERS / 'least_loaded.yaml'}",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.rollout.prompt_length=16384",
        "actor_rollout_ref.rollout.response_length=16",  # each turn writes at most 16 tokens
        rollout="hf",
    )
    rollout: RolloutConfig = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    servers = {
        f"hf_{rank}": ray.remote(HFRolloutServer)
        .options(num_gpus=0.5 if on_gpu else 0, max_concurrency=16)
        .remote(rollout, config.actor_rollout_ref.model, RolloutMode.STANDALONE, rank, on_gpu)
        for rank in range(2)
    }
    manager = await LLMServerManager.create_empty(config=config)
    try:
        await asyncio.gather(*(s.__ray_ready__.remote() for s in servers.values()))
        await manager.global_load_balancer.add_servers.remote(servers)
        pool = Pool(manager, servers, tiny_vl_processor, tools)
        # The ReAct loop: the random model's words are neither a call nor an <answer>, so each turn is a format
        # error the next turn sees (the 3-error rule off), and every episode runs its 6 turns.
        react = {"agent": "modalsearch_react_agent", "max_consecutive_errors": None, "group_cache": False}
        results = await asyncio.gather(
            pool.episode("first question", turns=6, **react), pool.episode("second question", turns=6, **react)
        )
        assert [len(record.turns) for _, record in results] == [6, 6]
        status = await manager.global_load_balancer.get_status.remote()
        assigned = {rid: r["assigned_tokens"] for rid, r in status["replicas"].items()}
        print("balancer status:", status)
        assert status["counters"] == {"least_loaded": 12} and all(v > 0 for v in assigned.values())
        assert max(assigned.values()) < 2 * min(assigned.values())  # each replica served a fair share of the tokens
    finally:
        for actor in [*servers.values(), manager.global_load_balancer]:
            ray.kill(actor)
