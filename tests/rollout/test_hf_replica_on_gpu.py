"""Two PPO steps of ``python -m verl.trainer.main_ppo`` with ``actor_rollout_ref.rollout.name=hf`` on one GPU.

For the H200 machine (no vLLM/SGLang; verl and Ray from ``../shared/gpu/verl_wheels.sh`` in ``/tmp/site``). The
tiny Qwen2.5-VL must be there too: build it here (``python -m verl_ext.models build --out .gpu/tiny-vl``, ~20 MB),
carry ``.gpu/tiny-vl`` and point ``NEOS_TINY_VL_DIR`` at it; without the variable the test builds the model into the
source cache, which needs the tokenizer package already cached. Run::

    PYTHONPATH=/tmp/site NEOS_TINY_VL_DIR=.gpu/tiny-vl \\
      python -m pytest -o python_files='test_*_on_gpu.py' -m gpu tests/rollout/test_hf_replica_on_gpu.py

The command it runs (``$MODEL`` the tiny model, ``$DATA`` the two parquet files it writes, ``$OUT`` a scratch dir;
``VERL_USE_EXTERNAL_MODULES`` loads our plugin where the package is on ``PYTHONPATH`` but not pip-installed)::

    PYTHONPATH=/tmp/site:$PWD VERL_USE_EXTERNAL_MODULES=verl_ext.plugin python -m verl.trainer.main_ppo \\
      algorithm.adv_estimator=grpo \\
      data.train_files=$DATA/train.parquet data.val_files=$DATA/val.parquet \\
      data.train_batch_size=2 data.max_prompt_length=128 data.max_response_length=16 \\
      actor_rollout_ref.model.path=$MODEL \\
      +actor_rollout_ref.model.override_config.attn_implementation=sdpa actor_rollout_ref.model.use_remove_padding=false \\
      actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\
      actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
      actor_rollout_ref.rollout.n=2 actor_rollout_ref.rollout.agent.num_workers=1 \\
      actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \\
      actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \\
      trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=2 \\
      'trainer.logger=[console]' trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \\
      trainer.resume_mode=disable trainer.default_local_dir=$OUT/checkpoints \\
      trainer.project_name=neos_smoke trainer.experiment_name=hf_rollout


Passed on the H200 on 2026-12-03 (verl 0.9.1, transformers 5.17, torch 2.11; 153 s): Hydra, Ray with 1 GPU, the FSDP
actor, the ``hf`` replica and its server actor, two steps of rollout, rewards, old log-probs, advantages and actor
update. Until ``verl_ext.compat``'s position-ids fix recognised the real layout (rows of equal length, which verl packs
on the rope dimension) every run died in ``update_actor`` (``split_with_sizes ... 45 ... got [4, 4, 4, 4]``).
Two earlier verl x transformers-5.17 failures are worked around here: text-only batches (images in every row) and the
remove-padding attention patch (``use_remove_padding=false``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def overrides(model: Path, data: Path, out: Path) -> list[str]:
    """The Hydra overrides of the module docstring's command."""
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}/train.parquet",
        f"data.val_files={data}/val.parquet",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model}",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        # verl 0.9.1's remove-padding attention patch for Qwen2-VL imports apply_multimodal_rotary_pos_emb, which the
        # GPU image's transformers 5.17 no longer has
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.total_training_steps=2",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={out}/checkpoints",
        "trainer.project_name=neos_smoke",
        "trainer.experiment_name=hf_rollout",
    ]


def write_data(data: Path) -> None:
    """Four arithmetic prompts in verl's RLHF parquet layout, scored by verl's GSM8K rule (``#### <answer>``), each
    with a small image: verl 0.9.1's Qwen2-VL forward breaks on text-only batches with transformers 5.x (its dummy
    vision pass calls ``.mean()`` on the ``BaseModelOutputWithPooling`` that ``model.visual`` now returns)."""
    import io

    import pandas as pd
    from PIL import Image

    def png(a: int) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (56, 56), (40 * a, 60, 200)).save(buf, format="PNG")
        return buf.getvalue()

    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"<image>What is {a} + {a}? End with '#### <answer>'."}],
            "images": [{"bytes": png(a)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 * a)},
            "extra_info": {"index": a},
        }
        for a in range(1, 5)
    ]
    data.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(data / "train.parquet")
    pd.DataFrame(rows[:2]).to_parquet(data / "val.parquet")


def test_two_ppo_steps_with_the_hf_rollout_backend(tmp_path, tiny_vl_model_dir, verl_subprocess_env):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    write_data(tmp_path / "data")
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *overrides(tiny_vl_model_dir, tmp_path / "data", tmp_path),
    ]
    run = subprocess.run(
        command, check=False, cwd=tmp_path, env=verl_subprocess_env, capture_output=True, text=True, timeout=540
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-8000:]
    assert re.search(r"step:2 - ", log), log[-8000:]  # verl's console logger line of the second step
