"""verl's own SFT trainer (``verl.trainer.sft_trainer`` under torchrun, FSDP2 engine) on the Neos cold-start data, one
GPU, the tiny Qwen2.5-VL: the loss goes down and the saved HF checkpoint loads, ready to be the RL smoke policy.

Export the data on the CPU machine (the programmatic expert's successful episodes of the train split; ``--limit`` is
the number of verified tasks, of which about 60% land in ``train``)::

    python -m data_gen neos --world WORLD_DIR --out .gpu/neos-data --limit 8

and carry ``.gpu/neos-data/sft.parquet`` (the other files are not needed here). For the H200 machine (verl and Ray
from ``../shared/gpu/verl_wheels.sh`` in ``/tmp/site``; the tiny model built with ``python -m verl_ext.models build
--out .gpu/tiny-vl`` and carried; ``json_repair`` and ``bm25s`` copied into ``.gpu/extra`` as for
tests/mei/test_mei_sft_on_gpu.py, since the plugin's registrations import the tool client). Run::

    PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/extra NEOS_TINY_VL_DIR=.gpu/tiny-vl NEOS_SFT_DATA=.gpu/neos-data \\
      NEOS_SFT_OUT=.gpu/neos-sft python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu \\
      tests/data_gen/test_verl_sft_on_gpu.py

The command it runs (printed in full; ``$MODEL`` the tiny model, ``$DATA`` = ``NEOS_SFT_DATA``, ``$OUT`` =
``NEOS_SFT_OUT``, default a scratch dir)::

    PYTHONPATH=/tmp/site:$PWD VERL_USE_EXTERNAL_MODULES=verl_ext.plugin \\
      python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=1 -m verl.trainer.sft_trainer \\
      data.train_files=$DATA/sft.parquet \\
      data.custom_cls.path=pkg://verl_ext.data.sft_dataset data.custom_cls.name=JsonToolsMultiTurnSFTDataset \\
      data.train_batch_size=2 data.micro_batch_size_per_gpu=1 data.use_dynamic_bsz=false \\
      data.max_length=16384 data.truncation=error data.pad_mode=no_padding data.num_workers=0 \\
      model.path=$MODEL +model.override_config.attn_implementation=sdpa model.use_remove_padding=false \\
      engine.strategy=fsdp2 engine.use_torch_compile=false optim.lr=1e-3 optim.lr_scheduler_type=constant \\
      trainer.total_training_steps=6 trainer.total_epochs=100 'trainer.logger=[console]' \\
      trainer.save_freq=-1 trainer.test_freq=-1 trainer.resume_mode=disable trainer.n_gpus_per_node=1 \\
      'checkpoint.save_contents=[model,optimizer,extra,hf_model]' trainer.default_local_dir=$OUT \\
      trainer.project_name=neos_smoke trainer.experiment_name=cold_start_sft

The policy for the RL smoke run is then ``$OUT/global_step_6/huggingface`` (weights, config, tokenizer, and the tiny
model's processor and chat template, which this test copies in). Every row carries its question image (and the
images FetchImage loaded): verl 0.9.1's Qwen2-VL forward breaks on text-only batches under transformers 5.x, and
``use_remove_padding=false`` sidesteps its remove-padding patch, which that transformers breaks (see
tests/rollout/test_hf_replica_on_gpu.py). Tools are JSON text in the parquet, hence the dataset subclass (see
``data_gen.common.sft``). lr 1e-3 (verl's FSDP optimizer default) so that a randomly initialised model's loss visibly
falls in 6 steps over a handful of repeated episodes (``NEOS_SFT_LR`` and ``NEOS_SFT_STEPS`` change both).
``NEOS_SFT_WORKERS`` sets ``data.num_workers`` (the processor then runs beside the GPU step) and
``NEOS_SFT_SAVE_FREQ`` ``trainer.save_freq`` (checkpoints a run cut short can still hand to the smoke) and
``NEOS_SFT_BATCH`` ``data.train_batch_size`` (default 2; the learning curve's hundreds of rows take 16). The
trainer's output goes to ``$OUT/sft_trainer.log`` as it runs (``grep train/loss`` it to follow a long warm start).
``NEOS_SFT_MAX_TOKENS=N`` packs rows into verl's dynamic micro-batches of at most N tokens (``data.use_dynamic_bsz``)
instead of one row each; the curve's warm start ran ~10 s a step of 16 single-row micro-batches on an H100 beside the
MEI's warm start (2026-12-07), and whether packing helps this model is to be measured.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
STEPS = int(os.environ.get("NEOS_SFT_STEPS", 6))  # the RL smoke's warm start uses more (see test_neos_smoke_on_gpu)
LR = float(os.environ.get("NEOS_SFT_LR", 1e-3))
BATCH = int(os.environ.get("NEOS_SFT_BATCH", 2))  # rows per optimizer step (micro-batches of 1)
# the dataset's processor runs in the loader (~0.3-0.5 s a row on CPU): workers take it off the GPU step's path
WORKERS = int(os.environ.get("NEOS_SFT_WORKERS", 0))
SAVE_FREQ = int(os.environ.get("NEOS_SFT_SAVE_FREQ", -1))  # > 0: intermediate checkpoints a cut-short run can use
# > 0: verl's dynamic micro-batches of at most this many tokens instead of one row each (fewer, larger GPU steps)
MAX_TOKENS = int(os.environ.get("NEOS_SFT_MAX_TOKENS", 0))
LOSS = re.compile(r"step:(\d+) - .*?train/loss:([0-9.eE+-]+)")


def overrides(model: Path, data: Path, out: Path) -> list[str]:
    """The Hydra overrides of the module docstring's command."""
    return [
        f"data.train_files={data}/sft.parquet",
        "data.custom_cls.path=pkg://verl_ext.data.sft_dataset",
        "data.custom_cls.name=JsonToolsMultiTurnSFTDataset",
        f"data.train_batch_size={BATCH}",
        *(["data.use_dynamic_bsz=true", f"data.max_token_len_per_gpu={MAX_TOKENS}"] if MAX_TOKENS > 0
          else ["data.micro_batch_size_per_gpu=1", "data.use_dynamic_bsz=false"]),
        "data.max_length=16384",
        "data.truncation=error",
        "data.pad_mode=no_padding",
        f"data.num_workers={WORKERS}",
        f"model.path={model}",
        "+model.override_config.attn_implementation=sdpa",
        "model.use_remove_padding=false",
        "engine.strategy=fsdp2",
        "engine.use_torch_compile=false",
        f"optim.lr={LR}",
        "optim.lr_scheduler_type=constant",
        f"trainer.total_training_steps={STEPS}",
        "trainer.total_epochs=100",
        "trainer.logger=[console]",
        f"trainer.save_freq={SAVE_FREQ}",
        "trainer.test_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.n_gpus_per_node=1",
        "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        f"trainer.default_local_dir={out}",
        "trainer.project_name=neos_smoke",
        "trainer.experiment_name=cold_start_sft",
    ]


def tiny_model_dir() -> Path:
    if os.environ.get("NEOS_TINY_VL_DIR"):
        return Path(os.environ["NEOS_TINY_VL_DIR"]).resolve()
    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl

    return cached_tiny_qwen_vl()


def test_verl_sft_trainer_on_the_cold_start_data(tmp_path):
    import pandas as pd
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not os.environ.get("NEOS_SFT_DATA"):
        pytest.skip("set NEOS_SFT_DATA to a directory holding sft.parquet (export command in the module docstring)")
    data = Path(os.environ["NEOS_SFT_DATA"]).resolve()
    rows = len(pd.read_parquet(data / "sft.parquet", columns=["id"]))
    assert rows >= BATCH, f"{data}/sft.parquet has {rows} rows; export more tasks (--limit)"
    out = Path(os.environ.get("NEOS_SFT_OUT") or tmp_path / "sft").resolve()
    model = tiny_model_dir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p),
        "VERL_USE_EXTERNAL_MODULES": "verl_ext.plugin",
        # the image's JAX would otherwise take ~75% of the GPU if anything initialised it
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "JAX_PLATFORMS": "cpu",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=1",
               "-m", "verl.trainer.sft_trainer", *overrides(model, data, out)]
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "sft_trainer.log"  # written as it runs: follow the losses, keep them if the timeout ends it
    print(f"\n{rows} SFT rows; log: {log_path}; command:\n{shlex.join(command)}")
    with open(log_path, "w") as log_file:
        run = subprocess.run(command, check=False, cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                             timeout=float(os.environ.get("NEOS_SFT_TIMEOUT", 540)))  # ~3 s a step on an H200
    log = log_path.read_text(errors="replace")
    assert run.returncode == 0, log[-8000:]
    losses = {int(step): float(loss) for step, loss in LOSS.findall(log)}
    for line in (m.group(0) for m in LOSS.finditer(log)):
        print(line)
    assert sorted(losses) == list(range(1, STEPS + 1)), log[-8000:]
    assert losses[STEPS] < losses[1], losses

    hf = out / f"global_step_{STEPS}" / "huggingface"
    AutoProcessor.from_pretrained(model).save_pretrained(hf)  # training leaves it unchanged; the policy needs it
    trained = AutoModelForImageTextToText.from_pretrained(hf, dtype=torch.float32)
    original = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32)
    before = dict(original.named_parameters())
    assert any(not torch.equal(p, before[n]) for n, p in trained.named_parameters())
    AutoProcessor.from_pretrained(hf)
    print(f"loss {losses[1]:.4f} -> {losses[STEPS]:.4f} over {STEPS} steps; RL smoke policy: {hf}")
