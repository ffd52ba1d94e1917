"""Eq. 7 by hand for each regime, and its guarantees as properties of random assessments."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.credit import CreditParams, JudgeEvent, rescale_advantages, turn_weights

P = CreditParams()  # M = 4, eta = 0.02, lambda_c = 0.3


@pytest.mark.parametrize(
    "raw, base, expected",
    [
        # P = .1, N = 3, mu = .08: (P + mu)/N < 1 -> alpha = 1, beta = 1: unchanged.
        ([0.1, -1, -1, -1], -1.0, [0.1, -1, -1, -1]),
        # P = .3, N = .2, mu = .08: alpha = (.3 + .08)/.2 = 1.9 (inside [1, M]), beta = 1; sum = -mu.
        ([0.3, -0.1, -0.1, 0.0], -1.0, [0.3, -0.19, -0.19, 0.0]),
        # P = .9, N = .05: alpha capped at M = 4; beta = (4*.05 - .08)/.9 = 2/15 < 1; sum = -mu.
        ([0.3, 0.3, 0.3, -0.05], -1.0, [0.04, 0.04, 0.04, -0.2]),
        # P = 0: beta = 1; alpha = max(1, mu/N) = 1.
        ([-0.5, -0.5, 0.0, 0.0], -1.0, [-0.5, -0.5, 0.0, 0.0]),
        # P = 0 and M*N = .04 < mu: alpha = M, the margin is out of reach.
        ([-0.01, 0.0, 0.0, 0.0], -1.0, [-0.04, 0.0, 0.0, 0.0]),
        # infeasible margin with positive credit: alpha = M, [M*N - mu]+ = 0 -> beta = 0, positives are dropped.
        ([0.3, -0.01, 0.0, 0.0], -1.0, [0.0, -0.04, 0.0, 0.0]),
        # N = 0: the plain GRPO advantage on every token.
        ([0.07, 0.0, 0.21], -0.7, [-0.7, -0.7, -0.7]),
        # b = 2: mu = .02*2*4 = .16, P = .2, N = 6 -> alpha = 1, beta = 1.
        ([0.2, -2, -2, -2], -2.0, [0.2, -2, -2, -2]),
        ([], -1.0, []),
    ],
)
def test_hand_computed_rescaling(raw, base, expected):
    out = rescale_advantages(np.array(raw, dtype=float), base, P)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_feasible_margin_is_met_exactly_when_alpha_is_interior_or_capped():
    for raw in ([0.3, -0.1, -0.1, 0.0], [0.3, 0.3, 0.3, -0.05]):
        assert rescale_advantages(np.array(raw), -1.0, P).sum() == pytest.approx(-0.08)


@pytest.mark.parametrize(
    "raw, base, message",
    [
        ([0.5, -1.0], -1.0, "lambda_c"),  # 0.5 > lambda_c * b
        ([-1.5], -1.0, "lambda_c"),  # below -b
        ([0.1, -0.2], -0.1, "lambda_c"),  # raw built with another b
        ([-0.5], 0.5, "<= 0"),  # a success is not rescaled
        ([-0.5], float("nan"), "<= 0"),
        ([float("nan")], -1.0, "NaN"),
        ([[-0.5]], -1.0, "1-D"),
    ],
)
def test_bad_input_is_rejected(raw, base, message):
    with pytest.raises(ValueError, match=message):
        rescale_advantages(np.array(raw), base, P)


@st.composite
def assessments(draw):
    """A valid assessment (events + productive) over a random number of turns, built chronologically."""
    num_turns = draw(st.integers(1, 10))
    unit = st.floats(0.0, 1.0)
    events, productive, active = [], {}, False
    for t in range(num_turns):
        kinds = ["none", "critical", "productive"] + (["recovery"] if active else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "critical":
            kind_name = draw(st.sampled_from(["causal_error", "re_derailment"]))
            events.append(JudgeEvent(t, kind_name, draw(unit), draw(unit)))
            active = True
        elif kind == "recovery":
            events.append(JudgeEvent(t, "recovery", 0.0, draw(unit)))
            active = False
        elif kind == "productive":
            productive[t] = draw(unit)
    return num_turns, events, productive


@settings(max_examples=150, deadline=None)
@given(data=assessments(), b=st.floats(0.05, 3.0), seed=st.integers(0, 2**32 - 1))
def test_rescaled_credit_is_bounded_and_negative_in_aggregate(data, b, seed):
    num_turns, events, productive = data
    weights = np.array(turn_weights(num_turns, events, productive, P))
    tokens_per_turn = np.random.default_rng(seed).integers(1, 6, size=num_turns)
    raw = np.repeat(b * weights, tokens_per_turn)
    out = rescale_advantages(raw, -b, P)

    tol = 1e-9 * b
    assert out.min() >= -P.M * b - tol and out.max() <= P.lambda_c * b + tol
    negative = np.maximum(-raw, 0).sum()
    if negative == 0:
        np.testing.assert_array_equal(out, -b)
        return
    margin = P.eta * b * raw.size
    if P.M * negative >= margin:  # feasible
        assert out.sum() <= -margin + tol * raw.size
    else:
        assert out.sum() == pytest.approx(-P.M * negative)
    assert np.all(np.sign(out) * np.sign(raw) >= 0)  # no token changes sign
