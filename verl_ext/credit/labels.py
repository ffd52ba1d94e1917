"""One trajectory's credit labels as they travel to the trainer, in ``extra_fields[CREDIT_KEY]`` (plain JSON).

The judge's answer (``CreditAssessment``) names span ids and carries prose; the trainer needs only turns, types and
numbers, plus whether the trajectory was assessed at all and, if not, why. Building labels goes through the same
checks the estimator relies on (listed span ids, one label per turn, Eq. 3's input rules), so a label set that
reaches the trainer is one ``turn_weights`` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from verl_ext.credit.params import CreditParams
from verl_ext.credit.schema import CreditAssessment, Unit, assessment_to_credit
from verl_ext.credit.weights import EventType, JudgeEvent, turn_weights

CREDIT_KEY = "neos_credit"
LABELS_SCHEMA_VERSION = 1

# What each turn of an assessed failure is under Eq. 3 (Neos Fig. 9's composition): its label, else downstream where
# an open error branch gives it a negative weight, else neutral.
CreditType = Literal["productive", "causal_error", "re_derailment", "downstream", "recovery", "neutral"]
CREDIT_TYPES: tuple[CreditType, ...] = ("productive", "causal_error", "re_derailment", "downstream", "recovery",
                                        "neutral")
Turn = Annotated[int, Field(ge=0)]
# What the judge compared the failure with: a verified success from data generation, or a success of its own group.
ReferenceKind = Literal["verified", "in_group"]


class LabelEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: Turn
    type: EventType
    severity: Unit
    confidence: Unit


class CreditLabels(BaseModel):
    """``assessed=False`` (with ``fallback_reason``) means: plain GRPO advantage for this trajectory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = LABELS_SCHEMA_VERSION
    assessed: bool
    judge: str  # which judge produced it, e.g. "llm:<model>" or "offline_path"
    num_turns: Turn  # policy turns of the candidate: the estimator checks it against response_mask
    events: list[LabelEvent] = Field(default_factory=list)
    productive: dict[Turn, Unit] = Field(default_factory=dict)  # JSON object keys arrive as "3": parsed to int
    fallback_reason: str | None = None
    reference: ReferenceKind | None = None  # None: not recorded (offline judge, labels from before the field)

    @model_validator(mode="after")
    def _consistent(self) -> CreditLabels:
        if self.assessed == (self.fallback_reason is not None):
            raise ValueError("assessed labels have no fallback_reason; unassessed ones must say why")
        if not self.assessed and (self.events or self.productive):
            raise ValueError("unassessed labels carry no events or productive turns")
        if self.assessed:
            self.weights(CreditParams())  # Eq. 3's input rules: turns in range, one label per turn, ...
        return self

    def credit(self) -> tuple[list[JudgeEvent], dict[int, float]]:
        """``(events, productive)`` as ``turn_weights`` takes them."""
        events = [JudgeEvent(e.turn, e.type, e.severity, e.confidence) for e in self.events]
        return events, dict(self.productive)

    def weights(self, params: CreditParams) -> list[float]:
        """Eq. 3 turn weights of this trajectory under ``params`` (and its ablation row)."""
        events, productive = self.credit()
        return turn_weights(self.num_turns, events, productive, params)

    def turn_types(self, params: CreditParams) -> list[CreditType]:
        """Each turn's :data:`CreditType` under ``params``."""
        events = {e.turn: e.type for e in self.events}
        types: list[CreditType] = []
        for turn, weight in enumerate(self.weights(params)):
            if turn in events:
                types.append(events[turn])
            elif turn in self.productive:
                types.append("productive")
            else:
                types.append("downstream" if weight < 0 else "neutral")
        return types


def labels_from_assessment(assessment: CreditAssessment, span_turns: Mapping[str, int], judge: str) -> CreditLabels:
    """Labels of a validated judge answer; ``span_turns`` is ``TrajectoryRecord.span_turns()`` of the candidate.

    Raises ``ValueError`` (pydantic's ``ValidationError`` is one) when the answer breaks a rule that the schema alone
    cannot see, e.g. an unlisted span id or a recovery with no error before it: the judge gets to repair it.
    """
    if sorted(span_turns.values()) != list(range(len(span_turns))):
        raise ValueError(f"span_turns must map onto turns 0..{len(span_turns) - 1}, got {dict(span_turns)}")
    events, productive = assessment_to_credit(assessment, span_turns)
    return CreditLabels(
        assessed=True,
        judge=judge,
        num_turns=len(span_turns),
        events=[LabelEvent(turn=e.turn, type=e.type, severity=e.severity, confidence=e.confidence) for e in events],
        productive=productive,
    )


def unassessed(judge: str, num_turns: int, reason: str) -> CreditLabels:
    """Labels of a trajectory that falls back to plain GRPO, saying why."""
    return CreditLabels(assessed=False, judge=judge, num_turns=num_turns, fallback_reason=reason)
