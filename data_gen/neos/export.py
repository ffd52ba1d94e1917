"""Verified tasks -> verl parquet (one file per split), SFT JSONL of the expert's trajectories, and the splits.

Splits are by answer entity (a hash of its id), so no answer of the benchmark occurs in training; duplicates
(the same question over the same entry images) are dropped before splitting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data_gen.common.export import export_verified, image_cells, pick_split, user_prompt
from data_gen.neos.schema import AGENT_NAME, DATA_SOURCE, Outcome, Task

SPLITS = (("benchmark", 0.1), ("rl", 0.3), ("train", 0.6))


def split_of(task: Task) -> str:
    return pick_split(task.answer_entity, SPLITS)


def dedupe(outcomes: Sequence[Outcome]) -> list[Outcome]:
    seen: set[tuple[str, tuple[str, ...]]] = set()
    kept = []
    for o in sorted((o for o in outcomes if o.status == "verified" and o.task), key=lambda o: o.key):
        sig = (" ".join(o.task.question.lower().split()), tuple(e.image_id for e in o.task.entry_images))
        if sig not in seen:
            seen.add(sig)
            kept.append(o)
    return kept


def prompt(task: Task) -> list[dict[str, str]]:
    return user_prompt(task.question, len(task.entry_images))


def row(task: Task, world_root: Path, split: str, index: int) -> dict[str, Any]:
    images = image_cells(world_root, [(e.image_id, e.url) for e in task.entry_images])
    return {
        "data_source": DATA_SOURCE,
        "prompt": prompt(task),
        "images": images,
        "ability": "multimodal_deep_search",
        "reward_model": {"style": "rule", "ground_truth": task.ground_truth()},
        "agent_name": AGENT_NAME,
        "extra_info": {
            "split": split, "index": index, "task_id": task.id, "structure_type": task.structure_type,
            "question": task.question, "answer": task.answer,
            "reasoning_path": json.dumps([s.model_dump(mode="json") for s in task.steps], ensure_ascii=False),
            "task_path": json.dumps(task.task_path(), ensure_ascii=False),
            "reference_trajectory_id": task.id, "reference_label": "success",
        },
    }


def sft_record(task: Task, trajectory: dict[str, Any]) -> dict[str, Any]:
    """Chat messages of the expert's episode: each call as an assistant tool call, its observation as a tool turn."""
    messages: list[dict[str, Any]] = list(prompt(task))
    for turn in trajectory["turns"]:
        if turn["outcome"] == "answer":
            messages.append({"role": "assistant", "content": turn["text"]})
            continue
        for call in turn["calls"]:
            messages.append({"role": "assistant", "content": "",
                             "tool_calls": [{"name": call["tool_name"], "arguments": call["arguments"]}]})
            messages.append({"role": "tool", "name": call["tool_name"], "content": call["observation"]})
    return {"id": task.id, "images": [e.url for e in task.entry_images], "messages": messages,
            "ground_truth": task.ground_truth(), "trajectory": trajectory}


def export(outcomes: Sequence[Outcome], world_root: Path, out: Path) -> dict[str, int]:
    """Write ``{split}.parquet``, ``sft.jsonl`` (train split) and ``references.jsonl`` (all); returns split sizes."""
    return export_verified(dedupe(outcomes), [name for name, _ in SPLITS], split_of, row, sft_record, world_root, out)
