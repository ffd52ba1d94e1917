"""The v1 worker's offline credit judge on a row exactly as ``python -m data_gen neos`` exports it (through parquet,
as verl's dataset reads it): the worker takes the judge's evidence from ``extra_info.task_path`` and labels a failure
against it, instead of falling back to the outcome advantage; rows without a usable path fall back, never crash."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from data_gen.common.export import write_parquets
from data_gen.neos.export import row
from data_gen.neos.synth import Synthesizer
from neos_core.world.store import World
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord
from verl_ext.rollout.tq_worker import NeosAgentLoopWorker


@pytest.fixture(scope="module")
def exported(small_world, tmp_path_factory):
    """The first synthesized task's row, written to ``train.parquet`` by the exporter and read back with pandas."""
    synth = Synthesizer(World.load(small_world), seed=0)
    task = next(c.task for e in synth.seeds() for c in synth.synthesize(e).candidates if c.task)
    out = tmp_path_factory.mktemp("rows")
    write_parquets({"train": [row(task, small_world, "train", 0)]}, out)
    return task, pd.read_parquet(out / "train.parquet").to_dict("records")[0]


def _search(index: int, query: str) -> TurnRecord:
    call = CallRecord(tool_name="TextSearch", arguments={"query": [query]}, ok=True, observation="results")
    return TurnRecord(index=index, span=(10 * index, 10 * index + 5), text=query, outcome="call_ok", calls=[call])


def _episode(question: str, queries: list[str], answer: str) -> TrajectoryRecord:
    turns = [_search(i, q) for i, q in enumerate(queries)]
    n = len(turns)
    turns.append(TurnRecord(index=n, span=(10 * n, 10 * n + 5), text=answer, outcome="answer", tools_enabled=False))
    return TrajectoryRecord(protocol="neos", question=question, session_id=f"s-{answer}", group_id="g",
                            mei_version=None, termination_reason="answer", final_answer=answer, turns=turns)


def _judge(extra_info) -> list:
    """The worker's own ``_assess_group`` for a row (offline kind: it reads only ``llm_judge`` from the worker)."""
    return NeosAgentLoopWorker._assess_group(SimpleNamespace(llm_judge=None), {"extra_info": extra_info})


def test_exported_row_is_judged_against_its_task_path(exported):
    task, exported_row = exported
    evidence = task.task_path()["evidence"]
    assert len(evidence) >= 2 and json.loads(exported_row["extra_info"]["task_path"])["evidence"] == evidence
    question = exported_row["prompt"][0]["content"]  # what the policy's record holds as its question
    reference = _episode(question, evidence, task.answer)
    # retrieves the first path item, then searches something off the path and answers wrongly
    failure = _episode(question, [evidence[0], "weather tomorrow"], "Nowhere")
    labels = asyncio.run(_judge(exported_row["extra_info"])(reference, [failure]))[0]
    assert labels.assessed and labels.judge == "offline_path" and labels.fallback_reason is None
    assert labels.num_turns == 3 and labels.productive == {0: 1.0}
    assert [(e.turn, e.type) for e in labels.events] == [(1, "causal_error")]


@pytest.mark.parametrize("extra_info", [
    {"reasoning_path": "[]"},  # no task_path
    {"task_path": "{not json"},
    {"task_path": json.dumps({"question": "q", "evidence": [], "answer": "a"})},  # evidence must be non-empty
    None,
])
def test_rows_without_a_usable_task_path_fall_back(exported, extra_info):
    task, exported_row = exported
    question = exported_row["prompt"][0]["content"]
    reference = _episode(question, task.task_path()["evidence"], task.answer)
    labels = asyncio.run(_judge(extra_info)(reference, [_episode(question, ["x"], "Nowhere")]))[0]
    assert not labels.assessed and labels.fallback_reason == "no_task_path"
