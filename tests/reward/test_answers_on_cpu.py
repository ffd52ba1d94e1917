"""Hand-made normalisation and matching cases, including the ones that must not match (module doc of answers)."""

from __future__ import annotations

import numpy as np
import pytest

from verl_ext.reward.answers import answer_matches, normalize_answer, primary_target, reference_answers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  Café   de Flore ", "cafe de flore"),
        ("ＴＯＫＹＯ", "tokyo"),  # full-width letters fold to ASCII
        ("Straße", "strasse"),
        ("1,000,000", "1000000"),
        ("3.50", "3.5"),
        ("3.0", "3"),
        ("007", "7"),
        ("twelve", "12"),
        ("50%", "50 percent"),
        ("O'Neill", "oneill"),
        ("Jean-Paul Sartre", "jean paul sartre"),
        ("Tom & Jerry", "tom and jerry"),
        ("The The", "the the"),  # only articles: kept, or the answer would vanish
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_reference_forms() -> None:
    assert reference_answers("Paris") == ["Paris"]
    assert reference_answers({"target": "NYC", "aliases": ["New York City", "New York"]}) == [
        "NYC",
        "New York City",
        "New York",
    ]
    assert reference_answers({"target": "NYC", "aliases": np.array(["New York"], dtype=object)}) == ["NYC", "New York"]
    assert reference_answers('{"target": "Rome", "aliases": ["Roma"]}') == ["Rome", "Roma"]
    assert reference_answers("Lyon or Marseille") == ["Lyon or Marseille", "Lyon", "Marseille"]
    assert primary_target({"target": "NYC", "aliases": ["New York"]}) == "NYC (also accepted: New York)"


@pytest.mark.parametrize(
    ("prediction", "ground_truth"),
    [
        ("paris", "Paris"),
        ("The answer is Paris.", "Paris"),
        ("After checking both pages, the answer is Paris. It is the capital.", "Paris"),
        ("Final answer: **1,000 meters**", "1000 meters"),
        ("\\boxed{42}", "forty-two or 42"),
        ("New York", {"target": "NYC", "aliases": ["New York City", "New York"]}),
        ("Marseille", "Lyon or Marseille"),
        ("Beyoncé", "Beyonce"),
        ("It is **St. Louis**.", "St. Louis"),
        ("The answer is St. Louis", "St Louis"),
        ("twelve", "12"),
    ],
)
def test_matches(prediction: str, ground_truth: object) -> None:
    assert answer_matches(prediction, ground_truth)


@pytest.mark.parametrize(
    ("prediction", "ground_truth"),
    [
        ("Paris, Texas", "Paris"),  # a different (more specific) entity
        ("Paris", "Paris, Texas"),  # less specific: ambiguous
        ("Paris or Lyon", "Paris"),  # hedging between candidates earns nothing
        ("I think it is Paris, the capital of France", "Paris"),  # no cue: the rule does not search prose
        ("1000", "100"),
        ("3.05", "3.5"),
        ("", "Paris"),
        ("Paris", ""),
        ("Paris", {"target": "", "aliases": []}),
    ],
)
def test_does_not_match(prediction: str, ground_truth: object) -> None:
    assert not answer_matches(prediction, ground_truth)
