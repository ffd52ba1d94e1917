"""Mask runs as turns, and the run-based batch path: same advantages as the token path and the scalar reference."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.credit import CreditParams, batch_token_advantages, mask_runs, run_token_advantages

from .test_batch_on_cpu import reference

P = CreditParams()


def loop_turns(mask: np.ndarray) -> np.ndarray:
    """Turn index per token, one token at a time (the definition)."""
    out = np.full(mask.shape, -1)
    for i, row in enumerate(mask):
        turn, previous = -1, False
        for k, policy in enumerate(row):
            turn += bool(policy and not previous)
            out[i, k] = turn if policy else -1
            previous = bool(policy)
    return out


@st.composite
def masked_batches(draw):
    bs, length = draw(st.integers(1, 6)), draw(st.integers(0, 30))
    mask = np.array(draw(st.lists(st.booleans(), min_size=bs * length, max_size=bs * length))).reshape(bs, length)
    turns = loop_turns(mask)
    assessed = np.array(draw(st.lists(st.booleans(), min_size=bs, max_size=bs)))
    weights = [
        draw(st.lists(st.floats(-1.0, P.lambda_c), min_size=int(n), max_size=int(n))) if assessed[i] else []
        for i, n in enumerate(turns.max(axis=1, initial=-1) + 1)
    ]
    base = np.array([-draw(st.floats(0.0, 3.0)) if a else draw(st.floats(-3.0, 3.0)) for a in assessed])
    return mask, turns, weights, base, assessed


@settings(max_examples=200, deadline=None)
@given(masked_batches())
def test_runs_path_equals_token_path_and_reference(batch):
    mask, turns, weights, base, assessed = batch
    runs = mask_runs(mask)
    np.testing.assert_array_equal(runs.expand(runs.turn, -1, np.int64), turns)
    np.testing.assert_array_equal(runs.turns_per_row(), turns.max(axis=1, initial=-1) + 1)
    out = run_token_advantages(runs, weights, base, assessed, P)
    assert out.dtype == np.float32 and out.shape == mask.shape
    np.testing.assert_allclose(out, batch_token_advantages(turns, weights, base, assessed, P), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out, reference(turns, weights, base, assessed), rtol=1e-6, atol=1e-7)


def test_hand_computed_runs():
    # row 0: runs [0,2) and [3,4) -> turns 0, 1; row 1: one run [1,5); the 0/1 values are the mask
    runs = mask_runs(np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]]))
    assert runs.row.tolist() == [0, 0, 1] and runs.turn.tolist() == [0, 1, 0] and runs.length.tolist() == [2, 1, 4]
    # same numbers as test_batch_on_cpu.test_hand_computed_batch's sample 0 (alpha = beta = 1), row 1 a success
    out = run_token_advantages(runs, [[-1.0, 0.3], []], [-1.0, 0.5], np.array([True, False]))
    np.testing.assert_allclose(out, [[-1, -1, 0, 0.3, 0], [0, 0.5, 0.5, 0.5, 0.5]], rtol=1e-7)


def test_missing_turn_weights_and_a_chunk_without_policy_tokens():
    with pytest.raises(ValueError, match="turn 1 but turn weights for 1 turns"):
        run_token_advantages(mask_runs(np.array([[1, 0, 1]])), [[-1.0]], [-1.0], np.array([True]))
    # regression: a chunk whose rows have no policy tokens and no weights once broke key building (width 1)
    out = batch_token_advantages(np.full((3, 4), -1), [[], [], []], [0.0, 0.0, -1.0], np.array([False, False, True]))
    np.testing.assert_array_equal(out, np.zeros((3, 4)))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int64, np.float32])
def test_runs_are_the_same_in_any_chunking_and_dtype(monkeypatch, dtype):
    """Rows go in chunks of a few MiB; a chunk of one row, of three rows (last one short) or all rows agree, on
    one thread or on an executor's, and every nonzero value counts as a policy token (2 next to 1 is one run)."""
    import verl_ext.credit.runs as runs_module

    rng = np.random.default_rng(0)
    mask = rng.integers(0, 3, size=(7, 11)) * (rng.random((7, 11)) < 0.6)
    mask[3] = 0  # a row without policy tokens
    expected = loop_turns(mask != 0)
    for chunk_bytes in (1, 3 * 11 * np.dtype(dtype).itemsize, 1 << 22):
        monkeypatch.setattr(runs_module, "_CHUNK_BYTES", chunk_bytes)
        runs = mask_runs(mask.astype(dtype))
        np.testing.assert_array_equal(runs.expand(runs.turn, -1, np.int64), expected)
        assert runs.length.sum() == (mask != 0).sum()
        with ThreadPoolExecutor(max_workers=2) as pool:  # the estimator's path: chunks on two threads
            threaded = runs_module.submit_mask_runs(mask.astype(dtype), pool).result()
        for name in ("bounds", "is_run", "row", "turn", "length"):
            np.testing.assert_array_equal(getattr(threaded, name), getattr(runs, name))
