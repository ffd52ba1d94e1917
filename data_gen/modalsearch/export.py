"""Verified ModalSearch tasks -> verl parquet per split, policy-SFT JSONL (ReAct messages of the expert's
episodes, train split), success references and MEI training pairs from the expert's calls (``mei_sft.jsonl``).

Splits: the benchmark graph's questions form ``benchmark`` (disjoint seeds, disjoint nodes); the training graph's
go to ``train`` (SFT) or ``rl`` by a hash of the task id. Duplicate questions (same text, same input image) are
dropped first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from data_gen.common.export import export_verified, image_cells, pick_split
from data_gen.common.mei_pairs import Episode, write_mei_pairs
from data_gen.common.sft import SFTRecord, sft_parquet_from_jsonl, tool_message
from data_gen.modalsearch.schema import AGENT_NAME, DATA_SOURCE, Outcome, Task
from neos_core.world.store import World
from tool_server.protocol import tool_schemas
from verl_ext.rollout.prompts import system_prompt, user_prompt
from verl_ext.rollout.protocols import parse_modalsearch_turn

TRAIN_SPLITS = (("train", 0.7), ("rl", 0.3))
SPLIT_NAMES = ("train", "rl", "benchmark")


def split_of(task: Task) -> str:
    return "benchmark" if task.graph == "benchmark" else pick_split(task.id, TRAIN_SPLITS)


def dedupe(outcomes: Sequence[Outcome]) -> list[Outcome]:
    seen: set[tuple[str, str | None]] = set()
    kept = []
    for o in sorted((o for o in outcomes if o.status == "verified" and o.task), key=lambda o: o.key):
        sig = (" ".join(o.task.question.lower().split()), o.task.start_image_id)
        if sig not in seen:
            seen.add(sig)
            kept.append(o)
    return kept


def row(task: Task, world_root: Path, split: str, index: int) -> dict[str, Any]:
    images = [(task.start_image_id, task.start_image_url)] if task.start_image_id else []
    return {
        "data_source": DATA_SOURCE,
        "prompt": user_prompt(task.question, len(images)),
        "images": image_cells(world_root, images),
        "ability": "multimodal_deep_search",
        "reward_model": {"style": "rule", "ground_truth": task.ground_truth()},
        "agent_name": AGENT_NAME,
        "extra_info": {
            "split": split, "index": index, "task_id": task.id, "question": task.question, "answer": task.answer,
            "label": task.label, "modality": task.modality, "hops": len(task.nodes) - 1,
            "answer_type": task.answer_type,
            "reasoning_path": json.dumps({"nodes": [n.model_dump(mode="json") for n in task.nodes],
                                          "hops": [h.model_dump(mode="json") for h in task.hops]},
                                         ensure_ascii=False),
            "task_path": json.dumps(task.task_path(), ensure_ascii=False),
            "reference_trajectory_id": task.id, "reference_label": "success",
        },
    }


def sft_record(task: Task, trajectory: dict[str, Any], image_ids: Mapping[str, str] | None = None) -> dict[str, Any]:
    """ReAct messages of the expert's episode as the ``modalsearch_react_agent`` loop shows them: its system prompt
    (the tools listed in it), the question with the start image, each call an assistant turn and its observation a
    tool turn carrying the pixels the call loaded (a ``read_url`` of a path image: the terminal image is in context
    before an answer read from it), then the answer. Each assistant turn is the episode's own text, a ReAct turn
    (``<think>`` reasoning, then the call or the answer) as both experts write it; one the agent loop's parser
    would not accept is a ``ValueError`` (the turn is not trained on). ``image_ids``: world image ids by URL, for
    images loaded off the path (the candidates a reverse search's comparison loads)."""
    pixels = {**(image_ids or {}), **{n.url: n.id.split(":", 1)[1] for n in task.nodes if n.kind == "image" and n.url}}
    urls = [task.start_image_url] if task.start_image_url else []
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt("modalsearch",
                                                                                  tool_schemas("modalsearch"))},
                                      *user_prompt(task.question, len(urls))]
    for turn in trajectory["turns"]:
        parsed = parse_modalsearch_turn(turn["text"])
        if parsed.error is not None:
            raise ValueError(f"task {task.id}: turn {turn['index']} is not a ReAct turn ({parsed.error.message})")
        if turn["outcome"] == "answer":
            messages.append({"role": "assistant", "content": turn["text"]})
            continue
        for call in turn["calls"]:
            loaded = call["images_added"]
            fetched = [call["arguments"].get("url")] if loaded and call["tool_name"] == "read_url" else []
            if len(fetched) != len(loaded) or not all(u in pixels for u in fetched):
                raise ValueError(f"task {task.id}: {call['tool_name']} loaded {loaded}, not a world image by URL")
            urls += fetched
            messages.append({"role": "assistant", "content": turn["text"]})
            messages.append(tool_message(call["observation"], loaded))
    return {"id": task.id, "images": urls, "image_ids": [pixels[u] for u in urls], "messages": messages,
            "ground_truth": task.ground_truth(), "trajectory": trajectory}


def check_exportable(task: Task, trajectory: dict[str, Any]) -> None:
    """Raises ``ValueError`` when :func:`sft_record` cannot make a valid SFT row of ``trajectory``."""
    SFTRecord.model_validate(sft_record(task, trajectory))


def export(outcomes: Sequence[Outcome], world_root: Path, out: Path) -> dict[str, int]:
    """Write ``{split}.parquet``, ``sft.jsonl`` and ``sft.parquet`` (train split, verl's multi-turn SFT layout) and
    ``references.jsonl`` (all); returns split sizes."""
    ids = {i.url: i.id for i in World.load(world_root).images.values()}
    sizes = export_verified(dedupe(outcomes), SPLIT_NAMES, split_of, row, partial(sft_record, image_ids=ids),
                            world_root, out)
    sft_parquet_from_jsonl(out / "sft.jsonl", world_root, out / "sft.parquet")
    return sizes


def mei_pairs(outcomes: Sequence[Outcome], world_root: Path, out: Path, tool_dir: Path) -> dict[str, int]:
    """``mei_sft.jsonl``: MEI SFT pairs from the expert's ``read_url`` / ``t2i_search`` / ``i2i_search`` calls on
    the training graph's tasks (the benchmark graph shapes no trained model); see :mod:`data_gen.common.mei_pairs`."""
    episodes = [Episode(o.trajectory, [o.task.start_image_id] if o.task.start_image_id else [])
                for o in dedupe(outcomes) if split_of(o.task) != "benchmark" and o.trajectory]
    return write_mei_pairs(episodes, world_root, tool_dir, out)
