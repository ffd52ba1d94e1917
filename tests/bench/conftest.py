"""The bench scripts' tests' parts: real tasks of the small world, verified as an expert would solve them, for
``data_gen neos``' own export to write the layouts the curve scripts read."""

from __future__ import annotations

import pytest

from data_gen.neos.synth import Synthesizer
from neos_core.neos_tasks import Outcome
from neos_core.world.store import World
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord


@pytest.fixture(scope="session")
def tasks(small_world):
    """Twelve real tasks of the small world with distinct answers, the first candidates of its seeds."""
    synth = Synthesizer(World.load(small_world), seed=0)
    found = []
    for seed_entity in synth.seeds():
        for cand in synth.synthesize(seed_entity).candidates:
            if cand.task and cand.task.answer not in {t.answer for t in found}:
                found.append(cand.task)
        if len(found) >= 12:
            return found
    raise AssertionError("the small world yields fewer than 12 tasks")


def solved(task) -> Outcome:
    """The task verified, its expert reading the answer off the last page."""
    url = task.steps[-1].source_page_url
    call = CallRecord(tool_name="WebVisit", arguments={"url": [url], "goal": "answer"}, ok=True,
                      observation=f"## {url}\nIts {task.steps[-1].relation_label} is {task.answer}.")
    turns = [TurnRecord(index=0, span=(0, 0), text="", outcome="call_ok", calls=[call]),
             TurnRecord(index=1, span=(0, 0), text=task.answer, outcome="answer", tools_enabled=False)]
    trajectory = TrajectoryRecord(protocol="neos", question=task.question, session_id="s", group_id=task.id,
                                  mei_version=None, termination_reason="answer", final_answer=task.answer,
                                  turns=turns).model_dump(mode="json")
    return Outcome(key=task.id, status="verified", task=task, trajectory=trajectory)
