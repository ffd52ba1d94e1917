"""``trainer.v1.neos.mei.pool`` on a real Ray cluster with logical GPUs (Ray schedules by declared resources, so a CPU
machine can declare GPUs it does not have): the resource pools the neos trainer builds through verl's
``ResourcePoolManager``, and verl ``RayWorkerGroup``s placed on them. ``dedicated``: the MEI ranks get GPUs of their
own, disjoint from the policy's; ``shared``: they land on the policy's GPUs; too few GPUs for both pools is verl's
clear error, not a hang. Its own Ray (``address="local"``) in a child process (a fork: ``tests/forks.py``): the
session's Ray has no GPUs.

What Ray cannot show here: the MEI SFT engine itself on those GPUs (FSDP/Megatron need CUDA; the H200 run does it).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..forks import MAIN_PPO, run_forked

SCRIPT = r"""
import json
import ray
from hydra import compose, initialize_config_module

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

from verl_ext.trainer.neos_trainer import NeosTrainer


class GPUProbe(Worker):
    '''Reports the GPU Ray gave this rank (stand-in for the MEI SFT worker, whose engine needs CUDA).'''

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def gpu(self):
        return [int(i) for i in ray.get_gpu_ids()]


def pools(placement, mei_gpus):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            "+recipe=neos_smoke", "trainer.n_gpus_per_node=1", f"++trainer.v1.neos.mei.pool={placement}",
            f"++trainer.v1.neos.mei.n_gpus_per_node={mei_gpus}"])
    trainer = NeosTrainer(config)
    trainer._init_resource_pool_mgr()
    try:
        trainer.resource_pool_manager.create_resource_pool()
    except ValueError as e:
        return {"error": str(e)}
    for pool in trainer.resource_pool_manager.resource_pool_dict.values():  # two trainers' pools in one Ray:
        pool.name_prefix = f"{placement}_{pool.name_prefix}"  # their placement groups' names must differ
    policy = trainer.resource_pool_manager.get_resource_pool(trainer._actor_role())
    return {"spec": trainer.resource_pool_manager.resource_pool_spec, "policy": policy,
            "mei": trainer._mei_resource_pool()}


def group(pool):
    return RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(GPUProbe)),
                          device_name="cuda")


# One Ray (a ray.init costs ~5-15 s on 2 cores) with room for the shared and the dedicated placement at once
# (1 + 1 + 2 GPUs), so that all their ranks start together: each is a fresh process importing verl (~7 s of CPU).
# The probe ranks load no verl plugin: ours would add ~5 s of CPU to each, and what it registers is checked inside
# a Ray worker by tests/plugin; the driver, which builds the pools, loads it.
GPUS = 4
ray.init(address="local", num_cpus=16, num_gpus=GPUS, include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"VERL_USE_EXTERNAL_PLUGINS": "none"}})
try:
    seen = {"too_few": pools("dedicated", GPUS)}
    placements = {"shared": pools("shared", 2), "dedicated": pools("dedicated", 2)}
    groups = {(name, role): group(p[role]) for name, p in placements.items() for role in ("policy", "mei")}
    for name, p in placements.items():  # the shared MEI ranks start while the policy's hold the same GPU
        seen[name] = {"spec": p["spec"], "same_pool": p["mei"] is p["policy"],
                      **{role: sorted(g for gs in groups[name, role].gpu() for g in gs) for role in ("policy", "mei")}}
    print(json.dumps(seen))
finally:
    ray.shutdown()  # a fork ends without atexit handlers: nothing else stops this Ray
"""


def _run(tmp_path: Path, monkeypatch) -> dict:
    """The script in a fork of the process the recipe tests' ``main_ppo`` runs fork from (``tests/forks.py``), which
    imported verl and our plugin already (started in "/": our package as pip installed it, ``make test`` installs this
    checkout first), in ``tmp_path``."""
    for key, value in {"NEOS_SMOKE_DATA": str(tmp_path), "NEOS_SMOKE_MODEL": str(tmp_path), "RAY_ADDRESS": ""}.items():
        monkeypatch.setenv(key, value)
    script = f"import os\nos.chdir({str(tmp_path)!r})\n{SCRIPT}"
    pools = run_forked(MAIN_PPO, {"pools": script}, tmp_path, cwd="/")["pools"]
    assert pools.returncode == 0, pools.stderr[-3000:]
    return json.loads(pools.stdout.strip().splitlines()[-1])


def test_dedicated_and_shared_mei_pools_on_ray(tmp_path, monkeypatch):
    """Four logical GPUs: a policy of 1 and an MEI pool of 4 do not fit; MEI beside the policy (shared: both groups'
    ranks on one GPU at once) or on 2 GPUs of its own (dedicated) do."""
    seen = _run(tmp_path, monkeypatch)
    assert seen["too_few"] == {"error": "Total available GPUs 4.0 is less than total desired GPUs 5"}

    shared = seen["shared"]
    assert shared["spec"] == {"global_pool": [1]} and shared["same_pool"]
    assert shared["mei"] == shared["policy"]  # beside the policy's actors, on the same GPU

    dedicated = seen["dedicated"]
    assert dedicated["spec"] == {"global_pool": [1], "neos_mei_pool": [2]} and not dedicated["same_pool"]
    assert len(dedicated["policy"]) == 1 and len(dedicated["mei"]) == 2
    assert not set(dedicated["policy"]) & set(dedicated["mei"])  # GPUs of its own, as the paper's 32 + 8
