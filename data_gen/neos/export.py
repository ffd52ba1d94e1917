"""Verified tasks -> verl parquet (one file per split), the expert's trajectories as SFT JSONL and verl SFT parquet,
MEI training pairs from the expert's calls (``mei_sft.jsonl``), and the splits.

Splits are by leak-free groups of tasks (:func:`splits`), so no benchmark answer or entry image occurs in training;
duplicates (the same question over the same entry images) are dropped before splitting.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data_gen.common.export import export_verified, image_cells, leak_free_splits
from data_gen.common.mei_pairs import Episode, write_mei_pairs
from data_gen.common.sft import (
    SWAP_ID,
    SFTRecord,
    sft_parquet_from_jsonl,
    tool_call_message,
    tool_message,
    write_sft_parquet,
)
from neos_core.neos_tasks import AGENT_NAME, DATA_SOURCE, Outcome, Task, dedupe
from tool_server.protocol import tool_schemas
from verl_ext.rollout.prompts import system_prompt, user_prompt

SPLITS = (("benchmark", 0.1), ("rl", 0.3), ("train", 0.6))


def owned_keys(task: Task) -> list[str]:
    """What a benchmark question loses when training shows it: its answer, and its entry images (the same image
    starts the same chain: yttrium's and Johann Gadolin's questions share Norway's map and four steps)."""
    return [f"entity:{task.answer_entity}", *(f"image:{e.image_id}" for e in task.entry_images)]


def shown_keys(task: Task) -> list[str]:
    """What a task's training data shows as its chain: every entity on it (the question's hops, the pages the
    expert reads) and every entry and checkpoint image. A training chain through a benchmark answer names that
    answer; one through a benchmark entry image identifies it and walks on from it. Left out: a checkpoint's
    alternatives (a rejected candidate's name and image, one glance that is no part of the chain; with them the
    60-task run's largest group grows from 7 to 12 tasks) and the other entities a read page mentions (every page
    mentions many; a group by them would span the world)."""
    images = [e.image_id for e in task.entry_images] + [s.checkpoint_image_id for s in task.steps
                                                        if s.checkpoint_image_id]
    entities = dict.fromkeys(e for s in task.steps for e in (s.source, s.target))
    return [*(f"entity:{e}" for e in entities), *(f"image:{i}" for i in images)]


def splits(tasks: Sequence[Task]) -> dict[str, str]:
    """Task id -> split, by groups no benchmark answer or entry image crosses (``leak_free_splits``); ``rl`` and
    ``train`` by the answer, as before the groups."""
    return dict(zip((t.id for t in tasks), leak_free_splits(tasks, owned_keys, shown_keys, SPLITS,
                                                            lambda t: t.answer_entity)))


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
    """The expert's episode as verl SFT messages (``data_gen.common.sft``): the system prompt and native tool schemas
    the ``neos_search_agent`` loop shows, the question, each call an assistant tool call and its observation a tool
    turn (images FetchImage loaded included; a teacher's reasoning before a call is the call turn's content), then the
    answer. Pixels a tool derives (crops) cannot be recovered."""
    schemas = tool_schemas("neos")
    pixels = {e.url: e.image_id for e in task.entry_images}
    pixels |= {s.checkpoint_image_url: s.checkpoint_image_id for s in task.steps if s.checkpoint_image_url}
    pixels |= {a.image_url: a.image_id for s in task.steps for a in s.alternatives}
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt("neos", schemas)}, *prompt(task)]
    urls = [e.url for e in task.entry_images]
    for turn in trajectory["turns"]:
        if turn["outcome"] == "answer":
            messages.append({"role": "assistant", "content": turn["text"]})
            continue
        for call in turn["calls"]:
            loaded = call["images_added"]
            if loaded and call["tool_name"] != "FetchImage":
                raise ValueError(f"task {task.id}: {call['tool_name']} images cannot be exported (only FetchImage's)")
            fetched = list(call["arguments"].get("urls", [])) if loaded else []
            if len(fetched) != len(loaded) or not all(u in pixels for u in fetched):
                raise ValueError(f"task {task.id}: FetchImage loaded {loaded} from {fetched}, not all world images")
            urls += fetched
            messages.append(tool_call_message(call["tool_name"], call["arguments"], _reasoning(turn["text"])))
            messages.append(tool_message(call["observation"], loaded))
    return {"id": task.id, "images": urls, "image_ids": [pixels[u] for u in urls], "messages": messages,
            "tools": schemas, "ground_truth": task.ground_truth(), "trajectory": trajectory}


def _reasoning(text: str) -> str:
    """What was written before the call: a teacher's words, or the programmatic expert's reasoning."""
    return text.split("<tool_call>")[0].strip() if "<tool_call>" in text else ""


def check_exportable(task: Task, trajectory: dict[str, Any]) -> None:
    """Raises ``ValueError`` when :func:`sft_record` cannot make a valid SFT row of ``trajectory`` (a model-backed
    teacher's episode is checked before it is kept)."""
    SFTRecord.model_validate(sft_record(task, trajectory))


def swapped_answer(record: dict[str, Any], task: Task, new: str, copy: int) -> dict[str, Any] | None:
    """``record`` with every whole-word mention of the task's answer (or an alias) in its assistant and tool turns
    replaced by ``new``, as ``{id}~swap{copy}``; None when no observation states the answer (the swap would leave
    the answer unreadable from the episode)."""
    names = sorted({task.answer, *task.aliases}, key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, names)) + r")(?!\w)")
    if not any(m["role"] == "tool" and pattern.search(m["content"]) for m in record["messages"]):
        return None
    escaped = json.dumps(new, ensure_ascii=False)[1:-1]  # inside a call's JSON-text arguments
    messages = []
    for message in record["messages"]:
        if message["role"] in ("assistant", "tool"):
            message = {**message, "content": pattern.sub(lambda _: new, message["content"])}
            if message.get("tool_calls"):
                message["tool_calls"] = [{**c, "function": {**c["function"], "arguments": pattern.sub(
                    lambda _: escaped, c["function"]["arguments"])}} for c in message["tool_calls"]]
        messages.append(message)
    swapped = {key: value for key, value in record.items() if key != "trajectory"}  # the expert's, not this one
    return {**swapped, "id": f"{record['id']}{SWAP_ID}{copy}", "messages": messages,
            "ground_truth": {"target": new, "aliases": []}, "answer_swap": {"from": task.answer, "to": new}}


def answer_swaps(train: Sequence[Outcome], copies: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``copies`` more SFT rows of each training episode, each with its answer replaced by another training answer of
    the same kind (never an RL or benchmark one: the splits stay leak-free) that the episode does not already
    mention. Why: a policy trained from scratch on a few hundred episodes learns to recall each training question's
    answer rather than read it from the last page; on questions whose answers it never saw it then copies some
    other fact of the right page (2026-12-07: 1 of 40 RL answers right under the expert's own history). With the
    answer varying between copies of the same episode, only reading the asked fact off the page predicts it.
    Returns the rows and their counts (written, and skipped because no observation states the answer or no
    substitute is left)."""
    pools: dict[str, list[str]] = {}
    for o in train:
        pools.setdefault(o.task.answer_type, []).append(o.task.answer)
    rows: list[dict[str, Any]] = []
    counts = {"written": 0, "skipped_not_in_observations": 0, "skipped_no_substitute": 0}
    for o in train:
        record = sft_record(o.task, o.trajectory)
        text = json.dumps(record["messages"], ensure_ascii=False)
        taken = {o.task.answer, *o.task.aliases}
        pool = sorted({a for a in pools[o.task.answer_type] if a not in taken and a not in text})
        rng = random.Random(f"{seed}:{o.task.id}")
        for copy in range(copies):
            if not pool:
                counts["skipped_no_substitute"] += 1
                continue
            swapped = swapped_answer(record, o.task, rng.choice(pool), copy)
            if swapped is None:
                counts["skipped_not_in_observations"] += 1
                continue
            rows.append(swapped)
            counts["written"] += 1
    return rows, counts


def of_kinds(outcomes: Sequence[Outcome], kinds: Sequence[str]) -> list[Outcome]:
    """The outcomes an export of only these answer kinds keeps: the verified tasks answering one of ``kinds`` and
    every other outcome (rejections stay in the statistics)."""
    return [o for o in outcomes if o.status != "verified" or (o.task is not None and o.task.answer_type in kinds)]


def export(outcomes: Sequence[Outcome], world_root: Path, out: Path, *, answer_swap_copies: int = 0,
           seed: int = 0) -> tuple[dict[str, int], dict[str, int]]:
    """Write ``{split}.parquet``, ``sft.jsonl`` and ``sft.parquet`` (train split, verl's multi-turn SFT layout; with
    ``answer_swap_copies``, :func:`answer_swaps`' rows after the expert's), ``rl_expert.parquet`` (the RL split's
    expert episodes in the same layout: to check a warm start on questions whose answers SFT never shows; never to
    train on) and ``references.jsonl`` (all); returns split sizes and the swaps' counts (empty without swaps)."""
    kept = dedupe(outcomes)
    split = splits([o.task for o in kept])
    sizes = export_verified(kept, [name for name, _ in SPLITS], lambda t: split[t.id], row, sft_record, world_root, out)
    swaps: dict[str, int] = {}
    if answer_swap_copies:
        rows, swaps = answer_swaps([o for o in kept if split[o.task.id] == "train"], answer_swap_copies, seed)
        with (out / "sft.jsonl").open("a", encoding="utf-8") as sft:
            sft.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    sft_parquet_from_jsonl(out / "sft.jsonl", world_root, out / "sft.parquet")
    write_sft_parquet([SFTRecord.model_validate(sft_record(o.task, o.trajectory)) for o in kept
                       if split[o.task.id] == "rl" and o.trajectory], world_root, out / "rl_expert.parquet")
    return sizes, swaps


def mei_pairs(outcomes: Sequence[Outcome], world_root: Path, out: Path, tool_dir: Path) -> dict[str, int]:
    """``mei_sft.jsonl``: MEI SFT pairs from the expert's calls on every task outside the benchmark split (no
    benchmark page or image may shape a trained model); see :mod:`data_gen.common.mei_pairs`."""
    kept = dedupe(outcomes)
    split = splits([o.task for o in kept])
    episodes = [Episode(o.trajectory, [e.image_id for e in o.task.entry_images])
                for o in kept if split[o.task.id] != "benchmark" and o.trajectory]
    return write_mei_pairs(episodes, world_root, tool_dir, out)
