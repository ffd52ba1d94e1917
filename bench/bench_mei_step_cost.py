"""Cost of one MEI warm-start step against its micro-batch size, on the host: what can be measured without a GPU.

On the real pairs (``mei_sft.jsonl`` of data generation) in the warm start's order, for each micro-batch size:

- padding: tokens a step puts through the model when every micro-batch is padded to its longest sequence
  (``--no-remove-padding``, the smoke's setting) against the real tokens, over one epoch;
- the driver's share of a step: ``collate`` of one global batch of that size (what ``train_mei`` builds before each
  ``train_batch`` call) and its pickled size (what Ray ships to the worker);
- one optimiser step of the model on this host's CPU (fp32, sdpa, gradient checkpointing, vision tower frozen, the
  masked SFT loss, AdamW): seconds per micro-batch and per 1,000 real tokens; the ratio is against micro-batch 1,
  measured in the same run. The CPU figure is a lower bound on compute only: on a GPU a model this small is bound by
  per-step overhead, not arithmetic.

    PYTHONPATH=. .venv/bin/python bench/bench_mei_step_cost.py --model .gpu/smoke-vl \\
        --pairs .gpu/neos-data/mei_sft.jsonl --micro 1,2,4
"""

from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

from neos_core.usage import OneLineParser, positive_int


def sizes(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be >= 1, got {text!r}")
    return out


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_mei_step_cost.py", description="Cost of one MEI warm-start step "
                      "against its micro-batch size, on the host (padding, driver-side collate, CPU step).")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="HF directory of the MEI model")
    p.add_argument("--pairs", required=True, type=Path, metavar="FILE", help="mei_sft.jsonl of data generation")
    p.add_argument("--micro", type=sizes, default=[1, 2, 4], metavar="N,N",
                   help="micro-batch sizes to time on the CPU (default: 1,2,4; 13 needs ~20 GB for its fp32 logits)")
    p.add_argument("--layout", type=sizes, default=[1, 4, 8, 13], metavar="N,N",
                   help="micro-batch sizes for the padding and collate figures (default: 1,4,8,13)")
    p.add_argument("--repeat", type=positive_int, default=2, metavar="N", help="timed steps per size (default: 2)")
    return p


def padded_tokens(lengths: list[int], micro: int) -> int:
    """Tokens through the model over one epoch when micro-batches of ``micro`` are padded to their longest."""
    return sum(max(lengths[i:i + micro]) * len(lengths[i:i + micro]) for i in range(0, len(lengths), micro))


def padded_batch(items: list[dict], pad_token_id: int) -> dict:
    """HF model inputs of one padded micro-batch (right padding), the images of its calls concatenated."""
    import torch

    longest = max(int(x["input_ids"].shape[0]) for x in items)
    ids = torch.full((len(items), longest), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for row, x in enumerate(items):
        n = int(x["input_ids"].shape[0])
        ids[row, :n], mask[row, :n], loss_mask[row, :n] = x["input_ids"], 1, x["loss_mask"]
    batch = {"input_ids": ids, "attention_mask": mask, "loss_mask": loss_mask}
    images = [x["multi_modal_inputs"] for x in items if x["multi_modal_inputs"]]
    if images:
        batch["pixel_values"] = torch.cat([m["pixel_values"] for m in images])
        batch["image_grid_thw"] = torch.cat([m["image_grid_thw"] for m in images])
    return batch


def cpu_step(model, optimizer, batch: dict) -> float:
    """One optimiser step on ``batch`` with the masked SFT loss (Neos Eq. 5); returns the loss."""
    import torch

    loss_mask = batch.pop("loss_mask")
    logits = model(**batch).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
    target = loss_mask[:, 1:]
    loss = (nll * target).sum() / target.sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss)


def main() -> None:
    args = parser().parse_args()
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl_ext.mei.sft import collate
    from verl_ext.mei.warm_start import load_pairs
    from verl_ext.mei.worker import freeze_vision

    processor = AutoProcessor.from_pretrained(args.model)
    pad = processor.tokenizer.pad_token_id
    items = load_pairs(args.pairs, processor, max_length=32_768).items
    lengths = [int(x["input_ids"].shape[0]) for x in items]
    real = sum(lengths)
    print(f"{len(items)} pairs, {real:,} tokens an epoch ({min(lengths)}-{max(lengths)} a pair), "
          f"{sum(int(x['loss_mask'].sum()) for x in items):,} target tokens")
    for micro in args.layout:
        batch = items[:micro]
        start = time.perf_counter()
        td = collate(batch, pad_token_id=pad)
        collate_s = time.perf_counter() - start
        shipped = len(pickle.dumps(td))
        padded = padded_tokens(lengths, micro)
        print(f"micro-batch {micro:>2}: padded/real tokens an epoch {padded / real:.3f} ({padded:,}); collate of "
              f"{micro} pairs {1000 * collate_s:.1f} ms, {shipped / 1e6:.1f} MB pickled")

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32,
                                                        attn_implementation="sdpa")
    model.gradient_checkpointing_enable()
    model.train()
    freeze_vision(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3,
                                  betas=(0.9, 0.95), weight_decay=0.1)
    cpu_step(model, optimizer, padded_batch(items[:1], pad))  # warm-up: allocator, optimizer state
    base = None
    for micro in args.micro:
        seconds, tokens = [], 0
        for k in range(args.repeat):
            chunk = [items[(k * micro + i) % len(items)] for i in range(micro)]
            tokens += sum(int(x["input_ids"].shape[0]) for x in chunk)
            batch = padded_batch(chunk, pad)
            start = time.perf_counter()
            cpu_step(model, optimizer, batch)
            seconds.append(time.perf_counter() - start)
        per_kilotoken = 1000 * sum(seconds) / tokens
        base = base or per_kilotoken
        print(f"CPU step, micro-batch {micro:>2}: {sum(seconds) / len(seconds):.2f} s a step, "
              f"{per_kilotoken:.3f} s per 1,000 real tokens, {per_kilotoken / base:.2f}x micro-batch "
              f"{args.micro[0]}'s cost per token")


if __name__ == "__main__":
    main()
