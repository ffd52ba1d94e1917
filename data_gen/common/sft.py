"""Expert episodes -> verl's multi-turn SFT parquet (``sft.parquet``), the layout of verl's ``MultiTurnSFTDataset``.

One row per episode: ``messages`` (OpenAI chat messages: the system prompt the agent loop shows, the user question,
assistant turns with ``tool_calls`` whose ``arguments`` are JSON text, tool turns), ``images`` (PNG bytes + URL, one
per ``<image>`` placeholder, in placeholder order: question images first, then every image a tool loaded) and
``tools`` (the function schemas the chat template lists, as JSON text; None for protocols that list their tools in
the system prompt). Only assistant turns become SFT targets in verl (its loss mask), which is Eq. 5's "observations
masked".

Why ``tools`` is JSON text: parquet stores a list of dicts as one struct type, the union of every schema's keys, so
each tool would come back with the other tools' parameters as nulls and integer limits as floats, and the template
would show the policy schemas it never sees in rollouts. ``verl_ext.data.sft_dataset`` decodes the column.
Why ``arguments`` is JSON text: the same union would add null arguments to every call; chat templates print string
arguments verbatim, exactly as the policy writes them (``json.dumps``, ``ensure_ascii=False``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_gen.common.export import image_cells

IMAGE = "<image>"
SWAP_ID = "~swap"  # an answer-swapped copy's row id: <episode id>~swap<K> (data_gen neos --sft-answer-swaps)


class SFTRecord(BaseModel):
    """One expert episode as ``sft.jsonl`` holds it: ``image_ids``/``images`` (world ids and URLs) name, in order,
    the image behind each ``<image>`` placeholder of ``messages``."""

    model_config = ConfigDict(extra="allow")

    id: str
    messages: list[dict[str, Any]] = Field(min_length=2)
    images: list[str]
    image_ids: list[str]
    tools: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _placeholders_match_images(self) -> SFTRecord:
        placeholders = sum(m["content"].count(IMAGE) for m in self.messages if isinstance(m.get("content"), str))
        if not placeholders == len(self.images) == len(self.image_ids):
            raise ValueError(f"record {self.id}: {placeholders} {IMAGE} placeholders, {len(self.images)} image URLs, "
                             f"{len(self.image_ids)} image ids; they must be equal")
        return self


def tool_call_message(name: str, arguments: dict[str, Any], content: str = "") -> dict[str, Any]:
    """An assistant turn that makes one call, as the Neos agent loop records a parsed call."""
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def tool_message(observation: str, image_refs: Sequence[str] = ()) -> dict[str, Any]:
    """A tool turn as the agent loop builds it: each loaded image as ``ref:`` and its pixels, then the text."""
    return {"role": "tool", "content": "".join(f"{ref}:{IMAGE}" for ref in image_refs) + observation}


def sft_row(record: SFTRecord, world_root: Path) -> dict[str, Any]:
    return {
        "id": record.id,
        "messages": record.messages,
        "images": image_cells(world_root, list(zip(record.image_ids, record.images))),
        "tools": None if record.tools is None else json.dumps(record.tools, ensure_ascii=False),
    }


def write_sft_parquet(records: Iterable[SFTRecord], world_root: Path, path: Path) -> int:
    """Write the rows of ``records`` to ``path`` (an empty file when there are none); returns the row count. The
    ``tools`` column only when some record has tools: a column of nulls reaches verl's chat template as pandas NA
    (verl reads with the pyarrow backend), which it cannot iterate, while a missing column means no tools."""
    rows = [sft_row(r, world_root) for r in records]
    columns = ["id", "messages", "images"] + (["tools"] if any(r["tools"] is not None for r in rows) else [])
    pd.DataFrame(rows, columns=columns).to_parquet(path, index=False)
    return len(rows)


def sft_parquet_from_jsonl(jsonl: Path, world_root: Path, path: Path) -> int:
    """``sft.jsonl`` (one :class:`SFTRecord` per line) -> ``path``; a malformed line raises naming its number."""
    records = []
    with jsonl.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                records.append(SFTRecord.model_validate_json(line))
            except ValueError as err:
                raise ValueError(f"{jsonl}:{number}: not an SFT record: {err}") from err
    return write_sft_parquet(records, world_root, path)
