"""A group's failures are judged once, when its last trajectory arrives, against one of its successes."""

from __future__ import annotations

import asyncio

import pytest

from verl_ext.credit.group import GroupAssessor
from verl_ext.credit.labels import unassessed

from .conftest import candidate as make_candidate
from .conftest import reference as make_reference


class Judge:
    """Records what it was asked; answers one fallback label per failure (its turn count = the candidate's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    async def __call__(self, reference, failures):
        self.calls.append((reference.question, [f.question for f in failures]))
        await asyncio.sleep(0)
        return [unassessed("test", len(f.turns), f"label for {f.question}") for f in failures]


async def test_the_last_arrival_runs_one_assessment_and_every_member_gets_its_labels():
    candidate, reference = make_candidate(), make_reference()
    judge, assessor = Judge(), GroupAssessor(size=3)
    a = reference.model_copy(update={"question": "a"})
    b = candidate.model_copy(update={"question": "b"})
    c = candidate.model_copy(update={"question": "c"})
    first = asyncio.create_task(assessor.submit("g", "0", b, 0.0, judge))
    second = asyncio.create_task(assessor.submit("g", "1", a, 1.0, judge))
    await asyncio.sleep(0.01)
    assert judge.calls == [] and not first.done()  # waits for the whole group
    third = await assessor.submit("g", "2", c, 0.0, judge)
    assert judge.calls == [("a", ["b", "c"])]
    assert (await first).fallback_reason == "label for b" and third.fallback_reason == "label for c"
    assert await second is None  # a success keeps its outcome advantage


@pytest.mark.parametrize("rewards", [(1.0, 1.0), (0.0, 0.0)])
async def test_groups_without_both_outcomes_are_not_judged(rewards):
    candidate = make_candidate()
    judge, assessor = Judge(), GroupAssessor(size=2)
    results = await asyncio.gather(*(assessor.submit("g", str(i), candidate, r, judge) for i, r in enumerate(rewards)))
    assert results == [None, None] and judge.calls == []


async def test_a_raising_judge_labels_the_failures_unassessed_and_a_duplicate_is_refused(caplog):
    """No member's episode fails with the judge: its failures fall back to GRPO with reason "error" (counted by the
    estimator), its success keeps the outcome advantage, and the error is logged."""
    candidate, reference = make_candidate(), make_reference()

    async def broken(ref, failures):
        raise RuntimeError("judge down")

    assessor = GroupAssessor(size=2)
    waiting = asyncio.create_task(assessor.submit("g", "0", candidate, 0.0, broken))
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="submitted twice"):
        await assessor.submit("g", "0", candidate, 0.0, broken)
    assert await assessor.submit("g", "1", reference, 1.0, broken) is None
    assert await waiting == unassessed("error", len(candidate.turns), "error")
    assert "judge down" in caplog.text


async def test_a_member_that_raised_is_withdrawn_and_its_siblings_are_judged_without_it():
    """Without the withdrawal the two members that arrived would wait forever for the third (hang guard: timeout)."""
    candidate, reference = make_candidate(), make_reference()
    judge, assessor = Judge(), GroupAssessor(size=3)
    a = reference.model_copy(update={"question": "a"})
    b = candidate.model_copy(update={"question": "b"})
    first = asyncio.create_task(assessor.submit("g", "0", a, 1.0, judge))
    second = asyncio.create_task(assessor.submit("g", "1", b, 0.0, judge))
    await asyncio.sleep(0.01)
    assert not first.done() and judge.calls == []
    assert await asyncio.wait_for(assessor.withdraw("g", "2"), timeout=10) is True
    assert judge.calls == [("a", ["b"])]  # the member that raised is neither reference nor judged
    assert await asyncio.wait_for(first, timeout=10) is None
    assert (await asyncio.wait_for(second, timeout=10)).fallback_reason == "label for b"
    assert assessor._groups == {}


async def test_withdrawals_before_and_after_arrivals_and_a_group_with_no_trajectory():
    candidate, reference = make_candidate(), make_reference()
    judge, assessor = Judge(), GroupAssessor(size=2)
    assert await assessor.withdraw("g", "0") is True  # raised before any sibling arrived
    assert await assessor.withdraw("g", "0") is False  # counted once
    assert await asyncio.wait_for(assessor.submit("g", "1", candidate, 0.0, judge), timeout=10) is None
    assert judge.calls == []  # one failure and no success: nothing to judge
    assert await assessor.withdraw("h", "0") and await assessor.withdraw("h", "1")  # every member raised
    assert assessor._groups == {}
    waiting = asyncio.create_task(assessor.submit("k", "0", reference, 1.0, judge))
    await asyncio.sleep(0)
    assert await assessor.withdraw("k", "0") is False  # it submitted: the group still waits for member 1
    assert not waiting.done()
    await assessor.withdraw("k", "1")
    assert await asyncio.wait_for(waiting, timeout=10) is None


async def test_a_judge_failure_after_a_withdrawal_labels_the_failures_unassessed():
    async def broken(ref, failures):
        raise RuntimeError("judge down")

    assessor = GroupAssessor(size=3)
    candidate = make_candidate()
    waiting = [
        asyncio.create_task(assessor.submit("g", str(i), r, float(i == 0), broken))
        for i, r in enumerate((make_reference(), candidate))
    ]
    await asyncio.sleep(0)
    assert await assessor.withdraw("g", "2") is True
    success, failure = [await asyncio.wait_for(task, timeout=10) for task in waiting]
    assert success is None and failure == unassessed("error", len(candidate.turns), "error")
