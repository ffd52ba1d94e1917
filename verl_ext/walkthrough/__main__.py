"""``python -m verl_ext.walkthrough --world DIR --tasks DIR --out DIR [--groups 4] [--group-size 4] [--seed 0]``.

Starts a tool server on the world (subprocess, loopback, the image-feature and result caches of the task run under
``TASKS/tool_server_cache``), loads the tiny Qwen2.5-VL (built once into the source cache), runs the walkthrough and
writes the report directory.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from data_gen.world.store import World
from tool_server.launch import served
from verl_ext.models.tiny_vl import cached_tiny_qwen_vl
from verl_ext.walkthrough.pipeline import Walkthrough, run_walkthrough
from verl_ext.walkthrough.questions import NoTasksError, Question, load_questions
from verl_ext.walkthrough.report import terminal_summary, write_report
from verl_ext.walkthrough.rollouts import RolloutSettings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_ext.walkthrough", description=__doc__.splitlines()[0])
    p.add_argument("--world", required=True, type=Path, help="a built world (python -m data_gen.world build)")
    p.add_argument("--tasks", required=True, type=Path, help="output directory of python -m data_gen neos")
    p.add_argument("--out", required=True, type=Path, help="report directory (created)")
    p.add_argument("--groups", type=int, default=4, help="questions, one rollout group each")
    p.add_argument("--group-size", type=int, default=4, help="rollouts per question (G)")
    p.add_argument("--seed", type=int, default=0, help="seeds the scripted deviations")
    return p


def walkthrough(
    world: Path, questions: list[Question], out: Path, model: Any, processor: Any, *, group_size: int, seed: int,
    cache_dir: Path, settings: RolloutSettings = RolloutSettings(),
) -> tuple[Walkthrough, dict[str, Any]]:
    """Run the walkthrough against a fresh tool server on ``world`` and write the report into ``out``; returns the
    result and the report's summary."""
    out.mkdir(parents=True, exist_ok=True)
    flags = ("--cache-dir", str(cache_dir), "--mei-log", str(out / "mei.jsonl"), "--log-level", "WARNING")
    with served(world, *flags) as url:
        result = asyncio.run(
            run_walkthrough(questions, model, processor, url, group_size=group_size, seed=seed, settings=settings)
        )
    return result, write_report(result, out)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.groups < 1 or args.group_size < 2:
        p.error("need --groups >= 1 and --group-size >= 2 (a group needs two rollouts to be mixed)")
    if not (args.world / "manifest.json").is_file():
        p.error(f"{args.world} is not a built world (python -m data_gen.world build --size small --out DIR)")
    try:
        questions = load_questions(args.tasks, World.load(args.world), args.groups, args.seed)
    except NoTasksError as err:
        p.error(str(err))
    model_dir = cached_tiny_qwen_vl()
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    _, summary = walkthrough(args.world, questions, args.out, model, processor, group_size=args.group_size,
                             seed=args.seed, cache_dir=args.tasks / "tool_server_cache")
    print(terminal_summary(summary, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
