"""``+recipe=neos_curve`` as the learning-curve driver launches it (``main_ppo ... --cfg job --resolve``), once per
estimator: the two runs differ in the estimator and the seed they are given and in nothing else, every seed follows
``trainer.seed``, the values fit the plan of docs/training.md ("Learning curve"), and verl's own validation accepts
both."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from ..forks import main_ppo_jobs

ENV = {"NEOS_CURVE_DATA": "/data/curve", "NEOS_CURVE_POLICY": "/ckpt/warm/huggingface"}
JOBS = {
    "turn_credit": ("+recipe=neos_curve",),
    "grpo": ("+recipe=neos_curve", "algorithm.adv_estimator=grpo", "trainer.seed=2"),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, dict]:
    with pytest.MonkeyPatch.context() as env:
        for key, value in ENV.items():
            env.setenv(key, value)
        return main_ppo_jobs({name: (*args, "--cfg", "job", "--resolve") for name, args in JOBS.items()},
                             tmp_path_factory.mktemp("curve"))


def _leaves(node, path: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        return {k: v for key, child in node.items() for k, v in _leaves(child, f"{path}.{key}".lstrip(".")).items()}
    return {path: node}


def test_the_two_estimators_differ_in_estimator_and_seed_only(jobs):
    ours, grpo = _leaves(jobs["turn_credit"]), _leaves(jobs["grpo"])
    assert ours.keys() == grpo.keys()
    differ = {k for k in ours if ours[k] != grpo[k]}
    named = {"trainer.experiment_name", "trainer.default_local_dir", "actor_rollout_ref.rollout.trace.experiment_name"}
    assert differ == {"algorithm.adv_estimator", "trainer.seed", "data.seed", "actor_rollout_ref.rollout.seed",
                      "actor_rollout_ref.actor.data_loader_seed", *named}  # the run's name and where it saves
    assert (ours["algorithm.adv_estimator"], grpo["algorithm.adv_estimator"]) == ("neos_turn_credit", "grpo")
    assert (ours["data.seed"], grpo["data.seed"], grpo["actor_rollout_ref.rollout.seed"]) == (1, 2, 2)
    assert (ours["trainer.experiment_name"], grpo["trainer.experiment_name"]) == ("neos_turn_credit_seed1",
                                                                                  "grpo_seed2")


def test_rl_on_the_rl_split_success_on_the_held_out_benchmark_split(jobs):
    job = jobs["turn_credit"]
    assert job["data"]["train_files"] == "/data/curve/rl.parquet"
    assert job["data"]["val_files"] == "/data/curve/benchmark.parquet"
    assert job["actor_rollout_ref"]["model"]["path"] == "/ckpt/warm/huggingface"
    trainer = job["trainer"]
    assert (trainer["total_training_steps"], trainer["test_freq"], trainer["val_before_train"]) == (20, 5, True)
    assert "file" in trainer["logger"]  # what python -m verl_ext.eval training reads
    assert (trainer["save_freq"], trainer["resume_mode"]) == (10, "auto")
    data, actor = job["data"], job["actor_rollout_ref"]["actor"]
    assert data["max_prompt_length"] + data["max_response_length"] == actor["ppo_max_token_len_per_gpu"] == 7168


def test_one_gpu_vllm_rollout_our_loop_and_the_answer_rule(jobs):
    job = jobs["turn_credit"]
    rollout, actor = job["actor_rollout_ref"]["rollout"], job["actor_rollout_ref"]["actor"]
    assert (rollout["name"], rollout["n"], job["data"]["train_batch_size"]) == ("vllm", 4, 8)  # G, B
    assert actor["ppo_mini_batch_size"] == 8 and actor["strategy"] == "fsdp"  # one optimizer step per update
    assert actor["optim"]["lr"] == 2e-4 and actor["clip_ratio_c"] == 3.0  # ours; the paper's dual clip
    assert rollout["agent"]["default_agent_loop"] == "neos_search_agent"
    assert rollout["custom"]["neos_credit_judge"]["kind"] == "offline"
    assert job["reward"]["reward_manager"]["name"] == "neos_answer_judge"
    assert job["reward"]["reward_kwargs"]["judge"]["url"] is None  # the answer rule decides
    assert (rollout["val_kwargs"]["n"], rollout["val_kwargs"]["do_sample"]) == (2, True)
    assert rollout["multi_turn"]["max_assistant_turns"] == 10
    neos = job["trainer"]["v1"]["neos"]
    assert neos["mei"]["update_every"] == 5 and neos["sampler"]["enable"] is False
    assert job["trainer"]["n_gpus_per_node"] == 1
    # processes a run starts on the host beside the GPU's (verl's defaults: 8 and 8), several runs to one host
    assert (job["reward"]["num_workers"], job["data"]["dataloader_num_workers"], rollout["agent"]["num_workers"]) == (
        2, 2, 2)


def test_rl_sees_images_at_the_resolution_the_warm_start_was_trained_at(jobs, tiny_vl_model_dir):
    # verl's SFT trainer processes images with the model's saved processor; RL with data.mm_processor_kwargs
    import json

    from verl_ext.models.tiny_vl import MAX_PIXELS, MIN_PIXELS

    saved = json.loads((tiny_vl_model_dir / "processor_config.json").read_text())["image_processor"]["size"]
    size = jobs["turn_credit"]["data"]["mm_processor_kwargs"]["size"]
    assert size == saved == {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}


def test_verl_validates_both_runs(jobs):
    from verl.utils.config import validate_config

    for job in jobs.values():
        validate_config(OmegaConf.create(job), use_reference_policy=False, use_critic=False)


def test_the_drivers_overrides_compose_and_validate(monkeypatch, tmp_path):
    """What bench/learning_curve.py adds per run (its GPU share, checkpoint directory, a Ray instance of its own)."""
    import sys
    from pathlib import Path

    from verl.utils.config import validate_config

    from .test_recipe_resolution_on_cpu import compose_in_process

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import learning_curve as driver

    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    settings = driver.Settings(data=tmp_path, policy=tmp_path, mei=tmp_path, world=tmp_path, out=tmp_path,
                               checkpoints=tmp_path / "ckpt", steps=20, policy_gpu_share=0.08, mei_gpu_share=0.05,
                               timeout_s=1.0)
    command = driver.main_ppo_command(driver.Run("grpo", 3), settings)
    assert command[1:3] == ["-m", "verl.trainer.main_ppo"]
    job = compose_in_process(*command[3:])
    assert job.ray_kwargs.ray_init.address == "local" and job.ray_kwargs.ray_init.include_dashboard is False
    assert (job.algorithm.adv_estimator, job.data.seed, job.trainer.experiment_name) == ("grpo", 3, "grpo_seed3")
    assert job.actor_rollout_ref.rollout.gpu_memory_utilization == 0.08
    assert job.trainer.default_local_dir == str(tmp_path / "ckpt" / "grpo" / "seed3")
    validate_config(job, use_reference_policy=False, use_critic=False)
    # --mei none: co-evolution off in the composed job (the tool server answers extractively)
    import dataclasses

    without = driver.main_ppo_command(driver.Run("grpo", 3), dataclasses.replace(settings, mei=None))
    assert compose_in_process(*without[3:]).trainer.v1.neos.mei.enable is False
