"""CLI: ``python -m verl_ext.models build --out DIR [--seed N] [--cache DIR] [--hidden-size N] [--layers N]
[--dtype float32|bfloat16]`` writes the tiny Qwen2.5-VL model (by default 64 wide, 2 layers, float32)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neos_core.usage import OneLineParser, nonnegative_int, positive_int


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.models", description="Build the tiny randomly initialised Qwen2.5-VL "
                      "(real Qwen tokenizer) used by the CPU tests, the demo and the GPU smoke run.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    build = sub.add_parser("build", help="write a tiny randomly initialised Qwen2.5-VL model directory",
                           description="Write a tiny randomly initialised Qwen2.5-VL model directory (weights, "
                           "config, tokenizer, processor, chat template) loadable by transformers and verl.")
    build.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="model directory to write; replaced if it holds a model built by this command, never a "
                       "directory holding anything else")
    build.add_argument("--seed", type=nonnegative_int, default=0, help="weight initialisation seed (default: 0)")
    build.add_argument("--cache", type=Path, default=None, metavar="DIR",
                       help="source cache holding the tokenizer package (default: $NEOS_WORLD_CACHE or "
                       "~/.cache/neos-world)")
    build.add_argument("--hidden-size", type=positive_int, default=64, metavar="N",
                       help="text width, a multiple of 32; head_dim stays 16 (default: 64)")
    build.add_argument("--layers", type=positive_int, default=2, metavar="N", help="text decoder layers (default: 2)")
    build.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                       help="dtype of the stored weights; bfloat16 halves the files of a wider model "
                       "(default: float32)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.hidden_size % 32:
        p.error(f"argument --hidden-size: must be a multiple of 32, got {args.hidden_size}")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        p.error(f"--out: {out} is a file, not a directory")

    import torch

    from neos_core.world.sources import SourceCache
    from verl_ext.models.tiny_vl import HF_MODEL_TYPE, PROVENANCE_FILE, build_tiny_qwen_vl

    if out.is_dir() and any(out.iterdir()) and not (out / PROVENANCE_FILE).is_file():
        p.error(f"--out: {out} holds something other than a model built here (no {PROVENANCE_FILE}); refusing to "
                "replace it")

    path = build_tiny_qwen_vl(
        out,
        seed=args.seed,
        cache=SourceCache(args.cache) if args.cache else None,
        hidden_size=args.hidden_size,
        layers=args.layers,
        dtype=getattr(torch, args.dtype),
    )
    print(f"{path.resolve()} (hf_model_type={HF_MODEL_TYPE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
