"""The recipe's default router never loses to sticky: on a small simulated grid (every workload of
``bench/bench_routing.py``, degraded replica included, x fixed and adaptive admission x both engine models) the
``+recipe=neos`` router's round is >= 0.98x sticky's. The paper-scale grid is ``bench/bench_admission.py``'s."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the bench scripts, as they run
from bench_admission import recipe_router  # noqa: E402
from bench_routing import ENGINES, WORKLOADS, parser, run_round  # noqa: E402

SMALL = ["--gpus", "8", "--groups", "4", "--group-size", "4"]  # 2 replicas, 16 trajectories a batch


ADMISSIONS = [["--in-flight", "32"], ["--in-flight", "16"], ["--in-flight", "32", "--adaptive"]]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("admission", ADMISSIONS)
def test_the_recipe_router_is_at_least_098x_sticky(engine, admission):
    default = recipe_router()
    args = parser().parse_args([*SMALL, "--engine", engine, *admission])
    for name, shape in WORKLOADS.items():
        sticky = run_round("sticky", args, 0, shape)["makespan_s"]
        ours = run_round(default, args, 0, shape)["makespan_s"]
        assert sticky / ours >= 0.98, f"{default} is {sticky / ours:.2f}x sticky on {name}"


def test_the_recipe_router_is_a_shipped_policy():
    assert recipe_router() == "sticky"  # the only policy >= 0.98x sticky everywhere (docs/routing.md)
