"""The vectorized batch path equals the scalar reference (Eq. 3 weights -> Eq. 7 per trajectory)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.credit import CreditParams, batch_token_advantages, rescale_advantages

P = CreditParams()


def reference(token_turn, weights, base, assessed, params=P):
    """Row by row with the scalar ``rescale_advantages``."""
    out = np.zeros(token_turn.shape)
    for i, turns in enumerate(token_turn):
        policy = turns >= 0
        if assessed[i]:
            raw = -base[i] * np.asarray(weights[i], dtype=float)[turns[policy]]
            out[i, policy] = rescale_advantages(raw, base[i], params)
        else:
            out[i, policy] = base[i]
    return out


weight = st.one_of(st.sampled_from([-1.0, 0.0, P.lambda_c, P.lambda_p]), st.floats(-1.0, P.lambda_c))


@st.composite
def batches(draw):
    bs = draw(st.integers(1, 6))
    length = draw(st.integers(0, 40))
    assessed = np.array(draw(st.lists(st.booleans(), min_size=bs, max_size=bs)))
    weights, rows, base = [], [], []
    for i in range(bs):
        num_turns = draw(st.integers(1, 6))
        weights.append(draw(st.lists(weight, min_size=num_turns, max_size=num_turns)) if assessed[i] else [])
        top = num_turns - 1 if assessed[i] else 9  # other samples' turn ids are not bounded by weights
        rows.append(draw(st.lists(st.integers(-1, top), min_size=length, max_size=length)))
        sign = -1.0 if assessed[i] else draw(st.sampled_from([-1.0, 1.0]))
        base.append(sign * draw(st.floats(0.0, 3.0)))
    token_turn = np.array(rows, dtype=np.int64).reshape(bs, length)
    return token_turn, weights, np.array(base), assessed


@settings(max_examples=200, deadline=None)
@given(batches())
def test_vectorized_equals_scalar_reference(batch):
    token_turn, weights, base, assessed = batch
    out = batch_token_advantages(token_turn, weights, base, assessed, P)
    assert out.dtype == np.float32 and out.shape == token_turn.shape
    np.testing.assert_allclose(out, reference(token_turn, weights, base, assessed), rtol=2e-7, atol=1e-7)


def test_many_chunks_and_small_integer_dtypes():
    rng = np.random.default_rng(0)
    bs, length, turns = 203, 50, 7  # several chunks, the last one short
    token_turn = rng.integers(-1, turns, size=(bs, length))
    assessed = rng.random(bs) < 0.5
    weights = [list(rng.uniform(-1, 0.3, size=turns)) for _ in range(bs)]
    base = np.where(assessed, -rng.uniform(0.1, 2, bs), rng.uniform(-2, 2, bs))
    expected = reference(token_turn, weights, base, assessed)
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        out = batch_token_advantages(token_turn.astype(dtype), weights, base, assessed, P)
        np.testing.assert_allclose(out, expected, rtol=2e-7, atol=1e-7)


def test_hand_computed_batch():
    # Sample 0: failure, turn 0 has 2 tokens (w = -1), turn 1 one token (w = .3), then an observation and padding.
    #   b = 1, P = .3, N = 2, L = 3, mu = .06: alpha = 1, beta = 1.
    # Sample 1: success with A = .5 on its two policy tokens. Sample 2: assessed failure without negative credit.
    token_turn = np.array([[0, 0, -1, 1, -1], [0, -1, 1, -1, -1], [0, 0, 0, -1, -1]])
    out = batch_token_advantages(token_turn, [[-1.0, 0.3], [], [0.1]], [-1.0, 0.5, -0.8], np.array([True, False, True]))
    np.testing.assert_allclose(out, [[-1, -1, 0, 0.3, 0], [0.5, 0, 0.5, 0, 0], [-0.8, -0.8, -0.8, 0, 0]], rtol=1e-7)


def test_empty_batches():
    assert batch_token_advantages(np.zeros((0, 4), dtype=np.int64), [], [], np.zeros(0, bool)).shape == (0, 4)
    assert batch_token_advantages(np.zeros((2, 0), dtype=np.int64), [[], []], [0.0, 0.0], np.zeros(2, bool)).shape == (
        2,
        0,
    )


GOOD = dict(
    token_turn=np.array([[0, 1, -1]]), turn_weights=[[-1.0, 0.3]], base_advantage=[-1.0], assessed=np.array([True])
)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(token_turn=np.array([[0, -2, 1]])), r"\[-1, 65536\)"),
        (dict(token_turn=np.array([[0, 1 << 40, 1]]), assessed=np.array([False])), r"\[-1, 65536\)"),
        (dict(token_turn=np.array([[0, 2, 1]])), "turn 2 but turn weights for 2 turns"),
        (dict(token_turn=np.array([[0.0, 1.0, -1.0]])), "integer"),
        (dict(token_turn=np.array([0, 1, -1])), "2-D"),
        (dict(turn_weights=[[-1.0, 0.5]]), "lambda_c"),
        (dict(turn_weights=[[-1.5, 0.1]]), "lambda_c"),
        (dict(turn_weights=[[-1.0, float("nan")]]), "finite"),
        (dict(turn_weights=[[[-1.0], [0.1]]]), "flat sequences"),
        (dict(turn_weights=[["a", 0.1]]), "flat sequences"),
        (dict(turn_weights=[]), "one entry per sample"),
        (dict(base_advantage=[0.5]), "<= 0"),
        (dict(base_advantage=[-1.0, -1.0]), "base_advantage"),
        (dict(assessed=np.array([1])), "bool"),
    ],
)
def test_bad_batches_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        batch_token_advantages(**{**GOOD, **change})
