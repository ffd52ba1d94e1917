"""Rejection rates per filter and throughput per stage, the figures both pipelines' ``stats.json`` report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any


def filter_rates(judged: Sequence[Any], filters: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per filter, in pipeline order: how many entered it, how many it rejected, and the rate (rejected /
    entering). ``judged`` are records with ``status`` and ``filter`` (infrastructure errors already left out)."""
    rejected = Counter(o.filter for o in judged if o.status == "rejected")
    entering, out = len(judged), {}
    for name in filters:
        out[name] = {"entering": entering, "rejected": rejected[name],
                     "rate": round(rejected[name] / entering, 4) if entering else 0.0}
        entering -= rejected[name]
    return out


def stage_rates(timed: Sequence[Any], counted: Sequence[Any], stages: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per stage: the records of ``counted`` that went through it, the wall seconds all of ``timed`` spent in it
    (``seconds[stage]``), and questions per minute."""
    out = {}
    for stage in stages:
        spent = sum(o.seconds.get(stage, 0.0) for o in timed)
        n = sum(1 for o in counted if stage in o.seconds)
        out[stage] = {"questions": n, "seconds": round(spent, 2),
                      "per_minute": round(60 * n / spent, 1) if spent else None}
    return out
