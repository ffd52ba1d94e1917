"""Bounded rescaling of token credit (Neos Eqs. 6-7): the scalar reference for one trajectory.

Raw credit ``Ã = b·w`` can sum to anything; Eq. 7 amplifies the negative mass (by α ≤ M) and shrinks the positive
mass (by β ≤ 1) so an assessed failure stays negative in aggregate — by at least the margin μ = η·b·L where that is
reachable — while every token stays in [−M·b, λ_c·b].
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from verl_ext.credit.params import CreditParams

# Slack on the check that raw credit lies in [−b, λ_c·b]: lets callers hand in float32 products.
_RAW_BOUND_RTOL = 1e-6


def bounded_scales(
    positive: NDArray[np.float64], negative: NDArray[np.float64], margin: NDArray[np.float64], max_amplification: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """α and β of Eq. 7, elementwise over trajectories; needs ``negative > 0`` (N = 0 is the GRPO fallback).

    Divisions run only where their quotient is below the cap, so subnormal masses cannot overflow.
    """
    alpha = np.full_like(positive, max_amplification)
    free = positive + margin < max_amplification * negative
    alpha[free] = np.maximum(1.0, (positive[free] + margin[free]) / negative[free])
    kept = np.maximum(alpha * negative - margin, 0.0)
    beta = np.ones_like(positive)
    shrink = kept < positive
    beta[shrink] = kept[shrink] / positive[shrink]
    return alpha, beta


def check_failure_advantage(base_advantage: float) -> float:
    """The GRPO advantage of an assessed failure, as a float; rescaling is defined for A_i ≤ 0 only."""
    value = float(base_advantage)
    if not math.isfinite(value) or value > 0:
        raise ValueError(f"base advantage of an assessed failure must be finite and <= 0, got {base_advantage!r}")
    return value


def check_raw_bounds(raw: NDArray[np.float64], scale: float, params: CreditParams) -> None:
    """Raw credit must be b·w with w ∈ [−1, λ_c] (Eq. 3's range); anything else is a caller bug."""
    slack = _RAW_BOUND_RTOL * scale
    if raw.size and (raw.min() < -scale - slack or raw.max() > params.lambda_c * scale + slack):
        raise ValueError(
            f"raw token credit must lie in [-b, lambda_c*b] = [{-scale}, {params.lambda_c * scale}] "
            f"(b = |A_i|), got [{raw.min()}, {raw.max()}]"
        )


def rescale_advantages(
    raw_token_adv: ArrayLike, base_advantage: float, params: CreditParams = CreditParams()
) -> NDArray[np.float64]:
    """Eq. 7 for one assessed failure: ``raw_token_adv`` holds Ã = b·w per policy token, ``base_advantage`` is A_i.

    Returns float64 advantages per policy token; with no negative credit (N = 0) every token gets A_i.
    """
    raw = np.asarray(raw_token_adv, dtype=np.float64)
    if raw.ndim != 1:
        raise ValueError(f"raw_token_adv must be 1-D (policy tokens of one trajectory), got shape {raw.shape}")
    if not np.isfinite(raw).all():
        raise ValueError("raw_token_adv contains NaN or inf")
    advantage = check_failure_advantage(base_advantage)
    scale = -advantage
    check_raw_bounds(raw, scale, params)

    pos = np.maximum(raw, 0.0)
    neg = np.maximum(-raw, 0.0)
    negative = neg.sum()
    if negative == 0:
        return np.full(raw.shape, advantage)
    margin = params.eta * scale * raw.size
    alpha, beta = bounded_scales(np.array([pos.sum()]), np.array([negative]), np.array([margin]), params.M)
    return beta[0] * pos - alpha[0] * neg
