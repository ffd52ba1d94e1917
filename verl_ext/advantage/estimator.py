"""The ``neos_turn_credit`` advantage estimator: verl's GRPO outcome advantage, then Neos turn credit (Eqs. 3, 6-7).

Select it with ``algorithm.adv_estimator=neos_turn_credit``; its constants live under ``algorithm.neos_credit``
(``CreditParams`` field names plus ``ablation``, a Table 5 row). verl hands the estimator no per-row data beyond
rewards, mask and uid, so the judge labels arrive through ``verl_ext.advantage.inputs.credit_inputs``, which
``TurnCreditAdvantageMixin`` enters around verl's ``_compute_advantage``. Without it only the ``outcome_only`` row can
run (it is plain GRPO); every other row fails loudly instead of silently training on GRPO.

Labels that cannot be used (judge fallbacks, a turn count that disagrees with the mask, broken Eq. 3 inputs) cost
their own row the turn credit, never the step: the row keeps A_i, is counted under ``neos_credit/fallback/<reason>``,
and one warning per step is logged when the share of judged failures that fall back exceeds
``algorithm.neos_credit.max_fallback_share`` (``verl_ext.credit.fallbacks``).
"""

from __future__ import annotations

import logging
from collections import Counter
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
from verl_ext.credit.fallbacks import (
    LABEL_RULES,
    LABEL_TURNS,
    MAX_FALLBACK_SHARE_KEY,
    POSITIVE_ADVANTAGE,
    UNJUDGED,
    FallbackCount,
    max_fallback_share,
)
from verl_ext.credit.runs import MaskRuns, submit_mask_runs
from verl_ext.credit.weight_table import WeightTable
from verl_ext.rollout.admission import SUCCESS_THRESHOLD

log = logging.getLogger(__name__)

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
    values.pop(MAX_FALLBACK_SHARE_KEY, None)  # the fallback warning's threshold: max_fallback_share_from_config
    unknown = sorted(set(values) - _PARAM_NAMES)
    if unknown:
        known = sorted(_PARAM_NAMES | {MAX_FALLBACK_SHARE_KEY})
        raise ValueError(f"unknown algorithm.{CONFIG_KEY} keys {unknown}; known: {known}")
    return CreditParams(**values)


def max_fallback_share_from_config(config: Any) -> float:
    """``algorithm.neos_credit.max_fallback_share``: the share of judged failures falling back to GRPO above which
    the estimator logs a warning (absent: ``DEFAULT_MAX_FALLBACK_SHARE``)."""
    section = None if config is None else config.get(CONFIG_KEY)
    return max_fallback_share(None if section is None else section.get(MAX_FALLBACK_SHARE_KEY))


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

    assessed: np.ndarray  # (bs,) bool: rows trained with turn credit
    rows: np.ndarray  # (F,) batch rows of those failures
    num_turns: np.ndarray  # (F,) turns each failure is labelled for
    weights: np.ndarray  # (F, max turns) Eq. 3 weights, NaN-padded
    dropped: dict[int, str]  # batch row -> why its labels were not usable (it falls back to A_i)
    first_problem: str = ""  # what was wrong with the first dropped row, for the warning

    def without(self, drop: Mapping[int, str], problem: str) -> LabelledFailures:
        """These failures with the rows ``drop`` falling back (their reasons kept)."""
        keep = ~np.isin(self.rows, list(drop))
        assessed = self.assessed.copy()
        assessed[list(drop)] = False
        return LabelledFailures(assessed, self.rows[keep], self.num_turns[keep], self.weights[keep],
                                {**self.dropped, **drop}, self.first_problem or problem)


def labelled_failures(rows: Sequence[CreditRow], index: np.ndarray, bs: int, params: CreditParams) -> LabelledFailures:
    """Check the credit rows line up with verl's batch, then Eq. 3 weights for every assessed failure at once; a row
    whose labels break an Eq. 3 input rule falls back to A_i (``label_rules``), the others keep their credit."""
    if len(rows) != bs:
        raise ValueError(f"credit inputs hold {len(rows)} rows for a batch of {bs}")
    for i, row in enumerate(rows):
        if row.uid != str(index[i]):
            raise ValueError(f"credit row {i} has uid {row.uid!r} but verl's batch row {i} has {index[i]!r}")
    assessed = np.array([row.labels is not None and row.labels.assessed for row in rows], dtype=bool)
    failures = np.flatnonzero(assessed)
    sources = [(rows[i].labels.num_turns, rows[i].labels.events, rows[i].labels.productive) for i in failures]
    table = WeightTable.from_labels(sources)
    invalid = table.invalid_rows()
    if not invalid.size:
        return LabelledFailures(assessed, failures, table.num_turns, table.weights(params), {})
    keep = np.setdiff1d(np.arange(failures.size), invalid)
    valid = WeightTable.from_labels([sources[f] for f in keep])
    labelled = LabelledFailures(assessed, failures[keep], valid.num_turns, valid.weights(params), {})
    first = int(failures[invalid[0]])
    try:
        rows[first].labels.weights(params)
        problem = "breaks an input rule of Eq. 3"
    except ValueError as e:
        problem = str(e)
    drop = {int(failures[f]): LABEL_RULES for f in invalid}
    return labelled.without(drop, f"credit row {first} (uid {rows[first].uid}): {problem}")


def turn_credit_advantages(
    base: torch.Tensor, runs: MaskRuns, rows: Sequence[CreditRow], labelled: LabelledFailures, params: CreditParams
) -> tuple[torch.Tensor, LabelledFailures, np.ndarray]:
    """(bs, len) advantages (Eq. 7 over Eq. 3 weights for assessed rows, A_i elsewhere, 0 outside the mask), the
    failures actually credited and the per-run advantages; turn i of a row is the i-th run of its response mask.

    A labelled row whose turn count disagrees with its mask (``label_turns``) or whose outcome advantage is positive
    (``positive_advantage``) falls back to A_i alone: one bad label never costs the step.
    """
    bs = base.shape[0]
    base_np = base.detach().cpu().double().numpy()
    failures = labelled.rows
    mask_turns = runs.turns_per_row()
    wrong_turns, positive = labelled.num_turns != mask_turns[failures], base_np[failures] > 0
    if (wrong_turns | positive).any():
        first = int(np.flatnonzero(wrong_turns | positive)[0])
        i, row = int(failures[first]), rows[failures[first]]
        if wrong_turns[first]:
            problem = (f"credit row {i} (uid {row.uid}) is labelled for {row.labels.num_turns} turns but its "
                       f"response_mask has {mask_turns[i]} runs of policy tokens")
        else:
            problem = f"credit row {i} (uid {row.uid}) has labels but outcome advantage {base_np[i]} > 0"
        drop = {int(r): LABEL_TURNS for r in failures[wrong_turns]}
        drop.update({int(r): POSITIVE_ADVANTAGE for r in failures[positive & ~wrong_turns]})
        labelled = labelled.without(drop, problem)
    weights = np.full((bs, labelled.weights.shape[1]), np.nan)
    weights[labelled.rows] = labelled.weights
    values = run_credit_values(runs, weights, base_np, labelled.assessed, params)
    advantages = torch.from_numpy(runs.expand(values.astype(np.float32), 0.0, np.float32))
    return advantages.to(device=base.device, dtype=base.dtype), labelled, values


def fallback_count(
    rows: Sequence[CreditRow], labelled: LabelledFailures, scores: np.ndarray, index: np.ndarray
) -> FallbackCount:
    """Failures meant for turn credit (every labelled row, and every unlabelled failure of a mixed group: its judge
    call was lost) and, by reason, those that train on A_i instead."""
    success = scores >= SUCCESS_THRESHOLD
    groups = np.asarray(index, dtype=object).astype(str)
    mixed = set(groups[success]) & set(groups[~success])
    count = FallbackCount()
    for i, row in enumerate(rows):
        if row.labels is not None:
            count.judged += 1
            if i in labelled.dropped:
                count.add([labelled.dropped[i]])
            elif not row.labels.assessed:
                count.add([row.labels.fallback_reason or "unknown"])
        elif not row.padding and not success[i] and groups[i] in mixed:
            count.judged += 1
            count.add([UNJUDGED])
    return count


def credit_metrics(
    run_values: np.ndarray, run_lengths: np.ndarray, rows: Sequence[CreditRow], labelled: LabelledFailures,
    fallbacks: FallbackCount,
) -> dict[str, float]:
    """Per-batch diagnostics: the share of rows trained with turn credit, the fallbacks (``FallbackCount.metrics``),
    the mean positive and negative advantage mass (token sums) per row, and the share of labelled failures judged
    against an in-group success rather than a verified reference (when the labels record it)."""
    n = max(1, len(rows))
    mass = run_values * run_lengths
    out = {
        "neos_credit/assessed_share": float(labelled.assessed.sum()) / n,
        **fallbacks.metrics(),
        "neos_credit/pos_adv_mass": float(np.maximum(mass, 0.0).sum()) / n,
        "neos_credit/neg_adv_mass": float(np.maximum(-mass, 0.0).sum()) / n,
    }
    references = Counter(row.labels.reference for row in rows if row.labels is not None and row.labels.reference)
    if references:  # judged against a success of the own group instead of a verified reference (Neos §3.4)
        out["neos_credit/reference/in_group_share"] = references["in_group"] / sum(references.values())
    return out


def log_fallbacks(fallbacks: FallbackCount, labelled: LabelledFailures, max_share: float) -> None:
    """At most one warning per advantage call (one per step): the fallback share is over the threshold, or some
    labels could not be used at all (a judge or data bug, whatever the share)."""
    message = fallbacks.warning(max_share)
    if labelled.dropped:
        dropped = f"{len(labelled.dropped)} labelled rows fell back to A_i, first: {labelled.first_problem}"
        message = f"{message}. {dropped}" if message else dropped
    if message:
        log.warning(message)


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
        advantages, labelled, values = turn_credit_advantages(base, runs, inputs.rows, labelled, params)
        fallbacks = fallback_count(inputs.rows, labelled, scores.result(), index)
        inputs.metrics.update(credit_metrics(values, runs.length, inputs.rows, labelled, fallbacks))
        log_fallbacks(fallbacks, labelled, max_fallback_share_from_config(config))
    return advantages, advantages
