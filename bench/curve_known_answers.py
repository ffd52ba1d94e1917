"""The learning curve's RL and held-out questions for a warm start that recalls answers: questions of a second
export (another ``--seed``) that the warm start's export never asked, whose answers its SFT split taught.

Why: the curve's from-scratch 512x4 policy recalls each training answer by the country on its last page and does not
read the asked fact off the page (docs/appendix/learning_curve.md, pilots 4 and 5), so on questions whose answers it
never saw it succeeds never and neither estimator gets a signal. On new questions whose answers it did see, it
answered 66% of 32 right after the expert's own history (the warm start of 2026-12-07, CPU): RL then has mixed groups
to work on, and the curve measures what RL adds to finding the right page and answer (tool use and recall), not
reading. Say so beside any curve made from this set.

    python bench/curve_known_answers.py --warm .gpu/curve-data --new .gpu/curve-data-s1 --out .gpu/curve-data-known

writes OUT/rl.parquet, OUT/benchmark.parquet (``--benchmark`` questions, drawn by ``--seed``) and
OUT/rl_expert.parquet (their expert episodes, for ``bench/curve_sft_plain.py --check-only --check-data``).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pandas as pd

from neos_core.usage import OneLineParser, positive_int, whole_number
from tool_server.mei.jsonl import write_atomic

SPLITS = ("train", "rl", "benchmark")  # every split of an export in the RL layout: all the questions it asked
EXPERTS = ("sft", "rl_expert")  # its expert episodes in the SFT layout, by task id


def asked(export: Path) -> set[str]:
    """Every question an export asked, in any split."""
    return {info["question"] for split in SPLITS for info in pd.read_parquet(export / f"{split}.parquet")["extra_info"]}


def taught(export: Path) -> set[str]:
    """The answers of the tasks an export's SFT episodes solve: its train split's."""
    return {info["answer"] for info in pd.read_parquet(export / "train.parquet")["extra_info"]}


def known_answer_rows(warm: Path, new: Path) -> pd.DataFrame:
    """``new``'s questions (RL layout) that ``warm`` never asked and whose answer ``warm``'s SFT split taught."""
    old_questions, answers = asked(warm), taught(warm)
    rows = pd.concat([pd.read_parquet(new / f"{split}.parquet") for split in SPLITS], ignore_index=True)
    keep = [info["question"] not in old_questions and info["answer"] in answers for info in rows["extra_info"]]
    return rows[keep].reset_index(drop=True)


def experts(new: Path, task_ids: set[str]) -> pd.DataFrame:
    """``new``'s expert episodes of these tasks (SFT layout; a task's row id is its task id)."""
    frames = [pd.read_parquet(new / f"{name}.parquet") for name in EXPERTS if (new / f"{name}.parquet").is_file()]
    rows = pd.concat(frames, ignore_index=True)
    return rows[rows["id"].isin(task_ids)].reset_index(drop=True)


def split(rows: pd.DataFrame, benchmark: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """RL and held-out rows, the held-out ones ``benchmark`` tasks drawn by ``seed``; each row's ``extra_info.split``
    says which."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held = set(order[:benchmark])

    def part(indices: list[int], name: str) -> pd.DataFrame:
        chosen = rows.iloc[sorted(indices)].copy()
        chosen["extra_info"] = [{**info, "split": name} for info in chosen["extra_info"]]
        return chosen.reset_index(drop=True)

    return part([i for i in order if i not in held], "rl"), part(sorted(held), "benchmark")


def parser() -> OneLineParser:
    p = OneLineParser(prog="python bench/curve_known_answers.py",
                      description="RL and held-out questions for a warm start that recalls answers: a second export's "
                      "questions the warm start's export never asked, whose answers its SFT split taught.")
    p.add_argument("--warm", type=Path, required=True, metavar="DIR",
                   help="the export the warm start was trained on (python -m data_gen neos ... --out DIR)")
    p.add_argument("--new", type=Path, required=True, metavar="DIR",
                   help="another export of the same world, e.g. with --seed 1")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where rl.parquet, benchmark.parquet and rl_expert.parquet are written")
    p.add_argument("--benchmark", type=positive_int, default=48, metavar="N",
                   help="held-out questions (default: 48)")
    p.add_argument("--seed", type=whole_number(0), default=0, help="which questions are held out (default: 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    for flag, export, names in (("--warm", args.warm, SPLITS), ("--new", args.new, (*SPLITS, "sft"))):
        missing = [name for name in names if not (export / f"{name}.parquet").is_file()]
        if missing:
            p.error(f"{flag}: {export / missing[0]}.parquet not found (an export of python -m data_gen neos)")
    rows = known_answer_rows(args.warm, args.new)
    if len(rows) <= args.benchmark:
        p.error(f"--benchmark: {args.benchmark} of {len(rows)} known-answer questions leaves none for RL")
    rl, held = split(rows, args.benchmark, args.seed)
    episodes = experts(args.new, set(info["task_id"] for info in rows["extra_info"]))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, frame in (("rl", rl), ("benchmark", held), ("rl_expert", episodes)):
        # through a rename: a reader (or a second run into the same --out) never sees a half-written file
        write_atomic(args.out / f"{name}.parquet", frame.to_parquet(), durable=False)
    print(f"{len(rows)} known-answer questions ({rows['extra_info'].map(lambda i: i['answer']).nunique()} answers): "
          f"{len(rl)} RL, {len(held)} held out, {len(episodes)} expert episodes -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
