"""``trainer.v1.neos.mei.pool`` on a real Ray cluster with logical GPUs (Ray schedules by declared resources, so a CPU
machine can declare GPUs it does not have): the resource pools the neos trainer builds through verl's
``ResourcePoolManager``, and verl ``RayWorkerGroup``s placed on them. ``dedicated``: the MEI ranks get GPUs of their
own, disjoint from the policy's; ``shared``: they land on the policy's GPUs; too few GPUs for both pools is verl's
clear error, not a hang. Its own Ray (``address="local"``) in a child process: the session's Ray has no GPUs.

What Ray cannot show here: the MEI SFT engine itself on those GPUs (FSDP/Megatron need CUDA; the H200 run does it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, sys, time
import ray
from ray.util.placement_group import remove_placement_group
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


def trainer_for(placement, mei_gpus):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            "+recipe=neos_smoke", "trainer.n_gpus_per_node=1", f"++trainer.v1.neos.mei.pool={placement}",
            f"++trainer.v1.neos.mei.n_gpus_per_node={mei_gpus}"])
    trainer = NeosTrainer(config)
    trainer._init_resource_pool_mgr()
    return trainer


def ranks(pool):
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(GPUProbe)),
                           device_name="cuda")
    gpus = sorted(g for gs in group.gpu() for g in gs)
    for worker in group.workers:
        ray.kill(worker)
    return gpus


def placed(placement, mei_gpus):
    trainer = trainer_for(placement, mei_gpus)
    try:
        trainer.resource_pool_manager.create_resource_pool()
    except ValueError as e:
        return {"error": str(e)}
    policy = trainer.resource_pool_manager.get_resource_pool(trainer._actor_role())
    mei = trainer._mei_resource_pool()
    seen = {"spec": trainer.resource_pool_manager.resource_pool_spec, "same_pool": mei is policy,
            "policy": ranks(policy), "mei": ranks(mei)}
    for pool in {id(p): p for p in (policy, mei)}.values():  # give the GPUs back for the next placement
        for pg in pool.get_placement_groups():
            remove_placement_group(pg)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("GPU", 0) < GPUS and time.monotonic() < deadline:
        time.sleep(0.1)
    return seen


GPUS = 3  # one Ray for all three placements (each ray.init costs ~15 s)
ray.init(address="local", num_cpus=16, num_gpus=GPUS, include_dashboard=False, log_to_driver=False)
print(json.dumps({"too_few": placed("dedicated", 3), "shared": placed("shared", 2),
                  "dedicated": placed("dedicated", 2)}))
"""


def _run(tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "NEOS_SMOKE_DATA": str(tmp_path), "NEOS_SMOKE_MODEL": str(tmp_path), "RAY_ADDRESS": ""}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dedicated_and_shared_mei_pools_on_ray(tmp_path):
    """Three logical GPUs: a policy of 1 and an MEI pool of 3 do not fit; MEI beside the policy (shared) or on 2 GPUs
    of its own (dedicated) do."""
    seen = _run(tmp_path)
    assert seen["too_few"] == {"error": "Total available GPUs 3.0 is less than total desired GPUs 4"}

    shared = seen["shared"]
    assert shared["spec"] == {"global_pool": [1]} and shared["same_pool"]
    assert shared["mei"] == shared["policy"]  # beside the policy's actors, on the same GPU

    dedicated = seen["dedicated"]
    assert dedicated["spec"] == {"global_pool": [1], "neos_mei_pool": [2]} and not dedicated["same_pool"]
    assert len(dedicated["policy"]) == 1 and len(dedicated["mei"]) == 2
    assert not set(dedicated["policy"]) & set(dedicated["mei"])  # GPUs of its own, as the paper's 32 + 8
