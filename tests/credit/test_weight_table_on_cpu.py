"""The vectorised Eq. 3 (``WeightTable``) equals the reference ``turn_weights`` float for float, errors included."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.credit import CreditAblation, CreditParams, JudgeEvent, turn_weights
from verl_ext.credit.weight_table import WeightTable
from verl_ext.credit.weights import EVENT_TYPES


@dataclass(frozen=True)
class RawEvent:
    """An event with no checks of its own, like labels built without validation."""

    turn: int
    type: str
    severity: float
    confidence: float


def reference(num_turns, events, productive, params):
    """What ``CreditLabels.weights`` does: rebuild ``JudgeEvent``s (their checks first), then ``turn_weights``."""
    credit = [JudgeEvent(e.turn, e.type, e.severity, e.confidence) for e in events]
    return turn_weights(num_turns, credit, productive, params)


unit = st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.0, 1.0))
odd_unit = st.one_of(unit, st.sampled_from([-0.1, 1.5, math.nan]))  # out of [0, 1] now and then


@st.composite
def failure(draw, valid_only: bool):
    num_turns = draw(st.integers(0, 12))
    turns = draw(st.lists(st.integers(0, max(num_turns - 1, 0)), max_size=6, unique=True)) if num_turns else []
    if not valid_only:
        turns += draw(st.lists(st.sampled_from([-1, num_turns, 0]), max_size=1))  # out of range, or a duplicate
    events, productive = [], {}
    for t in turns:
        kind = draw(st.sampled_from([*EVENT_TYPES, "productive"] + ([] if valid_only else ["bogus"])))
        if kind == "productive":
            productive[t] = draw(unit if valid_only else odd_unit)
        else:
            recovery = kind == "recovery"
            zero = recovery and (valid_only or draw(st.booleans()))
            severity = 0.0 if zero else draw(unit if valid_only else odd_unit)
            events.append(RawEvent(t, kind, severity, draw(unit if valid_only else odd_unit)))
    if valid_only:  # drop recoveries that follow no open critical event, so that most cases are valid labels
        kept, active = [], False
        for e in sorted(events, key=lambda e: e.turn):
            if e.type == "recovery" and not active:
                continue
            kept.append(e)
            active = e.type != "recovery"
        events = kept
    return num_turns, events, productive


ablations = st.sampled_from(list(CreditAblation))
params = st.builds(
    CreditParams,
    kappa_e=st.floats(0.01, 1.0),
    kappa_d=st.floats(0.01, 1.0),
    lambda_d=st.floats(0.0, 1.0),
    gamma=st.floats(0.01, 0.99),
    ablation=ablations,
)


def rows_of(table: np.ndarray, failures) -> list[list[float]]:
    return [table[f, :n].tolist() for f, (n, _, _) in enumerate(failures)]


@settings(max_examples=200, deadline=None)
@given(st.lists(failure(valid_only=True), max_size=6), params)
def test_valid_labels_give_exactly_the_reference_weights(failures, p):
    table = WeightTable.from_labels(failures).weights(p)
    assert rows_of(table, failures) == [reference(n, e, pr, p) for n, e, pr in failures]  # exact, not approx
    width = max((n for n, _, _ in failures), default=0)
    assert table.shape == (len(failures), width)
    for f, (n, _, _) in enumerate(failures):
        assert np.isnan(table[f, n:]).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(failure(valid_only=False), min_size=1, max_size=4), ablations)
def test_any_labels_give_the_reference_result_or_its_error(failures, ablation):
    p = CreditParams(ablation=ablation)
    expected, error = [], None
    for n, e, pr in failures:
        try:
            expected.append(reference(n, e, pr, p))
        except ValueError as exc:
            error = exc
            break
    if error is None:
        assert rows_of(WeightTable.from_labels(failures).weights(p), failures) == expected
    else:
        with pytest.raises(ValueError) as got:
            WeightTable.from_labels(failures).weights(p)
        assert str(got.value) == str(error)  # the first bad failure's own message


def test_long_downstream_tail_uses_the_same_powers():
    # 200 turns of downstream decay after one error: gamma**d must match Python's pow at every d.
    failures = [(201, [RawEvent(0, "causal_error", 0.7, 0.9)], {})]
    for ablation in CreditAblation:
        p = CreditParams(ablation=ablation)
        assert rows_of(WeightTable.from_labels(failures).weights(p), failures) == [reference(*failures[0], p)]


def test_hand_computed_row():
    # Same labels as test_estimator_on_cpu's failure: productive t0 (1.0); causal t1 (s .8, c .5); recovery t3 (1.0);
    # re_derailment t4 (1.0, .9); Table 12 constants.
    events = [
        RawEvent(1, "causal_error", 0.8, 0.5),
        RawEvent(3, "recovery", 0.0, 1.0),
        RawEvent(4, "re_derailment", 1.0, 0.9),
    ]
    table = WeightTable.from_labels([(6, events, {0: 1.0}), (2, [], {})]).weights(CreditParams())
    np.testing.assert_allclose(table[0], [0.1, -0.5, -0.2, 0.3, -0.9, -0.45], rtol=1e-12)
    np.testing.assert_array_equal(table[1], [0.0, 0.0, np.nan, np.nan, np.nan, np.nan])


def test_no_failures():
    assert WeightTable.from_labels([]).weights(CreditParams()).shape == (0, 0)
