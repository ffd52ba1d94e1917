"""Eq. 3 by hand: every branch, the propagation rules, the input rules, and the Table 5 ablation rows."""

import math

import pytest

from verl_ext.credit import CreditAblation, CreditParams, JudgeEvent, turn_weights

P = CreditParams()  # Table 12: kappa_e .5, kappa_d .25, lambda_d .5, gamma .65, lambda_c .3, lambda_p .1


def causal(turn, s, c):
    return JudgeEvent(turn=turn, type="causal_error", severity=s, confidence=c)


def recovery(turn, c):
    return JudgeEvent(turn=turn, type="recovery", severity=0.0, confidence=c)


def rederail(turn, s, c):
    return JudgeEvent(turn=turn, type="re_derailment", severity=s, confidence=c)


def test_defaults_are_table_12():
    assert (P.kappa_e, P.kappa_d, P.lambda_d, P.gamma, P.lambda_c, P.lambda_p, P.M, P.eta) == (
        0.5, 0.25, 0.5, 0.65, 0.3, 0.1, 4.0, 0.02
    )
    assert P.ablation is CreditAblation.FULL


def test_critical_then_downstream_decay_with_inherited_severity_and_productive_inside_branch():
    # s*c = 0.72 > kappa_e; the productive turn 3 keeps +lambda_p*c, counts toward d and does not clear the error.
    w = turn_weights(6, [causal(1, 0.8, 0.9)], {3: 0.6}, P)
    expected = [0.0, -0.72, -0.36, 0.06, -0.36 * 0.65**2, -0.36 * 0.65**3]
    assert w == pytest.approx(expected)
    assert w[4] == pytest.approx(-0.1521) and w[5] == pytest.approx(-0.098865)


def test_kappa_floors_apply_to_critical_and_downstream():
    # s*c = 0.2: below both floors.
    w = turn_weights(3, [causal(0, 0.4, 0.5)], {}, P)
    assert w == pytest.approx([-0.5, -0.5 * 0.25, -0.5 * 0.25 * 0.65])


def test_recovery_gets_corrective_credit_and_stops_propagation():
    w = turn_weights(5, [causal(0, 1.0, 1.0), recovery(2, 0.5)], {}, P)
    assert w == pytest.approx([-1.0, -0.5, 0.15, 0.0, 0.0])


def test_re_derailment_restarts_propagation_with_its_own_severity():
    events = [causal(0, 1.0, 1.0), recovery(2, 1.0), rederail(4, 0.6, 0.5)]
    w = turn_weights(7, events, {}, P)
    # s*c = 0.3: critical floor 0.5 applies, downstream uses max(0.25, 0.3) = 0.3.
    assert w == pytest.approx([-1.0, -0.5, 0.3, 0.0, -0.5, -0.15, -0.15 * 0.65])


def test_later_causal_error_in_open_branch_restarts_distance_and_strength():
    w = turn_weights(4, [causal(0, 1.0, 1.0), causal(2, 0.9, 0.9)], {}, P)
    assert w == pytest.approx([-1.0, -0.5, -0.81, -0.405])


def test_unannotated_turns_outside_a_branch_are_neutral():
    assert turn_weights(3, [], {1: 1.0}, P) == pytest.approx([0.0, 0.1, 0.0])
    assert turn_weights(0, [], {}, P) == []


def test_events_may_come_in_any_order():
    events = [recovery(2, 1.0), causal(0, 1.0, 1.0)]
    assert turn_weights(3, events, {}, P) == pytest.approx([-1.0, -0.5, 0.3])


def test_custom_params_are_used():
    params = CreditParams(kappa_e=0.9, kappa_d=0.1, lambda_d=1.0, gamma=0.5, lambda_c=0.4, lambda_p=0.2)
    w = turn_weights(5, [causal(0, 0.5, 0.5), recovery(3, 1.0)], {2: 1.0}, params)
    assert w == pytest.approx([-0.9, -0.25, 0.2, 0.4, 0.0])


@pytest.mark.parametrize(
    "num_turns, events, productive, message",
    [
        (3, [causal(3, 0.5, 0.5)], {}, "out of range"),
        (3, [], {5: 0.5}, "out of range"),
        (3, [causal(1, 0.5, 0.5), rederail(1, 0.5, 0.5)], {}, "two events on turn 1"),
        (3, [causal(1, 0.5, 0.5)], {1: 0.5}, "both a judge event and productive"),
        (3, [recovery(1, 0.5)], {}, "no unrecovered error"),
        (4, [causal(0, 0.5, 0.5), recovery(1, 0.5), recovery(2, 0.5)], {}, "no unrecovered error"),
        (3, [], {1: 1.5}, r"\[0, 1\]"),
        (3, [], {1: math.nan}, r"\[0, 1\]"),
        (3, [], {-1: 0.5}, "non-negative int"),
        (-1, [], {}, "num_turns"),
        (3, [("causal_error", 1)], {}, "JudgeEvent"),
    ],
)
def test_invalid_assessments_are_rejected(num_turns, events, productive, message):
    with pytest.raises(ValueError, match=message):
        turn_weights(num_turns, events, productive, P)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(turn=0, type="downstream_consequence", severity=0.5, confidence=0.5), "event type"),
        (dict(turn=0, type="causal_error", severity=1.2, confidence=0.5), "severity"),
        (dict(turn=0, type="causal_error", severity=0.5, confidence=-0.1), "confidence"),
        (dict(turn=0, type="causal_error", severity=math.inf, confidence=0.5), "severity"),
        (dict(turn=0, type="causal_error", severity=True, confidence=0.5), "severity"),
        (dict(turn=0, type="recovery", severity=0.3, confidence=0.5), "severity 0"),
        (dict(turn=-1, type="causal_error", severity=0.5, confidence=0.5), "turn"),
        (dict(turn=1.0, type="causal_error", severity=0.5, confidence=0.5), "turn"),
    ],
)
def test_invalid_events_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JudgeEvent(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kappa_e=0.0), dict(kappa_d=1.5), dict(lambda_d=-0.1), dict(gamma=1.0), dict(lambda_p=0.4),
        dict(lambda_p=0.0), dict(M=0.5), dict(eta=0.0), dict(eta=math.nan), dict(ablation="no_such_row"),
    ],
)
def test_params_outside_appendix_d_ranges_are_rejected(kwargs):
    with pytest.raises(ValueError):
        CreditParams(**kwargs)


# One assessment through every Table 5 row: causal error at 1 (s*c = .72), productive 0 and 3, recovery at 5,
# re-derailment at 7 (s*c = .1, both floors apply).
EVENTS = [causal(1, 0.8, 0.9), recovery(5, 0.5), rederail(7, 0.2, 0.5)]
PRODUCTIVE = {0: 1.0, 3: 0.5}
D3 = -0.36 * 0.65**2
ROWS = {
    CreditAblation.OUTCOME_ONLY: [0.0] * 10,
    CreditAblation.PRODUCTIVE_ONLY: [0.1, -1, -1, 0.05, -1, -1, -1, -1, -1, -1],
    CreditAblation.FIRST_ERROR: [0.1, -0.72, 0, 0.05, 0, 0, 0, 0, 0, 0],
    CreditAblation.DOWNSTREAM: [0.1, -0.72, -0.36, 0.05, D3, 0, 0, 0, 0, 0],
    CreditAblation.CORRECTIVE: [0.1, -0.72, -0.36, 0.05, D3, 0.15, 0, 0, 0, 0],
    CreditAblation.FULL: [0.1, -0.72, -0.36, 0.05, D3, 0.15, 0, -0.5, -0.125, -0.125 * 0.65],
}


@pytest.mark.parametrize("row", list(CreditAblation))
def test_each_ablation_row_gives_the_weights_of_its_components(row):
    assert turn_weights(10, EVENTS, PRODUCTIVE, CreditParams(ablation=row)) == pytest.approx(ROWS[row])


def test_ablation_rows_are_cumulative_in_table_5_order():
    order = [r.value for r in CreditAblation]
    assert order == ["outcome_only", "productive_only", "first_error", "downstream", "corrective", "full"]
    assert CreditAblation.FULL.includes(CreditAblation.DOWNSTREAM)
    assert not CreditAblation.DOWNSTREAM.includes(CreditAblation.CORRECTIVE)
    assert CreditParams(ablation="downstream").ablation is CreditAblation.DOWNSTREAM


def test_rows_before_full_treat_a_later_error_inside_the_branch_as_downstream():
    events = [causal(0, 1.0, 1.0), causal(2, 0.9, 0.9)]
    w = turn_weights(4, events, {}, CreditParams(ablation=CreditAblation.CORRECTIVE))
    assert w == pytest.approx([-1.0, -0.5, -0.5 * 0.65, -0.5 * 0.65**2])


def test_validation_is_the_same_in_every_row():
    with pytest.raises(ValueError, match="no unrecovered error"):
        turn_weights(3, [recovery(1, 0.5)], {}, CreditParams(ablation=CreditAblation.OUTCOME_ONLY))
