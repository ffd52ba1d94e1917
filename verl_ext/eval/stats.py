"""Accuracy over k runs per item as both papers report it (no verl import).

ModalSearcher (App. D.2): the mean over runs ``ā`` with the 95% interval ``ā ± t_{0.975,k−1}·s/√k``, ``s`` the sample
standard deviation (``n − 1`` denominator) of the per-run accuracies; Neos reports the same mean over 5 runs. pass@1
is the mean over items of each item's fraction of correct runs; pass@k the unbiased estimator of Chen et al. (2021)
``1 − C(n−c, k)/C(n, k)`` per item (n runs recorded, c correct), averaged over items: with n = k it is the share of
items solved at least once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from verl_ext.optional import optional_import


@dataclass(frozen=True)
class Accuracy:
    items: int
    runs: int  # runs with at least one judged item
    per_run: list[float]  # accuracy of each run, run order
    mean: float
    ci95: float | None  # half-width; None with fewer than two runs
    pass_at_1: float
    pass_at_k: float
    k: int

    def as_dict(self) -> dict:
        return asdict(self)


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """``(ā, t_{0.975,k−1}·s/√k)``; the half-width is None for k < 2 (no spread to estimate)."""
    k = len(values)
    mean = sum(values) / k
    if k < 2:
        return mean, None
    student_t = optional_import("scipy.stats", "confidence intervals need scipy, in the [eval] extra: "
                                "pip install '.[eval]' in a neos-verl clone").t
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    return mean, float(student_t.ppf(0.975, k - 1)) * s / math.sqrt(k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that k of an item's n runs, drawn without replacement, hold a correct one (needs n ≥ k)."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} runs, the item has {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def accuracy(outcomes: Iterable[tuple[str, int, bool]], k: int) -> Accuracy:
    """``outcomes``: (item id, run, correct) of every judged episode."""
    by_run: dict[int, list[bool]] = defaultdict(list)
    by_item: dict[str, list[bool]] = defaultdict(list)
    for item, run, correct in outcomes:
        by_run[run].append(correct)
        by_item[item].append(correct)
    if not by_item:
        return Accuracy(0, 0, [], 0.0, None, 0.0, 0.0, k)
    per_run = [sum(v) / len(v) for _, v in sorted(by_run.items())]
    mean, ci = mean_ci95(per_run)
    p1 = sum(sum(v) / len(v) for v in by_item.values()) / len(by_item)
    complete = [v for v in by_item.values() if len(v) >= k]
    pk = sum(pass_at_k(len(v), sum(v), k) for v in complete) / len(complete) if complete else float("nan")
    return Accuracy(len(by_item), len(per_run), per_run, mean, ci, p1, pk, k)


def by_benchmark(outcomes: Iterable[tuple[str, str, int, bool]], k: int) -> Mapping[str, Accuracy]:
    """Per benchmark and ``"overall"`` (every item of every benchmark pooled, per run) from
    (benchmark, item id, run, correct)."""
    rows = list(outcomes)
    names = sorted({b for b, *_ in rows})
    table = {name: accuracy(((i, r, c) for b, i, r, c in rows if b == name), k) for name in names}
    table["overall"] = accuracy(((f"{b}/{i}", r, c) for b, i, r, c in rows), k)
    return table
