"""Verified references from data generation's ``references.jsonl`` as the credit judge's reference, and the in-group
fallback when a task has none (counted on every label)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from data_gen.common.export import export_verified
from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.credit.references import load_references, reference_id, with_reference

from .conftest import candidate, credit_server, reference


def _write_references(out: Path) -> Path:
    """``references.jsonl`` as ``python -m data_gen neos`` writes it (its ``export_verified``), for tasks n1 and n2;
    n1's reference answers in a way no in-group success of this test does."""
    verified = reference().model_copy(update={"final_answer": "Beirut River (verified)"})
    outcomes = [
        SimpleNamespace(task=SimpleNamespace(id=task_id), trajectory=verified.model_dump(mode="json"))
        for task_id in ("n1", "n2")
    ]
    export_verified(
        outcomes, ["train"], lambda task: "train",
        lambda task, root, split, index: {"extra_info": {"reference_trajectory_id": task.id}},
        lambda task, trajectory: {"id": task.id}, out, out,
    )
    return out / "references.jsonl"


def test_references_written_by_data_generation_load_by_task_id(tmp_path: Path) -> None:
    references = load_references(_write_references(tmp_path))
    assert sorted(references) == ["n1", "n2"] and references["n1"].final_answer == "Beirut River (verified)"
    assert reference_id({"reference_trajectory_id": "n1", "task_id": "n1"}) == "n1" and reference_id({}) is None


def test_a_bad_line_names_file_line_and_field(tmp_path: Path) -> None:
    path = _write_references(tmp_path)
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["trajectory"]["termination_reason"]
    path.write_text("\n".join([lines[0], json.dumps(broken)]) + "\n")
    with pytest.raises(ValueError, match=r"references.jsonl:2: trajectory.termination_reason: Field required"):
        load_references(path)
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(ValueError, match=r"references.jsonl:2: not JSON"):
        load_references(path)


@pytest.mark.parametrize("task_id", ["n1", "unknown"])
def test_the_verified_reference_is_what_the_judge_sees_else_the_in_group_success(tmp_path: Path, task_id) -> None:
    references = load_references(_write_references(tmp_path))

    async def main():
        async with credit_server() as (url, _, bodies):
            judge = CreditJudge(CreditJudgeConfig(url=url, model="valid"))
            assess = with_reference(judge.assess_group, references.get(task_id))
            return await assess(reference(), [candidate()]), bodies

    (labels,), bodies = asyncio.run(main())
    user = bodies[0]["messages"][1]["content"]
    verified = task_id == "n1"
    assert labels.assessed and labels.reference == ("verified" if verified else "in_group")
    assert ("final answer 'Beirut River (verified)'" in user) == verified


def test_the_worker_picks_the_rows_verified_reference(tmp_path: Path) -> None:
    """``NeosAgentLoopWorker._assess_group`` with the state its ``__init__`` builds from ``neos_credit_judge``
    (``kind: llm``, ``references``): the row's ``extra_info.reference_trajectory_id`` selects the reference."""
    from verl_ext.rollout.tq_worker import NeosAgentLoopWorker

    async def main():
        async with credit_server() as (url, _, bodies):
            worker = object.__new__(NeosAgentLoopWorker)
            worker.llm_judge = CreditJudge(CreditJudgeConfig(url=url, model="valid"))
            worker.references, worker._judge_images = load_references(_write_references(tmp_path)), {}
            rows = [{"extra_info": {"reference_trajectory_id": "n2"}}, {"extra_info": {}}]
            labels = [(await worker._assess_group(row)(reference(), [candidate()]))[0] for row in rows]
            return labels, bodies

    labels, bodies = asyncio.run(main())
    assert [label.reference for label in labels] == ["verified", "in_group"]
    users = [body["messages"][1]["content"] for body in bodies]
    assert "(verified)" in users[0] and "(verified)" not in users[1]
