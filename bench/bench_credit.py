"""Turn credit on a large batch (4,096 x 8,192 tokens x 30 turns) vs verl's own GRPO estimator on the same batch.

Times the general token path (``batch_token_advantages`` on a token-turn array), the run path the estimator uses
(``mask_runs`` + ``run_token_advantages`` on the int64 mask), and the registered ``neos_turn_credit`` estimator end to
end (int64 torch mask in, our GRPO base, labels -> ``WeightTable`` Eq. 3 weights, torch advantages out), and the
turn weights alone: ``turn_weights`` per failure vs ``WeightTable`` for all of them.
Run from the repository root, pinned to two cores:
    PYTHONPATH=. taskset -c 0,1 python bench/bench_credit.py [--dtype int16]
To time older code, put a copy of its ``verl_ext`` first on PYTHONPATH instead (docs/benchmarks.md, "Turn credit").
Prints one line: median wall-clock (and CPU) milliseconds of each, and the estimator's ratio to verl's GRPO.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from neos_core.usage import OneLineParser, positive_int, whole_number

if TYPE_CHECKING:  # imported where used: --help and a usage error answer without loading torch and verl
    from verl_ext.credit import JudgeEvent


def make_token_turns(rng: np.random.Generator, bs: int, length: int, turns: int) -> np.ndarray:
    """Each turn: a policy segment then a tool-observation segment (-1); padding (-1) after the last turn."""
    token_turn = np.full((bs, length), -1, dtype=np.int64)
    for i in range(bs):
        used = int(rng.integers(length // 2, length + 1))
        cuts = np.sort(rng.choice(np.arange(1, used), size=2 * turns - 1, replace=False))
        edges = np.concatenate([[0], cuts, [used]])
        for t in range(turns):
            token_turn[i, edges[2 * t] : edges[2 * t + 1]] = t
    return token_turn


def random_assessment(rng: np.random.Generator, turns: int) -> tuple[list[JudgeEvent], dict[int, float]]:
    """A causal error, a recovery, a re-derailment and a few productive turns, at random positions."""
    from verl_ext.credit import JudgeEvent

    cause, fix, again = sorted(rng.choice(turns, size=3, replace=False).tolist())
    events = [
        JudgeEvent(cause, "causal_error", float(rng.uniform()), float(rng.uniform())),
        JudgeEvent(fix, "recovery", 0.0, float(rng.uniform())),
        JudgeEvent(again, "re_derailment", float(rng.uniform()), float(rng.uniform())),
    ]
    free = sorted(set(range(turns)) - {cause, fix, again})
    productive = {int(t): float(rng.uniform()) for t in rng.choice(free, size=4, replace=False)}
    return events, productive


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall-clock ms and median CPU ms (all threads of this process), after one warm-up call.

    CPU time is printed too because on a shared machine wall-clock time also counts other processes' turns.
    """
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_credit.py", description="Time turn credit on a large batch against "
                      "verl's own GRPO estimator on the same batch: the token path, the run path, the registered "
                      "neos_turn_credit estimator end to end, and the turn weights alone; prints median milliseconds "
                      "and the estimator's ratio to GRPO.")
    p.add_argument("--batch", type=positive_int, default=4096, metavar="N", help="sequences (default: 4096)")
    p.add_argument("--length", type=positive_int, default=8192, metavar="T",
                   help="tokens per sequence, at least 4 x --turns (default: 8192)")
    p.add_argument("--turns", type=whole_number(7), default=30, metavar="N",
                   help="turns per sequence, at least 7: an assessment labels 3 events and 4 productive turns "
                   "(default: 30)")
    p.add_argument("--group", type=positive_int, default=8, metavar="G",
                   help="rollouts per question group (default: 8)")
    p.add_argument("--repeat", type=positive_int, default=7, metavar="N",
                   help="timed repetitions; the median is printed (default: 7)")
    p.add_argument("--dtype", choices=["int16", "int32", "int64"], default="int64",
                   help="dtype of the token-turn array of the token path (default: int64)")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    if args.length < 4 * args.turns:
        p.error(f"argument --length: must be >= 4 x --turns = {4 * args.turns}, got {args.length}")
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from verl_ext.advantage.estimator import compute_turn_credit_advantage
    from verl_ext.advantage.inputs import CreditRow, credit_inputs
    from verl_ext.credit import (
        CreditLabels,
        CreditParams,
        WeightTable,
        batch_token_advantages,
        mask_runs,
        run_token_advantages,
        turn_weights,
    )
    from verl_ext.credit.labels import LabelEvent

    torch.set_num_threads(2)
    rng = np.random.default_rng(0)

    token_turn = make_token_turns(rng, args.batch, args.length, args.turns).astype(args.dtype)
    response_mask = torch.from_numpy(token_turn >= 0).long()  # int64, as verl's response_mask
    last_token = args.length - 1 - np.argmax(token_turn[:, ::-1] >= 0, axis=1)
    rewards = rng.integers(0, 2, size=args.batch).astype(np.float32)
    rewards[:: args.group], rewards[1 :: args.group] = 1.0, 0.0  # every group has a success and a failure
    token_rewards = torch.zeros(args.batch, args.length)
    token_rewards[torch.arange(args.batch), torch.from_numpy(last_token)] = torch.from_numpy(rewards)
    uid = np.array([f"g{i // args.group}" for i in range(args.batch)], dtype=object)

    grpo, _ = compute_grpo_outcome_advantage(token_rewards, response_mask, uid)
    base = grpo.gather(1, torch.from_numpy(last_token)[:, None])[:, 0].double().numpy()
    failed = rewards == 0
    params = CreditParams()
    assessments = [random_assessment(rng, args.turns) if f else ([], {}) for f in failed]

    def all_turn_weights() -> list[list[float]]:
        return [turn_weights(args.turns, e, p, params) if f else [] for f, (e, p) in zip(failed, assessments)]

    weights = all_turn_weights()
    mask = response_mask.numpy()  # int64, as the estimator reads it
    token_ms, token_cpu = timed(lambda: batch_token_advantages(token_turn, weights, base, failed, params), args.repeat)
    runs_ms, runs_cpu = timed(lambda: run_token_advantages(mask_runs(mask), weights, base, failed, params), args.repeat)

    labels = [
        CreditLabels(
            assessed=True,
            judge="bench",
            num_turns=args.turns,
            events=[LabelEvent(turn=e.turn, type=e.type, severity=e.severity, confidence=e.confidence) for e in ev],
            productive=prod,
        )
        if f
        else None
        for f, (ev, prod) in zip(failed, assessments)
    ]
    rows = [CreditRow(str(u), label) for u, label in zip(uid, labels)]
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "neos_credit": {"ablation": "full"}})

    def estimator() -> None:
        with credit_inputs(rows):
            compute_turn_credit_advantage(token_rewards, response_mask, index=uid, config=config)

    est_ms, est_cpu = timed(estimator, args.repeat)
    grpo_ms, grpo_cpu = timed(lambda: compute_grpo_outcome_advantage(token_rewards, response_mask, uid), args.repeat)
    floor_ms, _ = timed(lambda: np.ones((args.batch, args.length), dtype=np.float32), args.repeat)
    weights_ms, _ = timed(all_turn_weights, 3)
    failures = [(args.turns, e, p) for f, (e, p) in zip(failed, assessments) if f]
    table_ms, _ = timed(lambda: WeightTable.from_labels(failures).weights(params), args.repeat)
    print(
        f"turn credit {args.batch}x{args.length}x{args.turns} ({int(failed.sum())} assessed failures), "
        f"median ms (cpu ms): "
        f"batch_token_advantages({args.dtype} token_turn) {token_ms:.0f} ({token_cpu:.0f}) | "
        f"mask_runs(int64)+run_token_advantages {runs_ms:.0f} ({runs_cpu:.0f}) | "
        f"neos_turn_credit estimator end to end {est_ms:.0f} ({est_cpu:.0f}) | "
        f"verl compute_grpo_outcome_advantage {grpo_ms:.0f} ({grpo_cpu:.0f}) | "
        f"estimator / verl GRPO {est_ms / grpo_ms:.2f}x wall ({est_cpu / grpo_cpu:.2f}x cpu) | "
        f"fresh float32 output alone {floor_ms:.0f} | turn weights of all failures: turn_weights per failure "
        f"{weights_ms:.0f}, WeightTable {table_ms:.1f}"
    )


if __name__ == "__main__":
    main()
