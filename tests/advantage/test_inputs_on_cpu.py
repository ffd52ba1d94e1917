"""Turn of each response token from ``response_mask``, and rows built from rollout ``extra_fields``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_ext.advantage.inputs import (
    CreditRow,
    credit_inputs,
    credit_rows,
    current_credit_inputs,
    token_turns_from_mask,
)
from verl_ext.credit.labels import CREDIT_KEY, unassessed


def test_runs_of_ones_are_turns_in_order() -> None:
    mask = [
        [1, 1, 0, 0, 1, 0, 1, 1, 1, 0],  # three turns, observation tokens between, padding at the end
        [0, 0, 1, 1, 1, 1, 1, 1, 1, 1],  # one turn starting late, running to the end
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # no policy tokens
        [1, 0, 1, 0, 1, 0, 1, 0, 1, 0],  # five one-token turns
    ]
    expected = [
        [0, 0, -1, -1, 1, -1, 2, 2, 2, -1],
        [-1, -1, 0, 0, 0, 0, 0, 0, 0, 0],
        [-1] * 10,
        [0, -1, 1, -1, 2, -1, 3, -1, 4, -1],
    ]
    for given in (torch.tensor(mask), torch.tensor(mask, dtype=torch.bool), np.array(mask, dtype=np.float32)):
        out = token_turns_from_mask(given)
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, expected)


def test_mask_must_be_two_dimensional() -> None:
    with pytest.raises(ValueError, match="2-D"):
        token_turns_from_mask(np.ones(4))


def test_rows_from_extra_fields_skip_successes_and_padding() -> None:
    labels = unassessed("offline_path", 2, "no_task_path")
    extra = [{CREDIT_KEY: labels.model_dump(mode="json")}, {}, {CREDIT_KEY: labels.model_dump(mode="json")}]
    rows = credit_rows(["u1", "u1", "pad"], extra, padding=[False, False, True])
    assert rows == [CreditRow("u1", labels), CreditRow("u1", None), CreditRow("pad", None, padding=True)]
    with pytest.raises(ValueError, match="2 uids, 3 extra_fields"):
        credit_rows(["u1", "u1"], extra)


def test_context_is_scoped_to_the_block() -> None:
    assert current_credit_inputs() is None
    with credit_inputs([CreditRow("u")]) as inputs:
        assert current_credit_inputs() is inputs and inputs.rows == (CreditRow("u"),)
        with credit_inputs([]) as inner:
            assert current_credit_inputs() is inner
        assert current_credit_inputs() is inputs
    assert current_credit_inputs() is None
