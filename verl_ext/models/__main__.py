"""CLI: ``python -m verl_ext.models build --out DIR [--seed N] [--cache DIR] [--hidden-size N] [--layers N]
[--dtype float32|bfloat16] [--tokenizer-from DIR]`` writes the tiny Qwen2.5-VL model (by default 64 wide, 2 layers,
float32);
``python -m verl_ext.models shape --like NAME --out DIR [--weights none|random] [--device D]`` writes a released
model's architecture (see :mod:`verl_ext.models.shapes`) for GPU benchmarks at real shapes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neos_core.usage import OneLineParser, nonnegative_int, positive_int

# verl_ext.models.shapes.SHAPES, named here so --help stays light
SHAPE_NAMES = ("qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen3-vl-8b")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.models", description="Build the tiny randomly initialised Qwen2.5-VL "
                      "(real Qwen tokenizer) used by the CPU tests, the demo and the GPU smoke run, or a released "
                      "model's architecture for benchmarks at real shapes.")
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
    tokenizer_from = ("take the tokenizer from a model directory built here instead of the source cache (on a machine "
                      "without network, e.g. the GPU machine, from the staged tiny model)")
    build.add_argument("--tokenizer-from", type=Path, default=None, metavar="DIR", help=tokenizer_from)
    shape = sub.add_parser("shape", help="write a released model's architecture (config, tokenizer, processor; no "
                           "weights unless --weights random)",
                           description="Write the real architecture config of a released Qwen VL model with the tiny "
                           "model's tokenizer, processor and chat template. Without weights: serve it with vLLM's "
                           "--load-format dummy or build it with from_config. Checks the built model's parameter "
                           "count (on the meta device) against the released checkpoint's.")
    shape.add_argument("--like", required=True, choices=SHAPE_NAMES, metavar="NAME",
                       help=f"released model: {', '.join(SHAPE_NAMES)}")
    shape.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="model directory to write; replaced if it holds a model built by this CLI")
    shape.add_argument("--cache", type=Path, default=None, metavar="DIR",
                       help="source cache holding the tokenizer package (default: $NEOS_WORLD_CACHE or "
                       "~/.cache/neos-world)")
    shape.add_argument("--tokenizer-from", type=Path, default=None, metavar="DIR", help=tokenizer_from)
    shape.add_argument("--weights", choices=("none", "random"), default="none",
                       help="none: config only (default); random: random weights built on --device and saved (for "
                       "trainers that load weights from disk)")
    shape.add_argument("--device", default="cpu", help="where --weights random builds the model (default: cpu; "
                       "cuda on the GPU machine)")
    shape.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                       help="dtype of --weights random (default: bfloat16)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command == "build" and args.hidden_size % 32:
        p.error(f"argument --hidden-size: must be a multiple of 32, got {args.hidden_size}")
    if args.tokenizer_from is not None:
        from verl_ext.models.tiny_vl import PROVENANCE_FILE

        if not (args.tokenizer_from / PROVENANCE_FILE).is_file():
            p.error(f"--tokenizer-from: {args.tokenizer_from} is not a model directory built by this command (no "
                    f"{PROVENANCE_FILE})")
    out: Path = args.out
    if out.exists() and not out.is_dir():
        p.error(f"--out: {out} is a file, not a directory")

    import torch

    from neos_core.world.sources import SourceCache
    from verl_ext.models.shapes import SHAPE_FILE
    from verl_ext.models.tiny_vl import HF_MODEL_TYPE, PROVENANCE_FILE

    markers = (PROVENANCE_FILE, SHAPE_FILE)
    if out.is_dir() and any(out.iterdir()) and not any((out / m).is_file() for m in markers):
        p.error(f"--out: {out} holds something other than a model built here (no {' or '.join(markers)}); refusing "
                "to replace it")
    cache = SourceCache(args.cache) if args.cache else None
    if args.command == "shape":
        return _shape(args, cache, getattr(torch, args.dtype))

    from verl_ext.models.tiny_vl import build_tiny_qwen_vl

    path = build_tiny_qwen_vl(
        out,
        seed=args.seed,
        cache=cache,
        hidden_size=args.hidden_size,
        layers=args.layers,
        dtype=getattr(torch, args.dtype),
        tokenizer_from=args.tokenizer_from,
    )
    print(f"{path.resolve()} (hf_model_type={HF_MODEL_TYPE})")
    return 0


def _shape(args: argparse.Namespace, cache, dtype) -> int:
    from transformers import AutoConfig

    from verl_ext.models.shapes import SHAPES, count_params, write_shape

    shape = SHAPES[args.like]
    path = write_shape(args.like, args.out, cache=cache, weights=args.weights == "random", device=args.device,
                       dtype=dtype, tokenizer_from=args.tokenizer_from)
    params = count_params(AutoConfig.from_pretrained(path))
    if params != shape.released_params:
        print(f"error: {path}/config.json builds {params:,} parameters, the released {args.like} has "
              f"{shape.released_params:,}", file=sys.stderr)
        return 1
    print(f"{path.resolve()} ({args.like}, hf_model_type={shape.hf_model_type}, {params:,} parameters, weights: "
          f"{args.weights})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
