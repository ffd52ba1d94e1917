"""Our task parquet -> an rLLM local benchmark directory, so ``rllm eval DIR`` runs our agent on our split.

    python -m verl_ext.rllm.benchmark --tasks TASKS/benchmark.parquet --out DIR [--max-rows N]

Writes ``dataset.toml`` (category ``vlm``: rLLM attaches the question images to the instruction), ``data/<split>.jsonl``
(one row per task: ``id``, ``question``, ``images`` as ``images/...`` paths, ``ground_truth``, ``agent_name``) and the
images' encoded files under ``images/``. ``<split>`` is the rows' own split (``extra_info.split``; data generation's
``benchmark`` split is held out by answer entity). The directory is built beside ``DIR`` and renamed into place, so
a failed export leaves nothing half-written. No verl or rLLM import.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neos_core.usage import OneLineParser, positive_int
from verl_ext.rllm.episode import PROTOCOL_OF_AGENT, SearchTask, plain

AGENT_OF_PROTOCOL = {"neos": "neos_search", "modalsearch": "modalsearch_react"}
EVALUATOR_OF_PROTOCOL = {"neos": "neos_answer_judge", "modalsearch": "modalsearch_reward"}


def _suffix(data: bytes) -> str:
    return ".jpg" if data[:3] == b"\xff\xd8\xff" else ".gif" if data[:4] == b"GIF8" else ".png"


def export(rows: list[Mapping[str, Any]], out: Path, *, name: str) -> dict[str, Any]:
    """Writes the benchmark directory ``out`` from task rows; returns its summary."""
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new --out")
    if not rows:
        raise ValueError("no task rows to export")
    splits = {str((r.get("extra_info") or {}).get("split") or "test") for r in rows}
    protocols = {PROTOCOL_OF_AGENT.get(str(r.get("agent_name")), "neos") for r in rows}
    if len(splits) != 1 or len(protocols) != 1:
        raise ValueError(f"rows mix splits {sorted(splits)} or protocols {sorted(protocols)}: export one at a time")
    split, protocol = splits.pop(), protocols.pop()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "data").mkdir()
        (tmp / "images").mkdir()
        lines = []
        for index, row in enumerate(rows):
            try:
                task = SearchTask.from_row(row)  # validates question, reference and images
            except (ValueError, OSError) as e:
                raise ValueError(f"row {index}: {e}") from None
            task_id = str((row.get("extra_info") or {}).get("task_id") or index)
            paths = []
            for data in task.images:
                path = f"images/{hashlib.sha1(data).hexdigest()[:16]}{_suffix(data)}"
                (tmp / path).write_bytes(data)
                paths.append(path)
            lines.append(json.dumps({
                "id": task_id, "question": task.question, "images": paths, "ground_truth": task.ground_truth,
                "agent_name": row.get("agent_name"),
            }, ensure_ascii=False))
        description = f"{protocol} tasks exported by neos-verl; evaluator: {EVALUATOR_OF_PROTOCOL[protocol]}"
        (tmp / "data" / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (tmp / "dataset.toml").write_text(
            "[dataset]\n"
            f"name = {json.dumps(name)}\n"
            'type = "simple"\n'
            f"split = {json.dumps(split)}\n"
            'category = "vlm"\n'
            'instruction_field = "question"\n'
            f"default_agent = {json.dumps(AGENT_OF_PROTOCOL[protocol])}\n"
            f"description = {json.dumps(description)}\n",
            encoding="utf-8",
        )
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": str(out), "split": split, "protocol": protocol, "rows": len(lines),
            "agent": AGENT_OF_PROTOCOL[protocol], "evaluator": EVALUATOR_OF_PROTOCOL[protocol]}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.rllm.benchmark", description="Turn a task parquet of ours into an rLLM "
                      "local benchmark directory, so that rllm eval DIR runs our agent on that split.")
    p.add_argument("--tasks", type=Path, required=True, metavar="FILE",
                   help="a task parquet written by python -m data_gen (e.g. OUT/benchmark.parquet)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the benchmark directory to create (must not exist; built beside it and renamed into place)")
    p.add_argument("--name", default=None, help="benchmark name (default: the --out directory's name)")
    p.add_argument("--max-rows", type=positive_int, default=None, metavar="N",
                   help="export only the first N rows (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not args.tasks.is_file():
        p.error(f"--tasks: {args.tasks}: no such file")
    if args.out.exists():
        p.error(f"--out: {args.out} exists; choose a new directory")
    import pandas as pd

    try:
        table = pd.read_parquet(args.tasks)
    except (OSError, ValueError) as e:  # not a parquet file
        p.error(f"--tasks: {args.tasks}: not a readable parquet file ({e})")
    rows = [plain(r) for r in table.to_dict("records")]
    try:
        summary = export(rows[: args.max_rows], args.out, name=args.name or args.out.name)
    except ValueError as e:  # a row that is no task, or rows mixing splits: the file is the bad input
        p.error(f"--tasks: {args.tasks}: {e}")
    except OSError as e:  # the disk, not the input; nothing was left half-written
        print(f"{p.prog}: error: --out: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
