"""CLI: ``python -m verl_ext.models build --out DIR [--seed N] [--cache DIR] [--hidden-size N] [--layers N]
[--dtype float32|bfloat16]`` writes the tiny Qwen2.5-VL model (by default 64 wide, 2 layers, float32)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from data_gen.world.sources import SourceCache
from verl_ext.models.tiny_vl import HF_MODEL_TYPE, build_tiny_qwen_vl


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m verl_ext.models", description="Build the tiny Qwen2.5-VL used by the CPU tests and the smoke run."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write a tiny randomly initialised Qwen2.5-VL model directory")
    build.add_argument("--out", type=Path, required=True, help="model directory to write (replaced if present)")
    build.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    build.add_argument(
        "--cache", type=Path, default=None, help="source cache (default NEOS_WORLD_CACHE or ~/.cache/neos-world)"
    )
    build.add_argument("--hidden-size", type=int, default=64, help="text width, a multiple of 32 (head_dim stays 16)")
    build.add_argument("--layers", type=int, default=2, help="text decoder layers")
    build.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="stored weights")
    args = parser.parse_args(argv)
    path = build_tiny_qwen_vl(
        args.out,
        seed=args.seed,
        cache=SourceCache(args.cache) if args.cache else None,
        hidden_size=args.hidden_size,
        layers=args.layers,
        dtype=getattr(torch, args.dtype),
    )
    print(f"{path} (hf_model_type={HF_MODEL_TYPE})")


if __name__ == "__main__":
    main()
