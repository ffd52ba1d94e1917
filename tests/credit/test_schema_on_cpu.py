"""The judge's strict output schema and its mapping from span ids to turns."""

import copy
import json

import pytest
from pydantic import ValidationError

from verl_ext.credit import SCHEMA_VERSION, CreditAssessment, JudgeEvent, assessment_to_credit, turn_weights

SPANS = {"T01.A1": 0, "T02.A1": 1, "T03.A1": 2, "T04.A1": 3, "T05.A1": 4}

VALID = {
    "schema_version": "m-detective-failed-turn-credit-v2",
    "candidate_overall_summary": "Trusted a caption instead of the mural pixels and searched the wrong town.",
    "events": [
        {
            "span_id": "T02.A1",
            "type": "causal_error",
            "severity": 0.8,
            "confidence": 0.9,
            "error_category": "metadata_as_pixel_evidence",
            "rationale": "Took the caption's town although the fetched mural shows another name.",
            "reference_support": [13, "14"],
        },
        {
            "span_id": "T04.A1",
            "type": "recovery",
            "severity": 0,
            "confidence": 0.5,
            "error_category": "",
            "rationale": "Cropped the mural and switched to the town it names.",
            "reference_support": [],
        },
    ],
    "productive_turns": [{"span_id": "T01.A1", "confidence": 1, "rationale": "Identified the journal."}],
    "confidence": 0.7,
}


DELETE = object()


def mutated(path, value):
    sample = copy.deepcopy(VALID)
    *parents, last = path
    node = sample
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return sample


def test_valid_sample_parses_and_maps_to_turn_weights():
    assessment = CreditAssessment.model_validate_json(json.dumps(VALID))
    assert assessment.schema_version == SCHEMA_VERSION
    events, productive = assessment_to_credit(assessment, SPANS)
    assert events == [
        JudgeEvent(turn=1, type="causal_error", severity=0.8, confidence=0.9),
        JudgeEvent(turn=3, type="recovery", severity=0.0, confidence=0.5),
    ]
    assert productive == {0: 1.0}
    assert turn_weights(5, events, productive) == pytest.approx([0.1, -0.72, -0.36, 0.15, 0.0])


@pytest.mark.parametrize(
    "path, value",
    [
        (("events", 0, "type"), "downstream_consequence"),
        (("events", 0, "severity"), 1.2),
        (("events", 0, "severity"), "0.8"),  # strict: no string coercion
        (("events", 0, "confidence"), -0.1),
        (("events", 1, "severity"), 0.3),  # recovery must have severity 0
        (("events", 0, "error_category"), "Wrong Entity"),  # not snake_case
        (("events", 0, "extra"), "x"),
        (("productive_turns", 0, "confidence"), 2),
        (("productive_turns", 0, "span_id"), "T02.A1"),  # duplicate span id
        (("confidence",), None),
        (("schema_version",), "m-detective-failed-turn-credit-v1"),
        (("schema_version",), DELETE),
        (("events", 0, "rationale"), DELETE),
        (("notes",), "extra top-level key"),
    ],
)
def test_malformed_samples_are_rejected(path, value):
    with pytest.raises(ValidationError):
        CreditAssessment.model_validate_json(json.dumps(mutated(path, value)))


def test_span_ids_outside_the_candidate_list_are_rejected():
    assessment = CreditAssessment.model_validate(mutated(("events", 0, "span_id"), "T09.A1"))
    with pytest.raises(ValueError, match="T09.A1"):
        assessment_to_credit(assessment, SPANS)


def test_two_span_ids_on_one_turn_are_rejected():
    assessment = CreditAssessment.model_validate(VALID)
    with pytest.raises(ValueError, match="both label turn 1"):
        assessment_to_credit(assessment, {**SPANS, "T01.A1": 1})


def test_non_json_text_is_rejected():
    with pytest.raises(ValidationError):
        CreditAssessment.model_validate_json('{"schema_version": "m-detective-failed-turn-credit-v2",')
