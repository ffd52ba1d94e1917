"""Per-row credit inputs for the estimator, and the turn of every response token.

verl calls an advantage estimator with ``token_level_rewards, response_mask, config, index`` only, so the rows'
credit labels travel beside that call: the trainer enters ``credit_inputs(rows)`` around verl's own
``_compute_advantage`` and the estimator reads ``current_credit_inputs()``. A context variable (not a module global)
scopes the rows to that one call; the uids let the estimator check the rows line up with verl's ``index``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.credit.runs import mask_runs


@dataclass(frozen=True)
class CreditRow:
    """One batch row: its verl uid (group) and its labels, or None (a success, or never judged); ``padding`` rows
    (verl's copies filling a batch) carry no credit and are not counted as unjudged failures."""

    uid: str
    labels: CreditLabels | None = None
    padding: bool = False


@dataclass
class CreditInputs:
    """What one advantage call gets from the trainer, and the metrics the estimator hands back."""

    rows: tuple[CreditRow, ...]
    metrics: dict[str, float] = field(default_factory=dict)


_CURRENT: contextvars.ContextVar[CreditInputs | None] = contextvars.ContextVar("neos_credit_inputs", default=None)


@contextmanager
def credit_inputs(rows: Sequence[CreditRow]) -> Iterator[CreditInputs]:
    """Make ``rows`` (in batch order) visible to the estimator inside this block."""
    inputs = CreditInputs(rows=tuple(rows))
    token = _CURRENT.set(inputs)
    try:
        yield inputs
    finally:
        _CURRENT.reset(token)


def current_credit_inputs() -> CreditInputs | None:
    return _CURRENT.get()


def mask_array(response_mask: Any) -> NDArray:
    """``response_mask`` (a torch tensor on any device, or a numpy array) as a numpy array of its own dtype.

    No bool conversion here: ``mask_runs`` tests ``!= 0`` chunk by chunk, which on verl's int64 mask saves a
    whole-batch pass.
    """
    if hasattr(response_mask, "detach"):  # torch, without importing it here
        response_mask = response_mask.detach().cpu().numpy()
    return np.asarray(response_mask)


def token_turns_from_mask(response_mask: Any) -> NDArray[np.int32]:
    """``(bs, len)`` turn of each response token: the i-th maximal run of 1s in a row is turn i, −1 elsewhere.

    For consumers that want the token -> turn map (``batch_token_advantages``, diagnostics); the estimator itself
    works on the runs (``mask_runs``) and never materialises it.
    """
    runs = mask_runs(mask_array(response_mask))
    return runs.expand(runs.turn, -1, np.int32)


def credit_rows(
    uids: Sequence[Any], extra_fields: Sequence[Any], padding: Sequence[bool] | None = None
) -> list[CreditRow]:
    """Rows from the per-trajectory ``extra_fields`` dicts a rollout left (labels under ``CREDIT_KEY``).

    Padding rows (verl copies a real row to fill a batch) never carry credit, whatever they copied.
    """
    if len(uids) != len(extra_fields) or (padding is not None and len(padding) != len(uids)):
        raise ValueError(f"got {len(uids)} uids, {len(extra_fields)} extra_fields, {padding and len(padding)} tags")
    rows = []
    for i, (uid, extra) in enumerate(zip(uids, extra_fields)):
        raw = extra.get(CREDIT_KEY) if isinstance(extra, dict) else None
        pad = padding is not None and bool(padding[i])
        labels = None if raw is None or pad else CreditLabels.model_validate(raw)
        rows.append(CreditRow(uid=str(uid), labels=labels, padding=pad))
    return rows
