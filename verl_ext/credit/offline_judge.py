"""A deterministic credit judge for the embedded offline world: a documented heuristic, no model.

Tasks synthesised from the world come with their verified reasoning path, the ordered evidence items (entity names,
page URLs) an agent must retrieve. Against that path a failed candidate is labelled as follows (case-insensitive
substring matching on the turn's call arguments and, for progress, its delivered observation):

- productive: a turn that hits the next path item (it may hit several consecutive items at once);
- causal_error: after the last productive turn, the first turn that commits to content off the path: a tool call
  that mentions no path item and not the answer, or a final answer that does not match the task's answer;
- recovery: a later turn whose call mentions a path item or the answer again;
- re_derailment: leaving the path again after a recovery (then recovery / re-derailment alternate).

Tool errors and turns without a well-formed action are neutral (environment failures are not policy errors). The
labels go through the same ``CreditAssessment`` -> ``labels_from_assessment`` path as an LLM judge's answer.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from verl_ext.credit.labels import CreditLabels, labels_from_assessment, unassessed
from verl_ext.credit.schema import SCHEMA_VERSION, CreditAssessment
from verl_ext.reward.answers import answer_matches
from verl_ext.rollout.record import TrajectoryRecord, TurnRecord, span_id

JUDGE_NAME = "offline_path"


class TaskPath(BaseModel):
    """A task's verified reasoning path, as the data generator exports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    evidence: list[str] = Field(min_length=1)  # ordered items a successful trajectory retrieves
    answer: str


def _call_text(turn: TurnRecord) -> str:
    return "\n".join(json.dumps(call.arguments, ensure_ascii=False) for call in turn.calls).lower()


def _observation_text(turn: TurnRecord) -> str:
    if not turn.observation_delivered_to_policy:
        return ""
    return "\n".join(call.observation for call in turn.calls).lower()


def _advance(turn: TurnRecord, items: Sequence[str], pointer: int) -> int:
    """The path position after ``turn``: past every consecutive next item its call or observation contains."""
    if turn.outcome not in ("call_ok", "answer"):
        return pointer
    text = _call_text(turn) + "\n" + _observation_text(turn)
    while pointer < len(items) and items[pointer] in text:
        pointer += 1
    return pointer


def _walk(record: TrajectoryRecord, items: Sequence[str]) -> dict[int, list[int]]:
    """Turn -> indices of the path items it retrieved."""
    hits: dict[int, list[int]] = {}
    pointer = 0
    for turn in record.turns:
        after = _advance(turn, items, pointer)
        if after > pointer:
            hits[turn.index] = list(range(pointer, after))
        pointer = after
    return hits


class OfflinePathJudge:
    """Labels failures of tasks whose path it knows (keyed by question); others fall back with ``no_task_path``."""

    def __init__(self, paths: Iterable[TaskPath]) -> None:
        self.paths = {path.question: path for path in paths}
        self.name = JUDGE_NAME
        self.counters: Counter[str] = Counter({"ok": 0, "fallback_no_task_path": 0})

    def _off_path(self, turn: TurnRecord, on_path: Sequence[str], answer: str, final: str | None) -> bool | None:
        """True off the path, False on it, None for neutral turns (errors, no action)."""
        if turn.outcome == "answer":
            return not answer_matches(final if final is not None else turn.text, answer)
        if turn.outcome != "call_ok":
            return None
        text = _call_text(turn)
        return not any(item in text for item in on_path)

    def assess(self, reference: TrajectoryRecord, candidate: TrajectoryRecord) -> CreditLabels:
        path = self.paths.get(candidate.question)
        if path is None:
            self.counters["fallback_no_task_path"] += 1
            return unassessed(self.name, len(candidate.turns), "no_task_path")
        items = [item.lower() for item in path.evidence]
        on_path = [*items, path.answer.lower()]
        support: dict[int, int] = {}  # path item -> 1-based reference turn that retrieved it
        for turn, found in _walk(reference, items).items():
            support.update({i: turn + 1 for i in found})
        hits = _walk(candidate, items)
        productive = [
            {"span_id": span_id(t), "confidence": 1.0, "rationale": f"retrieves {[path.evidence[i] for i in found]}"}
            for t, found in hits.items()
        ]
        events = []
        off = False
        last_productive = max(hits, default=-1)
        reached = max((i for found in hits.values() for i in found), default=-1) + 1  # first item never retrieved
        missed = [support[reached]] if reached in support else []
        for turn in candidate.turns[last_productive + 1 :]:
            verdict = self._off_path(turn, on_path, path.answer, candidate.final_answer)
            if verdict is None or verdict == off:
                continue
            off = verdict
            kind = "recovery" if not off else ("causal_error" if not events else "re_derailment")
            events.append(
                {
                    "span_id": span_id(turn.index),
                    "type": kind,
                    "severity": 1.0 if off else 0.0,
                    "confidence": 1.0,
                    "error_category": "off_path" if off else "",
                    "rationale": "leaves the verified path" if off else "returns to the verified path",
                    "reference_support": missed,  # the reference turn that retrieved the item the candidate missed
                }
            )
        assessment = CreditAssessment.model_validate(
            {
                "schema_version": SCHEMA_VERSION,
                "candidate_overall_summary": f"retrieved {sum(map(len, hits.values()))}/{len(items)} path items",
                "events": events,
                "productive_turns": productive,
                "confidence": 1.0,
            }
        )
        self.counters["ok"] += 1
        return labels_from_assessment(assessment, candidate.span_turns(), self.name)

    async def assess_group(
        self, reference: TrajectoryRecord, failures: Sequence[TrajectoryRecord]
    ) -> list[CreditLabels]:
        """Same interface as ``CreditJudge.assess_group``; the heuristic is cheap, so it runs inline."""
        return [self.assess(reference, failure) for failure in failures]
