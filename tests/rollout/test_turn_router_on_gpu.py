"""Turn-level routing over two real ``hf`` rollout servers sharing one GPU (the tiny Qwen2.5-VL is ~50 MB).

verl's replica layout gives ``main_ppo`` one ``hf`` replica per GPU (hybrid: one per trainer rank; two FSDP ranks
cannot share a device), so this test builds the pool as verl's elastic trainers do: ``LLMServerManager.create_empty``
(the balancer from each shipped ``recipes/routers/*.yaml``) and ``add_servers`` with two ``HFRolloutServer`` actors
of half a GPU each. Under each policy our ``modalsearch_react_agent`` runs four concurrent episodes (one of 8 turns,
three of 2) through verl's ``LLMServerClient``; the random model writes neither a call nor an answer, so each turn's
format error is the next observation (the 3-error rule off) and every episode runs all its turns. It prints, per
policy, the turns each replica served and each episode's replica sequence.

A plain sync test (``asyncio.run`` inside): it needs pytest but not pytest-asyncio. On a machine without CUDA the
servers run on CPU (the same test, slower). On the H200 (2026-12-03): passed in 122 s (145 s with start-up), at most
1.6 GiB of GPU memory. With verl and Ray in ``/tmp/site`` (``shared/gpu/verl_wheels.sh``), carrying ``.gpu/smoke-vl``
(``python -m verl_ext.models build --out .gpu/smoke-vl --hidden-size 128 --layers 4 --dtype bfloat16``) and
``.gpu/extra`` (json_repair and bm25s, which ``tests/rollout/conftest.py`` imports; not in the image)::

    JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/extra \
      VERL_USE_EXTERNAL_MODULES=verl_ext.plugin NEOS_TINY_VL_DIR=$PWD/.gpu/smoke-vl \
      python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu tests/rollout/test_turn_router_on_gpu.py
"""

from __future__ import annotations

import os

# The GPU image's JAX takes ~75% of the GPU if anything initialises it (seen here: the driver held 105 GiB and the
# servers ran out of memory); keep it off the GPU before verl, Ray and the servers start (Ray workers inherit this).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import asyncio  # noqa: E402
import sys  # noqa: E402
from collections import Counter  # noqa: E402

import pytest  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.config import RolloutConfig  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerManager  # noqa: E402
from verl.workers.rollout.replica import RolloutMode, TokenOutput  # noqa: E402

from verl_ext.rollout.hf_replica import HFRolloutServer  # noqa: E402

# tools: the CPU module's FunctionTool fixture
from .test_turn_router_on_cpu import ROUTERS, Pool, tools  # noqa: E402, F401

pytestmark = pytest.mark.gpu
TURNS = (8, 2, 2, 2)  # one long episode beside three short ones, all started together


class RecordingHFRolloutServer(HFRolloutServer):
    """The real ``hf`` server, also keeping each prompt it served so the test can tell which episode's turns it ran
    (the interface :class:`Pool` reads from the CPU test's stand-ins)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[tuple[int, ...]] = []

    async def generate(self, request_id: str, prompt_ids: list[int], *args, **kwargs) -> TokenOutput:
        self.prompts.append(tuple(prompt_ids))
        return await super().generate(request_id, prompt_ids, *args, **kwargs)

    async def served(self) -> list[tuple[int, ...]]:
        return self.prompts

    async def reset(self) -> None:
        self.prompts = []


async def _route_under_every_policy(config, processor, tools) -> dict[str, dict[str, list[str]]]:  # noqa: F811
    """policy -> question -> the replicas that served its turns, in order."""
    on_gpu = torch.cuda.is_available()
    rollout: RolloutConfig = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the recording subclass travels to its actors
    servers = {
        f"hf_{rank}": ray.remote(RecordingHFRolloutServer)
        .options(num_gpus=0.5 if on_gpu else 0, max_concurrency=16)
        .remote(rollout, config.actor_rollout_ref.model, RolloutMode.STANDALONE, rank, on_gpu)
        for rank in range(2)
    }
    await asyncio.gather(*(s.__ray_ready__.remote() for s in servers.values()))
    # The ReAct loop: the random model's words are neither a call nor an <answer>, so each turn is a format error
    # the next turn sees (the 3-error rule off), and every episode runs its turns.
    react = {"agent": "modalsearch_react_agent", "max_consecutive_errors": None, "group_cache": False}
    placements: dict[str, dict[str, list[str]]] = {}
    try:
        for router in sorted(ROUTERS.glob("*.yaml")):
            config.actor_rollout_ref.rollout.router_config_path = str(router)
            manager = await LLMServerManager.create_empty(config=config)
            await asyncio.gather(*(s.reset.remote() for s in servers.values()))
            await manager.global_load_balancer.add_servers.remote(servers)
            pool = Pool(manager, servers, processor, tools)
            results = await asyncio.gather(
                *(pool.episode(f"question number {i}", turns=n, **react) for i, n in enumerate(TURNS))
            )
            assert [len(record.turns) for _, record in results] == list(TURNS)
            placed = await pool.placements()
            status = await pool.settled_status()
            per_replica = Counter(rid for rids in placed.values() for rid in rids)
            print(f"\n[{router.stem}] turns per replica: {dict(sorted(per_replica.items()))}")
            print(f"[{router.stem}] decisions: {status['counters']}")
            for question, rids in sorted(placed.items()):
                print(f"[{router.stem}]   {question}: {' '.join(rids)}")
            placements[router.stem] = placed
            ray.kill(manager.global_load_balancer)
    finally:
        for actor in servers.values():
            ray.kill(actor)
    return placements


def test_two_hf_replicas_on_one_gpu_route_each_turn_by_policy(
    ray_cluster, compose_ppo_config, tiny_vl_model_dir, tiny_vl_processor, tools  # noqa: F811
):
    config = compose_ppo_config(
        tiny_vl_model_dir,
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.rollout.prompt_length=16384",
        "actor_rollout_ref.rollout.response_length=16",  # each turn writes at most 16 tokens
        rollout="hf",
    )
    placements = asyncio.run(_route_under_every_policy(config, tiny_vl_processor, tools))
    assert set(placements) >= {"sticky", "least_loaded", "cache_aware"}
    for policy, placed in placements.items():
        assert [len(placed[f"question number {i}"]) for i in range(len(TURNS))] == list(TURNS), policy
        assert {rid for rids in placed.values() for rid in rids} == {"hf_0", "hf_1"}, policy  # both replicas work
    assert all(len(set(rids)) == 1 for rids in placements["sticky"].values())  # verl's behaviour: episodes stay
    # alone once the short ones end, the long episode's turns take the two replicas in turn
    assert set(placements["least_loaded"]["question number 0"]) == {"hf_0", "hf_1"}
