"""Cold-start MEI SFT: an MEI checkpoint trained on data generation's MEI pairs before RL starts.

``python -m data_gen neos`` writes ``OUT/mei_sft.jsonl`` (the MEI log format, images in its blob store): the chat
messages each of the offline expert's MEI calls would have sent a model, answered by evidence checked against the
material. Training on them gives the first MEI version a model that already answers in the evidence schemas, so
co-evolution has valid calls to retain from the first rollout round. Same worker group and loss as the online
updates (``verl_ext.mei.worker``: verl's ``TrainingWorker``, masked SFT loss, vision tower frozen); only the
schedule differs (several epochs, a higher learning rate for a small model trained from scratch).

    python -m verl_ext.mei.warm_start --model DIR --pairs OUT/mei_sft.jsonl --out MEI_DIR --epochs 20 --lr 1e-3

The checkpoint is ``MEI_DIR/<version>/huggingface`` (with the model's processor), ready for
``python -m verl_ext.mei.server --model ... --version <version>``. Needs a GPU (verl's FSDP engine) and Ray.
While it trains it prints progress lines (step, epoch, loss, tokens/s, elapsed, ETA: :mod:`verl_ext.mei.progress`)
about every twentieth of the run and at least every 30 s.

The loss does not say whether the MEI is usable, so the run ends with :mod:`verl_ext.mei.check`: a few training
pairs (``--check-calls``) answered greedily through the MEI server's own generation path and read by the tool
server's own parser and checks. It prints ``MEI <version> warm start: valid answers k/n (...)``, warns on stderr below
``--min-valid-share`` (exit 1 instead with ``--strict-check``), and ``MEI_DIR/<version>/warm_start.json`` keeps the
run's settings, metrics and check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from neos_core.usage import OneLineParser, nonnegative_int, positive_float, positive_int
from verl_ext.mei import check

# The GPU image ships JAX; anything that initialised it would preallocate most of the GPU for XLA.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.mei.warm_start", description="Cold-start MEI SFT: train an MEI "
                      "checkpoint on data generation's MEI pairs before RL starts, with the worker group and loss of "
                      "the online MEI updates (Neos: Learning to Interleave Search and Visual Reasoning, Sec. 3.5). "
                      "Needs a GPU and Ray.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="HF directory of the MEI model to start "
                   "from")
    p.add_argument("--pairs", required=True, type=Path, metavar="FILE",
                   help="mei_sft.jsonl from python -m data_gen neos (its images in the blob store beside it)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="directory for the checkpoint, written to OUT/VERSION/huggingface")
    p.add_argument("--version", default="v0", help="the version name the MEI server will report (default: v0)")
    p.add_argument("--epochs", type=positive_int, default=1, metavar="N",
                   help="passes over the pairs (default: 1, the paper's online update; a cold start takes more)")
    p.add_argument("--lr", type=positive_float, default=1e-6,
                   help="peak learning rate, cosine to a tenth with 5%% warmup (default: 1e-6, the paper's online MEI "
                   "lr, Neos Table 12; a model trained from scratch needs more, e.g. 1e-3)")
    p.add_argument("--global-batch-size", type=positive_int, default=16, metavar="N",
                   help="pairs per optimizer step (default: 16, Neos Table 12)")
    p.add_argument("--micro-batch-size", type=positive_int, default=1, metavar="N",
                   help="pairs per forward pass per GPU (default: 1)")
    p.add_argument("--attn-implementation", default=None,
                   help="attention kernel passed to transformers, e.g. sdpa where flash-attn is not installed "
                   "(default: verl's choice)")
    p.add_argument("--no-remove-padding", action="store_true", help="verl's remove-padding patch off")
    check.add_arguments(p)
    p.add_argument("--extra-rounds", type=nonnegative_int, default=0, metavar="N",
                   help="while the check finds too few usable answers, train up to N more rounds of --epochs (each a "
                   "fresh warmup and cosine decay from the current weights) and check again (default: 0)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, checked: usage errors exit 2 with one line before anything heavy loads."""
    p = parser()
    args = p.parse_args(argv)
    if args.extra_rounds and not args.check_calls:
        p.error("--extra-rounds: needs the check (--check-calls > 0)")
    if not args.pairs.is_file():
        p.error(f"--pairs: {args.pairs}: no such file (export it with `python -m data_gen neos --out DIR`)")
    if not (args.model / "config.json").is_file():
        p.error(f"--model: {args.model}: not an HF model directory (no config.json)")
    if args.version.strip() == "" or "/" in args.version:
        p.error(f"--version: {args.version!r} must be a non-empty name without '/'")
    return args


def load_pairs(path: Path, processor, max_length: int):
    """The pairs tokenised; calls that cannot be examples (missing image, too long) are skipped and counted."""
    from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of
    from verl_ext.mei.sft import tokenize_calls

    read = MEILog.read(path)
    return tokenize_calls(read.records, BlobStore(blobs_dir_of(path)), processor,
                          max_length=max_length)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray
    import torch
    from transformers import AutoProcessor

    from tool_server.mei.jsonl import write_atomic
    from verl_ext.mei.worker import MEITrainSettings, build_worker_group, train_mei

    settings = MEITrainSettings(
        model_path=str(args.model.resolve()), lr=args.lr, global_batch_size=args.global_batch_size,
        micro_batch_size_per_gpu=args.micro_batch_size, attn_implementation=args.attn_implementation,
        use_remove_padding=not args.no_remove_padding,
    )
    processor = AutoProcessor.from_pretrained(settings.model_path)
    tokenized = load_pairs(args.pairs, processor, settings.max_seq_len)
    if not tokenized.items:
        print(f"python -m verl_ext.mei.warm_start: error: --pairs: no usable pairs in {args.pairs} "
              f"(skipped: {dict(tokenized.skipped)})", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rounds: list[dict] = []
    report = None
    ray.init(num_gpus=settings.n_gpus, include_dashboard=False)
    try:
        group = build_worker_group(settings)
        for _ in range(1 + args.extra_rounds):
            update = train_mei(group, tokenized.items, args.version, out_dir=args.out.resolve(),
                               pad_token_id=processor.tokenizer.pad_token_id,
                               global_batch_size=settings.global_batch_size,
                               micro_batch_size=settings.micro_batch_size_per_gpu, epochs=args.epochs)
            processor.save_pretrained(update.checkpoint_dir)
            rounds.append(dict(update.metrics))
            print(json.dumps({"round": len(rounds), "checkpoint": str(update.checkpoint_dir), **update.metrics}),
                  flush=True)
            if not args.check_calls:
                break
            # the checkpoint as the MEI server will serve it, while the SFT group waits for a possible next round
            report = check.check_checkpoint(update.checkpoint_dir, args.pairs, calls=args.check_calls, device=device,
                                            max_tokens=args.check_max_new_tokens)
            rounds[-1]["check"] = report.to_json()
            print(f"MEI {args.version} warm start, round {len(rounds)}: {report.line()}", flush=True)
            if report.share >= args.min_valid_share:
                break
    finally:
        ray.shutdown()
    summary = {"checkpoint": str(update.checkpoint_dir), "pairs": len(tokenized.items),
               "skipped": dict(tokenized.skipped), "epochs_trained": args.epochs * len(rounds), **update.metrics}
    print(json.dumps(summary))
    code = 0
    if report is not None:
        summary["check"] = report.to_json()  # the last round's: the checkpoint's
        code = check.verdict(report, min_share=args.min_valid_share, strict=args.strict_check,
                             label=f"MEI {args.version} warm start")
    settings_used = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_atomic(update.checkpoint_dir.parent / "warm_start.json",
                 json.dumps({"args": settings_used, **summary, "rounds": rounds}, indent=1).encode(), durable=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
