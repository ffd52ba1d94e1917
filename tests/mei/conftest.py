"""Logged MEI calls and trajectories that reference them, built by hand for the selection and buffer tests."""

from __future__ import annotations

from tool_server.mei.log import MEIRecord
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord

MESSAGES = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "goal: x"}]


def mei_record(call_id: str, outcome: str = "valid", *, version: str = "v0", messages=MESSAGES) -> MEIRecord:
    return MEIRecord(call_id=call_id, ts=0.0, session_id="s", turn=0, tool="WebVisit", method="web_visit",
                     mei_version=version, outcome=outcome, latency_s=0.0, input={"goal": "x"},
                     output={"rational": f"r-{call_id}", "evidence": "", "summary": "", "relevant_images": []},
                     messages=messages)


def trajectory(session: str, calls_per_turn: list[list[str]]) -> TrajectoryRecord:
    """One turn per entry; each turn one WebVisit call holding the given MEI call ids, then a final answer."""
    turns = [
        TurnRecord(index=i, span=(10 * i, 10 * i + 5), text="t", outcome="call_ok",
                   calls=[CallRecord(tool_name="WebVisit", arguments={}, ok=True, mei_call_ids=ids,
                                     mei_versions=["v0"] * len(ids))])
        for i, ids in enumerate(calls_per_turn)
    ]
    n = len(turns)
    turns.append(TurnRecord(index=n, span=(10 * n, 10 * n + 5), text="a", outcome="answer"))
    return TrajectoryRecord(protocol="neos", question="q", session_id=session, group_id="g", mei_version="v0",
                            termination_reason="answer", final_answer="a", turns=turns)
