"""Credit labels: built from a judge answer with the same checks as the estimator, and JSON round trips."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from verl_ext.credit import SCHEMA_VERSION, CreditAssessment, CreditParams
from verl_ext.credit.labels import CreditLabels, LabelEvent, labels_from_assessment, unassessed

SPANS = {"t0": 0, "t1": 1, "t2": 2}


def _assessment(events: list[dict], productive: list[dict]) -> CreditAssessment:
    return CreditAssessment.model_validate(
        {
            "schema_version": SCHEMA_VERSION,
            "candidate_overall_summary": "searched the wrong city",
            "events": events,
            "productive_turns": productive,
            "confidence": 0.9,
        }
    )


def _event(span: str, kind: str, severity: float, confidence: float) -> dict:
    return {
        "span_id": span,
        "type": kind,
        "severity": severity,
        "confidence": confidence,
        "error_category": "wrong_entity",
        "rationale": "r",
        "reference_support": [1],
    }


def test_assessment_becomes_turn_labels_and_survives_json() -> None:
    a = _assessment([_event("t1", "causal_error", 1.0, 0.6)], [{"span_id": "t0", "confidence": 0.5, "rationale": ""}])
    labels = labels_from_assessment(a, SPANS, judge="llm:m")
    assert labels == CreditLabels(
        assessed=True,
        judge="llm:m",
        num_turns=3,
        events=[LabelEvent(turn=1, type="causal_error", severity=1.0, confidence=0.6)],
        productive={0: 0.5},
    )
    assert CreditLabels.model_validate_json(labels.model_dump_json()) == labels  # productive keys: "0" -> 0
    # Eq. 3: [λ_p·0.5, -max(0.5, 0.6), downstream -0.5·max(0.25, 0.6)·γ^0]
    assert labels.weights(CreditParams()) == pytest.approx([0.05, -0.6, -0.3])


def test_rules_outside_the_schema_are_rejected() -> None:
    with pytest.raises(ValueError, match="does not list"):
        labels_from_assessment(_assessment([_event("t7", "causal_error", 1.0, 1.0)], []), SPANS, judge="j")
    with pytest.raises(ValueError, match="no unrecovered error"):
        labels_from_assessment(_assessment([_event("t1", "recovery", 0.0, 1.0)], []), SPANS, judge="j")


def test_assessed_and_fallback_are_exclusive() -> None:
    assert unassessed("j", 4, "fallback_timeout").fallback_reason == "fallback_timeout"
    with pytest.raises(ValidationError, match="must say why"):
        CreditLabels(assessed=False, judge="j", num_turns=1)
    with pytest.raises(ValidationError, match="no events"):
        CreditLabels(assessed=False, judge="j", num_turns=1, productive={0: 1.0}, fallback_reason="x")
    with pytest.raises(ValidationError, match="out of range"):
        CreditLabels(assessed=True, judge="j", num_turns=1, productive={3: 1.0})
