"""Split assignment and verl parquet writing shared by the task pipelines.

Rows follow verl's RL dataset schema: ``prompt`` (chat messages with one ``<image>`` placeholder per input image),
``images`` (PNG bytes + URL), ``data_source``, ``ability``, ``reward_model.ground_truth``, ``agent_name`` (the agent
loop verl picks per row) and ``extra_info``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

T = TypeVar("T")


def hash_unit(key: str) -> float:
    """A stable pseudo-random number in [0, 1] for ``key``: splits by it never move between runs or machines."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def pick_split(key: str, shares: Sequence[tuple[str, float]]) -> str:
    """The split whose cumulative share interval holds ``hash_unit(key)``."""
    u, edge = hash_unit(key), 0.0
    for name, share in shares:
        edge += share
        if u < edge:
            return name
    return shares[-1][0]


def leak_free_splits(items: Sequence[T], owned: Callable[[T], Sequence[str]], shown: Callable[[T], Iterable[str]],
                     shares: Sequence[tuple[str, float]], key: Callable[[T], str]) -> list[str]:
    """The split of each item, such that no item of the first split (the held-out benchmark) owns what an item of
    another split shows or owns.

    ``owned`` keys are what a benchmark question loses when training shows them (its answer, its entry images; at
    least one per item); ``shown`` keys are what an item's training data shows (its chain's entities and images).
    Items are grouped by union-find: an item joins every item that owns one of its owned or shown keys (a shown key
    nobody owns joins nothing, so a hub entity in the middle of many chains does not merge them all). Groups go
    largest first to the held-out split or to training, whichever they fill least relative to its share (ties: the
    smaller hash of the group's smallest key first, the held-out split): a hash per group cannot hold the shares once
    one group is a large part of the items (150 tasks of the small world make a group of 120). The training splits
    (the rest of ``shares``) may share keys, as SFT and RL on overlapping data do: each training item takes its split
    by :func:`pick_split` of ``key(item)`` over their shares, so their sizes follow the shares whatever the groups.
    The result does not depend on the items' order, so a rerun or resumed run over the same items gives the same
    splits; new items that join or outweigh groups can move them.
    """
    parent = {k: k for item in items for k in owned(item)}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for item in items:
        first, *rest = owned(item)
        for other in [*rest, *(k for k in shown(item) if k in parent)]:
            a, b = root(first), root(other)
            parent[max(a, b)] = min(a, b)  # the root is the group's smallest key
    (held_out, held_share), training = shares[0], shares[1:]
    training_share = sum(share for _, share in training)
    held_out_sizes = {True: 0, False: 0}
    held: dict[str, bool] = {}
    groups = Counter(root(owned(item)[0]) for item in items)
    for group, size in sorted(groups.items(), key=lambda g: (-g[1], hash_unit(g[0]), g[0])):
        held[group] = ((held_out_sizes[True] + size) / held_share
                       <= (held_out_sizes[False] + size) / training_share)
        held_out_sizes[held[group]] += size
    normalised = [(name, share / training_share) for name, share in training]
    return [held_out if held[root(owned(item)[0])] else pick_split(key(item), normalised) for item in items]


def image_file(world_root: Path, image_id: str) -> Path:
    """The world keeps images under ``images/<2-letter dir>/``; find the file without loading the world."""
    return next((world_root / "images").glob(f"*/{image_id}.png"))


def image_cells(world_root: Path, images: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """verl's ``images`` column for ``(image_id, url)`` pairs: PNG bytes, URL as the path."""
    return [{"bytes": image_file(world_root, image_id).read_bytes(), "path": url} for image_id, url in images]


def write_parquets(rows: Mapping[str, list[dict[str, Any]]], out: Path) -> dict[str, int]:
    """``{split}.parquet`` per split (empty splits too, so consumers find every file); returns split sizes."""
    for split, items in rows.items():
        pd.DataFrame(items).to_parquet(out / f"{split}.parquet", index=False)
    return {split: len(items) for split, items in rows.items()}


def export_verified(
    verified: Sequence[Any],
    split_names: Sequence[str],
    split_of: Callable[[Any], str],
    row: Callable[[Any, Path, str, int], dict[str, Any]],
    sft_record: Callable[[Any, dict[str, Any]], dict[str, Any]],
    world_root: Path,
    out: Path,
) -> dict[str, int]:
    """Deduplicated verified outcomes (``.task``, ``.trajectory``) -> ``{split}.parquet``, ``sft.jsonl`` (the
    ``train`` split's expert episodes) and ``references.jsonl`` (every success reference); returns split sizes."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in split_names}
    with (out / "sft.jsonl").open("w", encoding="utf-8") as sft, \
            (out / "references.jsonl").open("w", encoding="utf-8") as refs:
        for o in verified:
            split = split_of(o.task)
            rows[split].append(row(o.task, world_root, split, len(rows[split])))
            refs.write(json.dumps({"task_id": o.task.id, "label": "success", "trajectory": o.trajectory}) + "\n")
            if split == "train":
                sft.write(json.dumps(sft_record(o.task, o.trajectory), ensure_ascii=False) + "\n")
    return write_parquets(rows, out)
