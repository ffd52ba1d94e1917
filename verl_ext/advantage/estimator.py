"""The ``neos_turn_credit`` advantage estimator: verl's GRPO outcome advantage, then Neos turn credit (Eqs. 3, 6-7).

Select it with ``algorithm.adv_estimator=neos_turn_credit``; its constants live under ``algorithm.neos_credit``
(``CreditParams`` field names plus ``ablation``, a Table 5 row). verl hands the estimator no per-row data beyond
rewards, mask and uid, so the judge labels arrive through ``verl_ext.advantage.inputs.credit_inputs``, which
``TurnCreditAdvantageMixin`` enters around verl's ``_compute_advantage``. Without it only the ``outcome_only`` row can
run (it is plain GRPO); every other row fails loudly instead of silently training on GRPO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.core_algos import register_adv_est

from verl_ext.advantage.inputs import CreditRow, current_credit_inputs, mask_array
from verl_ext.credit import CreditAblation, CreditParams
from verl_ext.credit.batch import run_credit_values
from verl_ext.credit.runs import MaskRuns, submit_mask_runs
from verl_ext.credit.weight_table import WeightTable

ESTIMATOR = "neos_turn_credit"
CONFIG_KEY = "neos_credit"  # algorithm.neos_credit: verl passes config.algorithm (a DictConfig) to estimators
_PARAM_NAMES = frozenset(f.name for f in fields(CreditParams))


def credit_params_from_config(config: Any) -> CreditParams:
    """``CreditParams`` from ``config[CONFIG_KEY]`` (DictConfig, dict or verl's AlgoConfig; absent: Table 12)."""
    section = None if config is None else config.get(CONFIG_KEY)
    if section is None:
        return CreditParams()
    values = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)
    if not isinstance(values, Mapping):
        raise TypeError(f"algorithm.{CONFIG_KEY} must be a mapping, got {section!r}")
    unknown = sorted(set(values) - _PARAM_NAMES)
    if unknown:
        raise ValueError(f"unknown algorithm.{CONFIG_KEY} keys {unknown}; known: {sorted(_PARAM_NAMES)}")
    return CreditParams(**values)


def row_scores(token_level_rewards: torch.Tensor) -> np.ndarray:
    """(bs,) float64 sum of each row's token rewards, summed by torch as verl's GRPO sums them."""
    return token_level_rewards.sum(dim=-1).detach().cpu().double().numpy()


def outcome_advantage(
    token_level_rewards: torch.Tensor, index: np.ndarray, epsilon: float, norm_adv_by_std_in_grpo: bool
) -> torch.Tensor:
    """(bs,) GRPO advantage A_i per row, with the semantics of verl's ``compute_grpo_outcome_advantage``."""
    scores = row_scores(token_level_rewards)
    return grouped_advantage(scores, index, epsilon, norm_adv_by_std_in_grpo, like=token_level_rewards)


def grouped_advantage(
    scores: np.ndarray, index: np.ndarray, epsilon: float, norm_adv_by_std_in_grpo: bool, like: torch.Tensor
) -> torch.Tensor:
    """GRPO advantage from the rows' scores, as a tensor of ``like``'s dtype and device.

    Same statistics as verl (group mean, unbiased std, ``epsilon`` added to the std; a group of one has mean 0 and
    std 1), computed with one ``np.unique`` and ``bincount`` instead of verl's Python loop over rows, which alone cost
    more than the whole credit computation on a 4,096-row batch. ``test_estimator_on_cpu`` pins equality with verl.
    """
    _, group = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    count = np.bincount(group)
    mean = np.bincount(group, weights=scores) / count
    deviation = scores - mean[group]
    std = np.sqrt(np.bincount(group, weights=deviation**2) / np.maximum(count - 1, 1))
    single = count == 1
    mean[single], std[single] = 0.0, 1.0
    advantage = scores - mean[group]
    if norm_adv_by_std_in_grpo:
        advantage = advantage / (std[group] + epsilon)
    return torch.from_numpy(advantage).to(dtype=like.dtype, device=like.device)


@dataclass(frozen=True)
class LabelledFailures:
    """The batch's assessed failures and their Eq. 3 weights, computed from the labels before the mask is read."""

    assessed: np.ndarray  # (bs,) bool
    rows: np.ndarray  # (F,) batch rows of the assessed failures
    num_turns: np.ndarray  # (F,) turns each failure is labelled for
    weights: np.ndarray | None  # (F, max turns) Eq. 3 weights, NaN-padded; None when the labels break a rule
    error: ValueError | None  # that rule's error, raised only after the shape checks against the mask


def labelled_failures(rows: Sequence[CreditRow], index: np.ndarray, bs: int, params: CreditParams) -> LabelledFailures:
    """Check the credit rows line up with verl's batch, then Eq. 3 weights for every assessed failure at once."""
    if len(rows) != bs:
        raise ValueError(f"credit inputs hold {len(rows)} rows for a batch of {bs}")
    for i, row in enumerate(rows):
        if row.uid != str(index[i]):
            raise ValueError(f"credit row {i} has uid {row.uid!r} but verl's batch row {i} has {index[i]!r}")
    assessed = np.array([row.labels is not None and row.labels.assessed for row in rows], dtype=bool)
    failures = np.flatnonzero(assessed)
    labels = [rows[i].labels for i in failures]
    table = WeightTable.from_labels([(label.num_turns, label.events, label.productive) for label in labels])
    try:
        weights, error = table.weights(params), None
    except ValueError as label_error:
        weights, error = None, label_error
    return LabelledFailures(assessed, failures, table.num_turns, weights, error)


def turn_credit_advantages(
    base: torch.Tensor, runs: MaskRuns, rows: Sequence[CreditRow], labelled: LabelledFailures, params: CreditParams
) -> tuple[torch.Tensor, dict[str, float]]:
    """(bs, len) advantages (Eq. 7 over Eq. 3 weights for assessed rows, A_i elsewhere, 0 outside the mask) and
    their ``credit_metrics``; turn i of a row is the i-th run of its response mask."""
    bs = base.shape[0]
    base_np = base.detach().cpu().double().numpy()
    failures = labelled.rows
    mask_turns = runs.turns_per_row()
    wrong_turns, positive = labelled.num_turns != mask_turns[failures], base_np[failures] > 0
    if (wrong_turns | positive).any():
        first = int(np.flatnonzero(wrong_turns | positive)[0])
        i, row = int(failures[first]), rows[failures[first]]
        if wrong_turns[first]:
            raise ValueError(
                f"credit row {i} (uid {row.uid}) is labelled for {row.labels.num_turns} turns but its response_mask "
                f"has {mask_turns[i]} runs of policy tokens"
            )
        raise ValueError(f"credit row {i} (uid {row.uid}) has labels but outcome advantage {base_np[i]} > 0")
    if labelled.error is not None:
        raise labelled.error
    weights = np.full((bs, labelled.weights.shape[1]), np.nan)
    weights[failures] = labelled.weights
    values = run_credit_values(runs, weights, base_np, labelled.assessed, params)
    advantages = torch.from_numpy(runs.expand(values.astype(np.float32), 0.0, np.float32))
    return advantages.to(device=base.device, dtype=base.dtype), credit_metrics(values, runs.length, rows)


def credit_metrics(run_values: np.ndarray, run_lengths: np.ndarray, rows: Sequence[CreditRow]) -> dict[str, float]:
    """Per-batch diagnostics from per-run advantages: shares of assessed / fallback rows, and the mean positive and
    negative advantage mass (token sums) per row."""
    n = max(1, len(rows))
    mass = run_values * run_lengths
    return {
        "neos_credit/assessed_share": sum(r.labels is not None and r.labels.assessed for r in rows) / n,
        "neos_credit/fallback_share": sum(r.labels is not None and not r.labels.assessed for r in rows) / n,
        "neos_credit/pos_adv_mass": float(np.maximum(mass, 0.0).sum()) / n,
        "neos_credit/neg_adv_mass": float(np.maximum(-mass, 0.0).sum()) / n,
    }


@register_adv_est(ESTIMATOR)
def compute_turn_credit_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator entry point; ``norm_adv_by_std_in_grpo`` is read from ``config`` as verl's GRPO does."""
    if index is None:
        raise ValueError(f"{ESTIMATOR} needs the uid of each row (verl passes it as index)")
    params = credit_params_from_config(config)
    norm = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    inputs = current_credit_inputs()
    if inputs is None:
        if params.ablation is not CreditAblation.OUTCOME_ONLY:
            raise RuntimeError(
                f"{ESTIMATOR} with algorithm.{CONFIG_KEY}.ablation={params.ablation.value} needs per-row judge labels "
                "and got none: run it under a trainer with verl_ext.advantage.trainer_mixin.TurnCreditAdvantageMixin "
                "(which enters verl_ext.advantage.inputs.credit_inputs), or set the ablation to outcome_only"
            )
        advantages = outcome_advantage(token_level_rewards, index, epsilon, norm)[:, None] * response_mask
    else:
        # Order matters on two cores. The label work is Python and holds the GIL, so it runs beside the one GIL-free
        # torch reduction of the rewards; the mask pass (numpy on two threads) starts only after it, because threads
        # that must retake the GIL between numpy calls stall behind Python on the main thread (run beside the label
        # work, it cost ~9% more wall and CPU time on the benchmark batch, docs/benchmarks.md).
        with ThreadPoolExecutor(max_workers=2) as pool:
            scores = pool.submit(row_scores, token_level_rewards)
            labelled = labelled_failures(inputs.rows, index, token_level_rewards.shape[0], params)
            pending = submit_mask_runs(mask_array(response_mask), pool)
            base = grouped_advantage(scores.result(), index, epsilon, norm, like=token_level_rewards)
            runs = pending.result()
        advantages, metrics = turn_credit_advantages(base, runs, inputs.rows, labelled, params)
        inputs.metrics.update(metrics)
    return advantages, advantages
