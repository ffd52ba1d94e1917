"""One MEI update through verl's TrainingWorker (FSDP2 engine) on one GPU with the tiny Qwen2.5-VL; prints tokens/s.

For the H200 machine (verl and Ray from ``../shared/gpu/verl_wheels.sh`` in ``/tmp/site``; the tiny model built here
with ``python -m verl_ext.models build --out .gpu/tiny-vl`` and carried). Run::

    PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/extra NEOS_TINY_VL_DIR=.gpu/tiny-vl \\
      python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu tests/mei/test_mei_sft_on_gpu.py

Examples carry images: verl 0.9.1's Qwen2-VL forward breaks on text-only batches under transformers 5.x (see
tests/rollout/test_hf_replica_on_gpu.py), and ``use_remove_padding=false`` for the same transformers' attention patch.
The image's JAX would preallocate ~75% of the GPU if anything initialised it (seen: the driver holding 105 GiB and the
step running out of memory); importing the bench module sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` and
``JAX_PLATFORMS=cpu`` first. tool_server's ``json_repair`` and ``bm25s`` are not in the image: copy both packages
from the CPU venv's site-packages into ``.gpu/extra`` and carry it.

Seen on the H200 on 2026-12-02: 2 steps, 9,742 tokens (1,196 target), loss 11.91, the saved checkpoint's vision weights
equal the original's and language weights moved; 1,529 tokens/s for this first (cold) update.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def _bench():
    """bench/bench_mei_sft.py, which owns the synthetic MEI calls this test trains on."""
    spec = importlib.util.spec_from_file_location("bench_mei_sft", REPO / "bench" / "bench_mei_sft.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # also keeps JAX, if the machine has it, off the GPU
    return module


def _model_dir() -> Path:
    if os.environ.get("NEOS_TINY_VL_DIR"):
        return Path(os.environ["NEOS_TINY_VL_DIR"]).resolve()
    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl

    return cached_tiny_qwen_vl()


def _update(examples_of, out_dir: Path):
    """One ``train_mei`` update (global batch 16, micro-batch 4) on ``examples_of(bench)``'s calls in a fresh Ray."""
    bench = _bench()  # first: keeps JAX off the GPU before anything imports it
    import ray
    import torch
    from transformers import AutoProcessor

    from verl_ext.mei.sft import tokenize
    from verl_ext.mei.worker import MEITrainSettings, build_worker_group, train_mei

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    processor = AutoProcessor.from_pretrained(_model_dir())
    items = [tokenize(ex, processor) for ex in examples_of(bench)]
    ray.init(num_gpus=1, include_dashboard=False)
    try:
        settings = MEITrainSettings(model_path=str(_model_dir()), attn_implementation="sdpa", use_remove_padding=False,
                                    global_batch_size=16, micro_batch_size_per_gpu=4)
        group = build_worker_group(settings)
        return train_mei(group, items, "v1", out_dir=out_dir, pad_token_id=processor.tokenizer.pad_token_id,
                         global_batch_size=16, micro_batch_size=4)
    finally:
        ray.shutdown()


def test_one_mei_update_through_the_training_worker(tmp_path):
    update = _update(lambda bench: bench.synthetic_examples(32), tmp_path)
    import torch
    from transformers import AutoModelForImageTextToText

    m = update.metrics
    print(f"\nMEI SFT on {torch.cuda.get_device_name()}: {m['mei/steps']:.0f} steps, {m['mei/tokens']:.0f} tokens "
          f"({m['mei/target_tokens']:.0f} target) in {m['mei/seconds']:.2f} s = {m['mei/tokens_per_s']:.0f} tokens/s, "
          f"loss {m['mei/loss']:.4f}")
    assert m["mei/steps"] == 2 and math.isfinite(m["mei/loss"]) and m["mei/loss"] > 0

    # The checkpoint is a servable HF directory; vision weights are untouched, language weights moved.
    assert (update.checkpoint_dir / "config.json").is_file()
    trained = AutoModelForImageTextToText.from_pretrained(update.checkpoint_dir, dtype=torch.float32)
    original = AutoModelForImageTextToText.from_pretrained(_model_dir(), dtype=torch.float32)
    before = dict(original.named_parameters())
    vision = [n for n, _ in trained.named_parameters() if ".visual." in f".{n}"]
    language = [n for n, _ in trained.named_parameters() if ".visual." not in f".{n}"]
    after = dict(trained.named_parameters())
    assert vision and all(torch.equal(after[n], before[n]) for n in vision)
    assert any(not torch.equal(after[n], before[n]) for n in language)


def test_text_only_micro_batches(tmp_path):
    """WebVisit calls carry no pixels; a micro-batch of only such calls must train too (2 of the 8 here)."""
    update = _update(lambda bench: bench.synthetic_web_examples(8) + bench.synthetic_examples(24), tmp_path)
    assert update.metrics["mei/steps"] == 2 and math.isfinite(update.metrics["mei/loss"])
