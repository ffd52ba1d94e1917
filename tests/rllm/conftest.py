"""Scripted assistant turns and task rows shared by the rLLM adapter tests (the turns are a scripted stand-in for a
model: no model here writes valid calls)."""

from __future__ import annotations

import io
import json

from PIL import Image

ORIGIN = "https://neos-world.invalid"


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def react(name: str, **arguments) -> str:
    return "<think>next step</think>" + call(name, **arguments)


def png(color=(200, 30, 30), size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def row(question: str, answer: str, agent: str = "neos_search_agent") -> dict:
    """A row as data generation writes our task parquet (verl's columns)."""
    return {
        "prompt": [{"role": "user", "content": "<image>\n" + question}],
        "images": [{"bytes": png(), "path": None}],
        "reward_model": {"style": "rule", "ground_truth": {"target": answer, "aliases": []}},
        "agent_name": agent,
        "extra_info": {"split": "benchmark", "question": question, "task_id": "t0"},
    }
