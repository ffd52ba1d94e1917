"""The learning curve's data for a warm start that replays what it memorised: RL on its own SFT questions.

Why (docs/appendix/learning_curve.md, sixth pilot): run free, as RL runs it, the from-scratch 512x4 policy replays
the SFT trajectory its question text calls up and reads neither the image nor the pages. On questions it never saw,
even ones whose answers SFT taught (``curve_known_answers.py``), it answered 0 of 32 at RL's first step on the GPU;
on the SFT questions themselves ``bench/curve_free_run.py`` counts 7 of 12 right and half the groups mixed (CPU,
2026-12-07). So RL runs on the warm export's train split less ``--held`` of its questions, and validation asks two
sets, told apart by their ``data_source`` (verl's ``val-core/<data_source>/acc/mean@n``):

* ``neos_synth_seen``: the held SFT questions, never trained on by RL: does what RL reinforces on some memorised
  questions carry over to others?
* ``neos_synth`` (the export's benchmark split): questions never seen: generalisation, expected to stay at 0 for a
  policy that does not read.

The curve then measures RL making a memorising policy reliable, not learning to search: say so beside it. ::

    python bench/curve_seen_questions.py --warm .gpu/curve-data --out .gpu/curve-data-seen

writes OUT/rl.parquet and OUT/benchmark.parquet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from neos_core.neos_tasks import DATA_SOURCE
from neos_core.usage import OneLineParser, positive_int, whole_number
from tool_server.mei.jsonl import write_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from curve_known_answers import split  # noqa: E402

SEEN = f"{DATA_SOURCE}_seen"


def seen_question_rows(warm: Path, held: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(RL rows: the train split less ``held`` questions drawn by ``seed``; validation rows: those, as ``SEEN``, then
    the benchmark split as it is)."""
    rl, seen = split(pd.read_parquet(warm / "train.parquet"), held, seed)
    seen["data_source"] = SEEN
    return rl, pd.concat([seen, pd.read_parquet(warm / "benchmark.parquet")], ignore_index=True)


def parser() -> OneLineParser:
    p = OneLineParser(prog="python bench/curve_seen_questions.py",
                      description="RL and validation questions for a warm start that replays what it memorised: RL "
                      "on its SFT questions less --held, validation on those (neos_synth_seen) and on the benchmark "
                      "split (neos_synth).")
    p.add_argument("--warm", type=Path, required=True, metavar="DIR",
                   help="the export the warm start was trained on (python -m data_gen neos ... --out DIR)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where rl.parquet and benchmark.parquet are written")
    p.add_argument("--held", type=positive_int, default=48, metavar="N",
                   help="SFT questions kept out of RL for validation (default: 48)")
    p.add_argument("--seed", type=whole_number(0), default=0, help="which questions are held (default: 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    for name in ("train", "benchmark"):
        if not (args.warm / f"{name}.parquet").is_file():
            p.error(f"--warm: {args.warm / name}.parquet not found (an export of python -m data_gen neos)")
    train = len(pd.read_parquet(args.warm / "train.parquet", columns=["data_source"]))
    if train <= args.held:
        p.error(f"--held: {args.held} of {train} SFT questions leaves none for RL")
    rl, val = seen_question_rows(args.warm, args.held, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, frame in (("rl", rl), ("benchmark", val)):
        write_atomic(args.out / f"{name}.parquet", frame.to_parquet(), durable=False)  # a reader never sees half
    print(f"{len(rl)} RL questions; validation {args.held} seen ({SEEN}) + {len(val) - args.held} never seen "
          f"({DATA_SOURCE}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
