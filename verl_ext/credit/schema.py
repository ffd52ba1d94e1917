"""The credit judge's output (schema ``m-detective-failed-turn-credit-v2``, Neos Fig. 20) and its mapping to turns.

Validation is strict on purpose: a malformed assessment must fail here so the caller can spend a repair retry or
fall back to plain GRPO, instead of training on a half-understood label set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from verl_ext.credit.weights import EventType, JudgeEvent

SCHEMA_VERSION = "m-detective-failed-turn-credit-v2"

Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
SpanId = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CreditEvent(_Strict):
    span_id: SpanId
    type: EventType
    severity: Unit  # 0 for recovery
    confidence: Unit
    error_category: Annotated[str, Field(pattern=r"^([a-z0-9]+(_[a-z0-9]+)*)?$")]  # snake_case label or ""
    rationale: str
    reference_support: list[int | str]  # reference assistant-turn numbers

    @model_validator(mode="after")
    def _recovery_has_no_severity(self) -> CreditEvent:
        if self.type == "recovery" and self.severity != 0:
            raise ValueError(f"recovery event {self.span_id!r} must have severity 0, got {self.severity}")
        return self


class ProductiveTurn(_Strict):
    span_id: SpanId
    confidence: Unit
    rationale: str


class CreditAssessment(_Strict):
    """One judge answer for one failed candidate trajectory. Parse with ``CreditAssessment.model_validate_json``."""

    schema_version: Literal["m-detective-failed-turn-credit-v2"]
    candidate_overall_summary: str
    events: list[CreditEvent]
    productive_turns: list[ProductiveTurn]
    confidence: Unit

    @model_validator(mode="after")
    def _span_ids_unique(self) -> CreditAssessment:
        seen: set[str] = set()
        for span_id in [e.span_id for e in self.events] + [p.span_id for p in self.productive_turns]:
            if span_id in seen:
                raise ValueError(f"span id {span_id!r} is labelled more than once")
            seen.add(span_id)
        return self


def assessment_to_credit(
    assessment: CreditAssessment, span_turns: Mapping[str, int]
) -> tuple[list[JudgeEvent], dict[int, float]]:
    """``(events, productive)`` for ``turn_weights``; ``span_turns`` maps the candidate's listed span ids to turns.

    Span ids outside the map are rejected (the judge may only use listed ids), and so are two labels that land on
    one turn through different span ids.
    """
    labelled = [e.span_id for e in assessment.events] + [p.span_id for p in assessment.productive_turns]
    unknown = [s for s in labelled if s not in span_turns]
    if unknown:
        raise ValueError(f"judge used span ids that the candidate does not list: {unknown}")
    owner: dict[int, str] = {}
    for span_id in labelled:
        turn = span_turns[span_id]
        if turn in owner:
            raise ValueError(f"span ids {owner[turn]!r} and {span_id!r} both label turn {turn}")
        owner[turn] = span_id
    events = [
        JudgeEvent(turn=span_turns[e.span_id], type=e.type, severity=e.severity, confidence=e.confidence)
        for e in assessment.events
    ]
    productive = {span_turns[p.span_id]: p.confidence for p in assessment.productive_turns}
    return events, productive
