"""Accuracy statistics against hand-computed values: mean ± t(0.975, k−1)·s/√k over runs, pass@1, pass@k."""

from __future__ import annotations

import math

import pytest

from verl_ext.eval.stats import accuracy, by_benchmark, mean_ci95, pass_at_k

# item a right in all 5 runs, item b in runs 1 and 4: per-run accuracy [0.5, 1, 0.5, 0.5, 1]
OUTCOMES = [("a", r, True) for r in range(5)] + [("b", r, r in (1, 4)) for r in range(5)]


def test_five_runs_by_hand() -> None:
    acc = accuracy(OUTCOMES, k=5)
    assert acc.per_run == [0.5, 1.0, 0.5, 0.5, 1.0]
    # mean 0.7; squared deviations .04 .09 .04 .04 .09 sum .30, s = sqrt(.30/4) = 0.273861;
    # t(0.975, 4) = 2.776445; half-width 2.776445 * 0.273861 / sqrt(5) = 0.340044
    assert acc.mean == pytest.approx(0.7)
    assert acc.ci95 == pytest.approx(0.340044, abs=1e-6)
    assert acc.pass_at_1 == pytest.approx((1.0 + 0.4) / 2)
    assert acc.pass_at_k == pytest.approx(1.0)  # both items solved at least once in 5 runs
    assert (acc.items, acc.runs, acc.k) == (2, 5, 5)


def test_pass_at_k_unbiased_estimator() -> None:
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 4, 2) == 1.0
    with pytest.raises(ValueError, match="at least 5 runs"):
        pass_at_k(3, 1, 5)


def test_one_run_has_no_interval_and_t_quantile_for_two() -> None:
    assert mean_ci95([0.25]) == (0.25, None)
    mean, half = mean_ci95([0.0, 1.0])  # s = sqrt(0.5), t(0.975, 1) = 12.706205
    assert mean == 0.5 and half == pytest.approx(12.706205 * math.sqrt(0.5) / math.sqrt(2), rel=1e-6)


def test_per_benchmark_and_overall_pool_items_per_run() -> None:
    rows = [("x", i, r, c) for i, r, c in OUTCOMES] + [("y", "c", r, r == 0) for r in range(5)]
    table = by_benchmark(rows, k=5)
    assert table["x"].mean == pytest.approx(0.7) and table["y"].per_run == [1.0, 0, 0, 0, 0]
    # overall run 0: a, b?, c -> 1 + 0 + 1 of 3; run 1: 1 + 1 + 0; run 2: 1 + 0 + 0; run 3: 1/3; run 4: 2/3
    assert table["overall"].per_run == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3, 2 / 3])
    assert table["overall"].items == 3 and table["overall"].pass_at_k == pytest.approx(1.0)
