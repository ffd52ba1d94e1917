"""``python -m verl_ext.walkthrough``: the command line of the walkthrough (``make demo`` runs it).

Starts a tool server on the world (subprocess, loopback, the image-feature and result caches of the task run under
``TASKS/tool_server_cache``), loads the tiny Qwen2.5-VL (built once into the source cache), runs the walkthrough and
writes the report directory. The heavy imports (torch, transformers, verl) wait until the arguments are checked, so
``--help`` and a usage error answer at once.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neos_core.usage import OneLineParser, nonnegative_int, whole_number
from verl_ext.notices import quiet_verl_import_notices

if TYPE_CHECKING:
    from verl_ext.walkthrough.pipeline import Walkthrough
    from verl_ext.walkthrough.questions import Question
    from verl_ext.walkthrough.rollouts import RolloutSettings

DESCRIPTION = (
    "One Neos RL step on CPU, end to end: G scripted rollouts per question through verl's agent loop and a real tool "
    "server, outcome rewards, turn labels from the credit judge for the failures of mixed groups, and verl's "
    "advantages under GRPO and under Neos turn credit (Neos: Learning to Interleave Search and Visual Reasoning, "
    "Sec. 3.4). Writes OUT/report.md with its figures, OUT/summary.json and OUT/mei.jsonl."
)
EPILOG = ("example (what make demo runs): python -m verl_ext.walkthrough --world worlds/small "
          "--tasks worlds/demo/tasks --out worlds/demo/report")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.walkthrough", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--world", required=True, type=Path, metavar="DIR",
                   help="a built world (python -m data_gen.world build --size small --out DIR)")
    p.add_argument("--tasks", required=True, type=Path, metavar="DIR",
                   help="output directory of python -m data_gen neos (its results.jsonl is read, its "
                   "tool_server_cache reused)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="report directory (created; a rerun rewrites the report)")
    p.add_argument("--groups", type=whole_number(1), default=4, metavar="N",
                   help="questions, one rollout group each (default: 4)")
    p.add_argument("--group-size", type=whole_number(2), default=4, metavar="G",
                   help="rollouts per question; a group needs two to hold both outcomes (default: 4)")
    p.add_argument("--seed", type=nonnegative_int, default=0, metavar="S",
                   help="seeds the scripted deviations and their distractor entities (default: 0)")
    return p


def walkthrough(
    world: Path, questions: list[Question], out: Path, model: Any, processor: Any, *, group_size: int, seed: int,
    cache_dir: Path, settings: RolloutSettings | None = None,
) -> tuple[Walkthrough, dict[str, Any]]:
    """Run the walkthrough against a fresh tool server on ``world`` and write the report into ``out``; returns the
    result and the report's summary."""
    from tool_server.launch import served
    from verl_ext.walkthrough.pipeline import run_walkthrough
    from verl_ext.walkthrough.report import write_report
    from verl_ext.walkthrough.rollouts import RolloutSettings

    out.mkdir(parents=True, exist_ok=True)
    (out / "mei.jsonl").unlink(missing_ok=True)  # the MEI log describes this run, like the rest of the directory
    flags = ("--cache-dir", str(cache_dir), "--mei-log", str(out / "mei.jsonl"), "--log-level", "WARNING")
    with served(world, *flags) as url:
        result = asyncio.run(run_walkthrough(questions, model, processor, url, group_size=group_size, seed=seed,
                                             settings=settings or RolloutSettings()))
    return result, write_report(result, out)


def _input_error(message: str) -> int:
    """A flag names a file or directory that cannot be used: one line on stderr, exit code 2, nothing written."""
    print(f"python -m verl_ext.walkthrough: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.world / "manifest.json").is_file():
        return _input_error(f"--world: {args.world} is not a built world "
                            "(python -m data_gen.world build --size small --out DIR)")
    if args.out.exists() and not args.out.is_dir():
        return _input_error(f"--out: {args.out} is a file, not a directory")

    quiet_verl_import_notices()  # before the first import that reaches verl
    from neos_core.results import ResultLogError
    from neos_core.world.store import World
    from verl_ext.walkthrough.questions import NoTasksError, load_questions

    try:
        questions = load_questions(args.tasks, World.load(args.world), args.groups, args.seed)
    except (NoTasksError, ResultLogError) as err:
        return _input_error(f"--tasks: {err}")

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl
    from verl_ext.walkthrough.report import terminal_summary

    model_dir = cached_tiny_qwen_vl()
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    _, summary = walkthrough(args.world, questions, args.out, model, processor, group_size=args.group_size,
                             seed=args.seed, cache_dir=args.tasks / "tool_server_cache")
    print(terminal_summary(summary, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
