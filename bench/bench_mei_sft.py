"""MEI SFT throughput: our MEI update (``train_mei`` through our worker group on verl's TrainingWorker, FSDP2) vs verl's
own SFT trainer (``verl.trainer.sft_trainer_ray``) on the same examples, tokens/s and MFU, in one run on one GPU.

Synthetic ReverseImageSearch calls (two small images each, a short JSON target). Ours: ``--updates`` MEI updates of
``--examples`` calls on one worker group; its figure is the tokens/s (all tokens through forward and backward) of the
updates after the first (the first pays CUDA/NCCL warm-up), and verl's per-step MFU averaged. Then Ray restarts and
verl's ``SFTTrainer`` trains ``--updates`` epochs over the same calls written as verl's multi-turn SFT parquet
(``messages`` with ``<image>`` placeholders, ``images``), with the same batch, micro-batch, dtype, attention,
gradient checkpointing and padding; its steps are timed by a wrapper of its worker group, and its figure is the
tokens/s of the epochs after the first and verl's MFU. The ratio is ours over verl's (the goal is >= 1.0). Differences
that stay: verl's trainer trains the vision tower (ours freezes it, as the paper does: verl has no working switch)
and tokenizes the conversation its own way (its token count is its own). Needs a CUDA device, verl and Ray, and a
model directory with weights: at a real shape, random ones built on the GPU machine.

FSDP keeps fp32 weights, gradients and Adam's two moments: 16 bytes a trained parameter, 4 a frozen one. On an H100
(80 GB) the Qwen2.5-VL-3B shape is the one that fits without offload: 3,754,622,976 x 16 B = 60 GB for verl's
trainer, 52 GB for ours (its 668,684,288 vision parameters frozen); the two run one after the other, and a call
(~305 tokens) leaves a micro-batch of 4 far inside the ~20 GB left, so the defaults need no change::

    python -m verl_ext.models shape --like qwen2.5-vl-3b --out /tmp/q3b --weights random --device cuda
    python bench/bench_mei_sft.py --model /tmp/q3b --examples 64 --updates 3 --json /tmp/out/mei_sft.json

(should it run out of GPU memory, ``--offload optimizer`` moves the moments, 25-30 GB, to host memory). At 7B/8B the
16 bytes a parameter are ~130-140 GB: ``--offload optimizer`` keeps the moments (~70 GB) in host memory and an
H200's 141 GB holds the rest, an H100 does not; ``--offload all`` needs ~140 GB of host memory, more than the GPU
machine's 128 GiB::

    python -m verl_ext.models shape --like qwen3-vl-8b --out /tmp/q3vl8b --weights random --device cuda
    python bench/bench_mei_sft.py --model /tmp/q3vl8b --examples 64 --updates 3 --offload optimizer \
        --json /tmp/out/mei_sft.json

On CPU (``tests/mei/test_bench_mei_sft_on_cpu.py``): the parquet, verl's dataset reading it, the config, the timing;
neither engine runs there.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from neos_core.usage import OneLineParser, positive_int

# The GPU image ships JAX; anything that initialises it would preallocate most of the GPU for XLA.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def synthetic_examples(n: int) -> list:
    """``n`` ReverseImageSearch SFT examples (query 56x56, one 84x56 candidate, a one-candidate JSON answer)."""
    from tool_server.mei.prompts import reverse_image_messages
    from tool_server.mei.schema import ImageView
    from verl_ext.mei.sft import SFTExample, target_text

    out = []
    for i in range(n):
        q = ImageView(url=f"https://neos-world.invalid/q{i}.png", png=_png((10 * i % 255, 80, 160), (56, 56)))
        c = ImageView(url=f"https://neos-world.invalid/c{i}.png", png=_png((200, 10 * i % 255, 40), (84, 56)))
        target = {"rational": f"case {i}", "candidates": [
            {"index": 0, "match_state": ["visual_match", "not_match"][i % 2], "caption": f"candidate {i}"}]}
        out.append(SFTExample(f"g{i}", reverse_image_messages(f"goal {i}", q, [c]), target_text(target)))
    return out


def synthetic_web_examples(n: int) -> list:
    """``n`` text-only WebVisit SFT examples (a short page, no images): most MEI calls in a Neos rollout."""
    from tool_server.mei.prompts import web_visit_messages
    from tool_server.mei.schema import PageView
    from verl_ext.mei.sft import SFTExample, target_text

    out = []
    for i in range(n):
        page = PageView(url=f"https://neos-world.invalid/wiki/P{i}", title=f"P{i}",
                        text=f"Page {i}. The bridge over river {i} was built in {1800 + i}.")
        target = {"rational": "The page dates the bridge.", "evidence": f"built in {1800 + i}",
                  "summary": f"{1800 + i}", "relevant_images": []}
        out.append(SFTExample(f"w{i}", web_visit_messages(f"when was bridge {i} built", page, max_page_chars=2000),
                              target_text(target)))
    return out


def verl_sft_rows(examples: list) -> list[dict[str, Any]]:
    """The examples as verl's ``MultiTurnSFTDataset`` reads them: each message's content a string with ``<image>``
    where an image was, the images' PNG bytes in order, the target as the assistant turn."""
    rows = []
    for ex in examples:
        messages, images = [], []
        for m in ex.messages:
            content = m["content"]
            if not isinstance(content, str):
                parts = []
                for part in content:
                    if part["type"] == "text":
                        parts.append(part["text"])
                    else:
                        images.append({"bytes": base64.b64decode(part["image_url"]["url"].split(",", 1)[1])})
                        parts.append("<image>")
                content = "".join(parts)
            messages.append({"role": m["role"], "content": content})
        rows.append({"messages": messages + [{"role": "assistant", "content": ex.target}], "images": images})
    return rows


def verl_sft_config(args: argparse.Namespace, parquet: Path, out_dir: Path):
    """verl's ``sft_trainer_engine`` config with our MEI bench's settings (``MEITrainSettings`` as the bench sets
    them): FSDP2, fp32 master weights, bf16 compute, sdpa without padding removal, gradient checkpointing, no dynamic
    batch, the paper's optimiser."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="sft_trainer_engine", overrides=[
            f"model.path={os.path.abspath(args.model)}",
            "model.use_remove_padding=False",
            "model.enable_gradient_checkpointing=True",
            "+model.override_config.attn_implementation=sdpa",
            "engine.strategy=fsdp2",
            "engine.model_dtype=fp32",
            "engine.use_torch_compile=False",
            f"engine.param_offload={args.offload == 'all'}",
            f"engine.optimizer_offload={args.offload != 'none'}",
            "optim.lr=1e-6",
            "optim.weight_decay=0.1",
            "optim.betas=[0.9,0.95]",
            "optim.lr_warmup_steps_ratio=0.05",
            "optim.lr_scheduler_type=cosine",
            "optim.min_lr_ratio=0.1",
            f"data.train_files={parquet}",
            f"data.train_batch_size={args.batch}",
            f"data.micro_batch_size_per_gpu={args.micro}",
            "data.use_dynamic_bsz=False",
            "data.max_length=32768",
            "data.num_workers=0",
            "+data.image_key=images",
            f"trainer.total_epochs={args.updates}",
            "trainer.logger=[console]",
            "trainer.device=cuda",
            "trainer.n_gpus_per_node=1",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out_dir}",
            "checkpoint.save_contents=[hf_model]",
        ])


class TimedSteps:
    """verl's SFT worker group with each ``train_batch`` timed to the moment its result is fetched, keeping the step's
    tokens and verl's MFU (read before the trainer renames the metric)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.steps: list[tuple[float, int, float | None]] = []  # (done at, tokens, mfu)

    def train_batch(self, data: Any) -> Any:
        tokens = int(data["input_ids"].offsets().diff().sum()) if data["input_ids"].is_nested else int(
            data["attention_mask"].sum())
        future, steps = self.group.train_batch(data), self.steps

        class Fetch:
            def get(self) -> Any:
                from verl.utils import tensordict_utils as tu

                output = future.get()
                mfu = tu.get(output, "metrics").get("mfu")
                steps.append((time.perf_counter(), tokens, None if mfu is None else float(mfu)))
                return output

        return Fetch()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)


def steady_rate(steps: list[tuple[float, int, float | None]], first: int) -> tuple[float, float | None]:
    """tokens/s over the steps after the ``first`` (warm-up) ones, timed from the end of the last warm-up step; and
    their mean MFU (None if verl reported none)."""
    if len(steps) <= first:
        raise ValueError(f"{len(steps)} steps: nothing after the {first} warm-up step(s) to time")
    later = steps[first:]
    seconds = later[-1][0] - steps[first - 1][0]
    mfus = [m for _, _, m in later if m is not None]
    return sum(t for _, t, _ in later) / seconds, (sum(mfus) / len(mfus) if mfus else None)


def run_verl_sft(args: argparse.Namespace, examples: list) -> tuple[float, float | None, int]:
    """verl's own SFT trainer on ``examples``: (tokens/s after the first epoch, mean MFU, steps)."""
    import pandas as pd
    from verl.trainer.sft_trainer_ray import SFTTrainer

    with tempfile.TemporaryDirectory() as tmp:
        parquet = Path(tmp) / "mei_sft.parquet"
        pd.DataFrame(verl_sft_rows(examples)).to_parquet(parquet)
        trainer = SFTTrainer(config=verl_sft_config(args, parquet, Path(tmp) / "ckpt"))
        timed = TimedSteps(trainer.training_client)
        trainer.training_client = timed
        trainer.fit()
    rate, mfu = steady_rate(timed.steps, trainer.steps_per_epoch)
    return rate, mfu, len(timed.steps)


def run_ours(args: argparse.Namespace, examples: list) -> tuple[float, float | None]:
    """Our MEI updates: (tokens/s of the updates after the first, mean MFU of those)."""
    import ray
    from transformers import AutoProcessor

    from verl_ext.mei.sft import tokenize
    from verl_ext.mei.worker import MEITrainSettings, build_worker_group, train_mei

    processor = AutoProcessor.from_pretrained(args.model)
    items = [tokenize(ex, processor) for ex in examples]
    updates = []
    try:
        group = build_worker_group(MEITrainSettings(
            model_path=os.path.abspath(args.model), attn_implementation="sdpa", use_remove_padding=False,
            global_batch_size=args.batch, micro_batch_size_per_gpu=args.micro, param_offload=args.offload == "all",
            optimizer_offload=args.offload != "none"))
        with tempfile.TemporaryDirectory() as out:
            for k in range(args.updates):
                m = train_mei(group, items, f"v{k + 1}", out_dir=out, pad_token_id=processor.tokenizer.pad_token_id,
                              global_batch_size=args.batch, micro_batch_size=args.micro).metrics
                updates.append(m)
                print(f"ours update {k + 1}: {m['mei/steps']:.0f} steps, {m['mei/tokens']:.0f} tokens "
                      f"({m['mei/target_tokens']:.0f} target), {m['mei/seconds']:.2f} s, "
                      f"{m['mei/tokens_per_s']:.0f} tokens/s, MFU {m.get('mei/mfu', float('nan')):.3f}, "
                      f"loss {m['mei/loss']:.4f}", flush=True)
    finally:
        ray.shutdown()  # verl's trainer starts its own Ray, with the GPU free again
    later = updates[1:]
    rate = sum(m["mei/tokens"] for m in later) / sum(m["mei/seconds"] for m in later)
    mfus = [m["mei/mfu"] for m in later if "mei/mfu" in m]
    return rate, (statistics.mean(mfus) if mfus else None)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_mei_sft.py", description="MEI SFT throughput: our MEI update through "
                      "our worker group vs verl's own SFT trainer on the same examples, tokens/s and MFU after the "
                      "first update/epoch, and the ratio. Needs a CUDA device, verl and Ray.")
    p.add_argument("--model", required=True, metavar="DIR", help="HF directory of the MEI model to train (weights)")
    p.add_argument("--examples", type=positive_int, default=64, metavar="N",
                   help="synthetic ReverseImageSearch calls per update (default: 64)")
    p.add_argument("--updates", type=positive_int, default=3, metavar="N",
                   help="our MEI updates and verl's epochs; the first of each is warm-up (default: 3)")
    p.add_argument("--batch", type=positive_int, default=16, metavar="N",
                   help="global batch size (default: 16, the paper's)")
    p.add_argument("--micro", type=positive_int, default=4, metavar="N", help="micro-batch size per GPU (default: 4)")
    p.add_argument("--offload", choices=("none", "optimizer", "all"), default="none",
                   help="what stays in host memory between uses, both sides: nothing, the optimizer state, or the "
                   "parameters too (default: none; an 8B model's fp32 weights, gradients and Adam moments take ~16 "
                   "bytes a parameter)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.updates < 2:
        p.error(f"argument --updates: needs 2 or more (the first is warm-up), got {args.updates}")
    import ray

    examples = synthetic_examples(args.examples)
    ray.init(num_gpus=1, include_dashboard=False, log_to_driver=False)
    ours, ours_mfu = run_ours(args, examples)
    ray.init(num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        verl, verl_mfu, steps = run_verl_sft(args, examples)
    finally:
        ray.shutdown()

    def mfu(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    print(f"ours {ours:,.0f} tokens/s (MFU {mfu(ours_mfu)}), verl's SFT trainer {verl:,.0f} tokens/s (MFU "
          f"{mfu(verl_mfu)}, {steps} steps): ours/verl {ours / verl:.3f}x")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "examples": args.examples, "updates": args.updates,
                                         "offload": args.offload, "ours_tokens_per_s": ours, "ours_mfu": ours_mfu,
                                         "verl_tokens_per_s": verl, "verl_mfu": verl_mfu,
                                         "ratio": ours / verl}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
