"""Adaptive admission vs the fixed in-flight limits, and the recipe's router vs sticky, on both engine models.

One rollout round per cell of ``bench_routing``'s simulation (its docstring and docs/routing.md give every assumption),
with the production sampler, router and admission controller (``verl_ext.rollout.admission_control``):

- Admission: round time under fixed 1,024 (Neos Table 12's 2BG) and 512 in flight and under adaptive admission (upper
  bound 1,024; measured in a round that follows one of another seed, as every training round but the first starts
  from the previous round's controller; ``--cold`` measures the first), with the recipe's router, in the default
  (``uniform``), ``skewed`` and ``long`` regimes, on the reserve-at-admission engine and on vLLM's on-demand blocks
  with recompute preemption. Printed: adaptive vs fixed 1,024 and vs the better fixed limit.
- Router: the recipe's router (and ``--all-policies``: every policy) vs sticky in every workload, ``degraded`` (one
  replica 3x slower) included, x every admission setting x engine: the rule is >= 0.98x sticky everywhere.

The recipe's router is read from ``recipes/recipe/neos.yaml``. ``--quick``: one seed (default three, medians).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import yaml

from bench_routing import ENGINES, POLICIES, WORKLOADS, parser as round_parser, run_round
from neos_core.usage import OneLineParser, positive_int, subset

ROOT = Path(__file__).resolve().parents[1]
ADMISSIONS = ("1024", "512", "adaptive")
REGIMES = ("uniform", "skewed", "long")
RULE = 0.98


def recipe_router() -> str:
    """The policy of the router YAML ``+recipe=neos`` names (``${neos_path:routers/X.yaml}``)."""
    recipe = yaml.safe_load((ROOT / "recipes/recipe/neos.yaml").read_text())
    path = recipe["actor_rollout_ref"]["rollout"]["router_config_path"]
    name = path.split("routers/")[1].rstrip("}")
    return yaml.safe_load((ROOT / "recipes/routers" / name).read_text())["policy"]


def makespan(policy: str, workload: str, engine: str, admission: str, seeds: int, cold: bool) -> tuple[float, float]:
    """Median round time over seeds, and the adaptive limit's mean (the fixed limit otherwise)."""
    argv = ["--engine", engine, "--in-flight", "512" if admission == "512" else "1024"]
    argv += ["--adaptive"] * (admission == "adaptive") + ["--cold"] * cold
    args = round_parser().parse_args(argv)
    runs = [run_round(policy, args, seed, WORKLOADS[workload]) for seed in range(seeds)]
    return statistics.median(r["makespan_s"] for r in runs), statistics.median(r["limit"] for r in runs)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_admission.py", description="Adaptive admission vs fixed in-flight "
                      "limits and the recipe's router vs sticky, simulated on both engine models.")
    p.add_argument("--quick", action="store_true", help="one seed (a few minutes on 2 cores)")
    p.add_argument("--seeds", type=positive_int, default=3, metavar="N", help="seeds a cell, medians (default: 3)")
    p.add_argument("--engines", type=subset(ENGINES), default=list(ENGINES), metavar="E,E",
                   help=f"comma-separated subset of {','.join(ENGINES)} (default: both)")
    p.add_argument("--all-policies", action="store_true",
                   help="the router part for every policy, not only the recipe's")
    p.add_argument("--cold", action="store_true", help="adaptive admission's first round (no previous round)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    default = recipe_router()
    cache: dict[tuple[str, str, str, str], tuple[float, float]] = {}

    def cell(policy: str, workload: str, engine: str, admission: str) -> tuple[float, float]:
        key = (policy, workload, engine, admission)
        if key not in cache:
            cache[key] = makespan(policy, workload, engine, admission, seeds, args.cold)
        return cache[key]

    t0 = time.perf_counter()
    print(f"recipe router: {default}; medians of {seeds} seed(s); adaptive: {'first' if args.cold else 'second'} round")
    print("| engine | workload | fixed 1,024 s | fixed 512 s | adaptive s (mean limit) | vs 1,024 | vs better fixed |")
    print("|---|---|---|---|---|---|---|")
    worst = {}
    for engine in args.engines:
        for workload in REGIMES:
            fixed_1024 = cell(default, workload, engine, "1024")[0]
            fixed_512 = cell(default, workload, engine, "512")[0]
            adaptive, limit = cell(default, workload, engine, "adaptive")
            worst[(engine, workload)] = min(fixed_1024, fixed_512) / adaptive
            print(
                f"| {engine} | {workload} | {fixed_1024:.0f} | {fixed_512:.0f} | {adaptive:.0f} ({limit:.0f}) | "
                f"{fixed_1024 / adaptive:.2f}x | {worst[(engine, workload)]:.2f}x |",
                flush=True,
            )
    policies = [p for p in POLICIES if p != "sticky"] if args.all_policies else [default]
    print("\n| engine | workload | admission | " + " | ".join(f"{p} vs sticky" for p in policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    lowest = {p: (float("inf"), "") for p in policies}
    for engine in args.engines:
        for workload in (*REGIMES, "degraded"):
            for admission in ADMISSIONS:
                sticky = cell("sticky", workload, engine, admission)[0]
                ratios = {p: sticky / cell(p, workload, engine, admission)[0] for p in policies}
                for p, r in ratios.items():
                    lowest[p] = min(lowest[p], (r, f"{engine}/{workload}/{admission}"))
                print(f"| {engine} | {workload} | {admission} | " + " | ".join(f"{r:.2f}x" for r in ratios.values())
                      + " |", flush=True)
    print()
    for engine in args.engines:
        gain = cell(default, "long", engine, "1024")[0] / cell(default, "long", engine, "adaptive")[0]
        met = "met" if gain >= 1.3 else "not met"
        print(f"goal, long regime on {engine}: adaptive {gain:.2f}x fixed 1,024 (>= 1.3x: {met})")
    slowest = min(worst.values())
    print(f"goal, every regime: adaptive >= {slowest:.2f}x the better fixed limit (>= 0.95x: "
          f"{'met' if slowest >= 0.95 else 'not met'})")
    for p, (r, where) in lowest.items():
        print(f"rule, {p} vs sticky: lowest {r:.2f}x at {where} (>= {RULE}x: {'met' if r >= RULE else 'not met'})")
    print(f"({time.perf_counter() - t0:.0f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
