"""The evaluation tests' parts: a **scripted stand-in policy** and a scripted judge behind one real loopback
chat-completions server (``threaded_chat``), our tool server on the small world, and a benchmark in our split's
layout on world images.

``scripted_policy`` is not a model: it plays a fixed script per protocol so that the harness's every path runs
against a real HTTP endpoint. Neos (native ``tool_calls``): TextSearch, the same search reworded (a repeated search),
FetchImage of a world image, then the scripted answer. ModalSearcher (ReAct text): one ``t2t_search``, one malformed
turn (no ``<think>``), then the answer. Judge requests (their user turn starts with ``[Question]``) are answered
``correct: yes`` exactly when the rule matcher accepts the response.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from data_gen.common.export import image_cells
from neos_core.world.sources import default_cache_dir
from tool_server.launch import served
from verl_ext.reward.answers import answer_matches
from verl_ext.rollout.prompts import user_prompt

ARUBA_FLAG = "https://neos-world.invalid/media/flag_abw.png"
ANGOLA_FLAG = "https://neos-world.invalid/media/flag_ago.png"
QUESTIONS = ("Which country's flag is shown in the image?", "Whose national flag is this?")
NEOS_QUERIES = ("flag of Aruba", "Aruba flag")  # the second repeats the first in other words


def _usage(text: str, messages: list) -> dict[str, int]:
    return {"prompt_tokens": 10 * len(messages), "completion_tokens": len(text.split())}


def scripted_policy(answers: dict[str, str]) -> Callable[[dict], dict]:
    """``reply`` for ``threaded_chat``: ``answers`` maps each question to the scripted final answer; see the module
    docstring."""

    def reply(body: dict) -> dict:
        messages = body["messages"]
        user = messages[1]["content"]
        if isinstance(user, str) and user.startswith("[Question]"):  # the judge
            reference = re.search(r"\[Reference answer\]\n(.*?)\n\n\[Response\]", user, re.S).group(1)
            response = user.split("[Response]\n", 1)[1]
            verdict = "yes" if answer_matches(response, reference.split(" (also accepted")[0]) else "no"
            return {"role": "assistant", "content": f"reasoning: scripted judge\ncorrect: {verdict}"}
        question = next(p["text"] for p in reversed(user) if p["type"] == "text")
        answer = answers[question]
        turn = sum(m["role"] == "assistant" for m in messages)
        if "<tool_call>" in messages[0]["content"]:  # ModalSearcher's system prompt spells out the call format
            return _modalsearch(turn, answer, messages)
        return _neos(turn, answer, messages, body.get("tools") is not None)

    return reply


def _neos(turn: int, answer: str, messages: list, tools: bool) -> dict:
    calls = [("TextSearch", {"query": [NEOS_QUERIES[0]]}), ("TextSearch", {"query": [NEOS_QUERIES[1]]}),
             ("FetchImage", {"urls": [ARUBA_FLAG]})]
    if not tools or turn >= len(calls):
        return {"role": "assistant", "content": answer, "usage": _usage(answer, messages)}
    name, arguments = calls[turn]
    return {"role": "assistant", "content": "", "usage": _usage(json.dumps(arguments), messages),
            "tool_calls": [{"id": f"call_{turn}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _modalsearch(turn: int, answer: str, messages: list) -> dict:
    text = [
        '<think>Search the flag.</think><tool_call>{"name": "t2t_search", "arguments": {"query": "flag"}}'
        "</tool_call>",
        "I will just answer.",  # malformed: no reasoning block
        f"<think>The flag belongs to this country.</think><answer>{answer}</answer>",
    ][min(turn, 2)]
    return {"role": "assistant", "content": text, "usage": _usage(text, messages)}


@pytest.fixture(scope="module")
def tool_server(small_world: Path, tmp_path_factory):
    # the session's feature cache, and the MEI log in a temporary folder: by default it lands in the working
    # directory (the checkout)
    with served(small_world, "--cache-dir", str(default_cache_dir() / "tool-server"),
                "--mei-log", str(tmp_path_factory.mktemp("tool-server") / "mei.jsonl")) as url:
        yield url


@pytest.fixture(scope="module")
def benchmark_files(small_world: Path, tmp_path_factory) -> dict[str, Path]:
    """``neos``: our split's parquet layout (two flags, the neos agent); ``ms``: the generic JSONL layout (one flag
    file, the modalsearch protocol)."""
    root = tmp_path_factory.mktemp("bench")
    rows = []
    for task_id, (image_id, url, country) in enumerate([("flag_abw", ARUBA_FLAG, "Aruba"),
                                                        ("flag_ago", ANGOLA_FLAG, "Angola")]):
        rows.append({"data_source": "neos_world", "prompt": user_prompt(QUESTIONS[task_id], 1),
                     "images": image_cells(small_world, [(image_id, url)]),
                     "reward_model": {"style": "rule", "ground_truth": {"target": country, "aliases": []}},
                     "agent_name": "neos_search_agent", "extra_info": {"task_id": f"t{task_id}"}})
    pd.DataFrame(rows).to_parquet(root / "benchmark.parquet")
    (root / "flag.png").write_bytes(next((small_world / "images").glob("*/flag_abw.png")).read_bytes())
    ms = root / "ms.jsonl"
    ms.write_text(json.dumps({"id": "m0", "question": "Name the country of this flag.", "images": ["flag.png"],
                              "answer": "Aruba", "protocol": "modalsearch"}) + "\n")
    return {"neos": root / "benchmark.parquet", "ms": ms}
