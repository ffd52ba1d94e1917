"""Real tasks of the small world (the ``small_world_tasks`` fixture) verified as an expert would solve them, for
``data_gen neos``' own export to write the layouts the curve scripts read."""

from __future__ import annotations

from neos_core.neos_tasks import Outcome
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord


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
