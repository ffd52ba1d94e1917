"""Mixed-group sampler vs verl's DAPO dynamic sampling: a discrete-event simulation on one workload.

What is simulated (the same for every method, per seed):
- Questions arrive in a fixed order; question i has a pass rate p_i ~ Beta(a, b), fixed for the whole run (the policy
  does not change between batches here), and each of its trajectories succeeds with probability p_i.
- A trajectory holds one of S inference slots from start to end (turn-level asynchronous agents keep their slot while
  their tools run) and lasts a lognormal time, median 1, shape sigma, capped at ``--cap`` medians (the turn/context
  limit ends the longest ones). Durations do not depend on the outcome or on how many slots are busy (S is the
  capacity at which per-trajectory speed is flat).
- Judging, cancelling, dispatching and the trainer's polling take no time; optimisation time is not counted: a batch's
  time runs from its first admission to the moment the last selected trajectory's outcome is known and the batch can
  go to the update (for DAPO: once all in-flight requests have drained, as verl does before selecting).

Methods:
- ours: ``MixedGroupSampler`` (B, G, window 2B, 2BG in flight, 1.5G per group) driven event by event with the free
  slots; at selection every in-flight trajectory is cancelled (its slot frees at once) and the next batch starts with
  the carried questions.
- verl: verl 0.9.1's ``algorithm.filter_groups`` in the v1 sync trainer (``verl.trainer.ppo.v1.replay_buffer.
  ReplayBuffer.sample``): each step dispatches B prompts of G trajectories; every finished homogeneous group is evicted
  and earns 2 refill credits, dispatched one prompt at a time (gen_batch_size is forced to 1) while fewer than
  ``max_inflight_gen_batches`` x B prompts are pending or running; once B mixed groups are finished it stops
  dispatching, drains every request in flight, selects B groups and discards the surplus. ``max_num_gen_batches`` is
  ignored by that implementation (it logs a warning), so it is not modelled. ``max_inflight_gen_batches`` is S/(BG),
  so both methods can fill the same S slots.
- classic: the DAPO recipe's loop (verl's pre-v1 ray trainer): generate a whole batch of S/G prompts x G, wait for all
  of it, drop homogeneous groups, repeat until B mixed groups, keep the first B. Shown for scale.

Figures: median batch time, trajectories started and slot-time (the compute actually spent: durations of finished
trajectories plus the part a cancelled one ran) per batch over all (seed, batch) pairs; the ratios ours / verl are the
headline (goals: time <= 0.5x, started <= 1.3x). Simulated time is deterministic per seed: the figures do not depend
on the machine's load.
    PYTHONPATH=. .venv/bin/python bench/bench_sampler.py            # default workload, one line
    PYTHONPATH=. .venv/bin/python bench/bench_sampler.py --sweep    # three pass-rate settings
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np

from neos_core.usage import OneLineParser, positive_float, positive_int
from verl_ext.trainer.sampler import MixedGroupSampler, SamplerConfig

SWEEP = [(0.7, 1.4), (0.3, 0.9), (0.2, 0.6)]  # about 29%, 50% and 59% of groups of 8 homogeneous


@dataclass(frozen=True)
class Workload:
    groups: int
    group_size: int
    slots: int
    sigma: float
    cap: float
    beta: tuple[float, float]


class World:
    """One seed's questions (pass rates, drawn on first use) and random durations/outcomes."""

    def __init__(self, work: Workload, seed: int) -> None:
        self.work = work
        self.rng = np.random.default_rng(seed)
        self.rates: dict[str, float] = {}

    def questions(self):
        return (f"q{i}" for i in itertools.count())

    def duration(self) -> float:
        return min(float(self.rng.lognormal(0.0, self.work.sigma)), self.work.cap)

    def success(self, question_id: str) -> bool:
        if question_id not in self.rates:
            self.rates[question_id] = float(self.rng.beta(*self.work.beta))
        return bool(self.rng.random() < self.rates[question_id])


Row = tuple[float, int, float, float]  # batch time, trajectories started, homogeneous share at G, slot-time used


def run_ours(work: Workload, seed: int, batches: int) -> list[Row]:
    world = World(work, seed)
    sampler = MixedGroupSampler(SamplerConfig(groups=work.groups, group_size=work.group_size), world.questions())
    now, out = 0.0, []
    for _ in range(batches):
        start, running, tie, used = now, [], itertools.count(), 0.0
        while not sampler.ready():
            for a in sampler.admit(work.slots - len(running)):
                heapq.heappush(running, (now + world.duration(), next(tie), now, a))
            now, _, began, a = heapq.heappop(running)
            used += now - began
            sampler.finish(a.question_id, a.session_index, world.success(a.question_id))
        stats = sampler.select().stats  # cancels everything still running: all slots free again
        used += sum(now - began for _, _, began, _ in running)  # cancelled trajectories ran until now
        out.append((now - start, stats.admitted, stats.homogeneous_share, used))
    return out


def run_verl(work: Workload, seed: int, batches: int) -> list[Row]:
    """verl 0.9.1 v1 sync ReplayBuffer with filter_groups: evict homogeneous groups, refill 2 prompts each, drain."""
    world = World(work, seed)
    questions = world.questions()
    b, g = work.groups, work.group_size
    max_inflight_prompts = max(1, work.slots // (b * g)) * b
    now, out = 0.0, []
    for _ in range(batches):
        start, waiting, running, tie, used = now, deque(), [], itertools.count(), 0.0
        left: dict[str, int] = {}
        wins: dict[str, int] = {}
        counts = {"dispatched": 0, "sampleable": 0, "homogeneous": 0}

        def dispatch(n: int) -> None:
            for _ in range(n):
                q = next(questions)
                left[q], wins[q] = g, 0
                waiting.extend([q] * g)
            counts["dispatched"] += n

        dispatch(b)
        credit, draining = 0, False
        while True:
            while waiting and len(running) < work.slots:
                duration = world.duration()
                used += duration
                heapq.heappush(running, (now + duration, next(tie), waiting.popleft()))
            if draining and not left:
                break
            now, _, q = heapq.heappop(running)
            wins[q] += world.success(q)
            left[q] -= 1
            if left[q]:
                continue
            del left[q]
            homogeneous = wins[q] in (0, g)
            counts["homogeneous"] += homogeneous
            counts["sampleable"] += not homogeneous
            if counts["sampleable"] >= b:
                draining, credit = True, 0
            elif not draining:
                credit += 2 * homogeneous
                n = min(credit, max_inflight_prompts - len(left))
                if n > 0:
                    dispatch(n)
                    credit -= n
        finished = counts["homogeneous"] + counts["sampleable"]
        out.append((now - start, counts["dispatched"] * g, counts["homogeneous"] / finished, used))
    return out


def run_classic(work: Workload, seed: int, batches: int) -> list[Row]:
    """The DAPO recipe: whole generation batches of S/G prompts, wait for all, keep mixed groups, until B."""
    world = World(work, seed)
    questions = world.questions()
    b, g = work.groups, work.group_size
    gen_prompts = max(b, work.slots // g)
    now, out = 0.0, []
    for _ in range(batches):
        start, mixed, started, homogeneous, used = now, 0, 0, 0, 0.0
        while mixed < b:
            ends = []
            for q in itertools.islice(questions, gen_prompts):
                wins = sum(world.success(q) for _ in range(g))
                homogeneous += wins in (0, g)
                mixed += wins not in (0, g)
                ends.extend(world.duration() for _ in range(g))
            started += gen_prompts * g
            used += sum(ends)
            now += _makespan(ends, work.slots)
        out.append((now - start, started, homogeneous / (started // g), used))
    return out


def _makespan(durations: list[float], slots: int) -> float:
    """Time to run all durations FIFO on ``slots`` parallel slots."""
    free = [0.0] * min(slots, len(durations))
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


METHODS = {"ours": run_ours, "verl": run_verl, "classic": run_classic}


def measure(work: Workload, seeds: int, batches: int) -> dict[str, tuple[float, ...]]:
    """Per method: median batch time, started and slot-time; mean homogeneous share (over all seeds and batches)."""
    result = {}
    for name, run in METHODS.items():
        rows = [row for seed in range(seeds) for row in run(work, seed, batches)]
        result[name] = (
            statistics.median(r[0] for r in rows),
            statistics.median(r[1] for r in rows),
            statistics.fmean(r[2] for r in rows),
            statistics.median(r[3] for r in rows),
        )
    return result


def line(work: Workload, result: dict[str, tuple[float, ...]]) -> str:
    ours, verl, classic = result["ours"], result["verl"], result["classic"]
    return (
        f"Beta{work.beta} homogeneous@G ~{verl[2]:.0%} | B={work.groups} G={work.group_size} S={work.slots} "
        f"sigma={work.sigma}: time ours/verl-DAPO = {ours[0] / verl[0]:.2f}x (goal <= 0.5), "
        f"started ours/verl-DAPO = {ours[1] / verl[1]:.2f}x (goal <= 1.3), slot-time {ours[3] / verl[3]:.2f}x | "
        f"medians ours/verl/classic: time {ours[0]:.2f}/{verl[0]:.2f}/{classic[0]:.2f} median durations, "
        f"started {ours[1]:.0f}/{verl[1]:.0f}/{classic[1]:.0f}, slot-time {ours[3]:.0f}/{verl[3]:.0f}/{classic[3]:.0f}"
    )


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_sampler.py", description="Mixed-group sampler against verl's DAPO "
                      "dynamic sampling (and the classic DAPO loop): a discrete-event simulation on one workload, "
                      "batch time and trajectories started per method, with the ratios ours / verl. What is simulated "
                      "is in the script's docstring.")
    p.add_argument("--groups", type=positive_int, default=64, metavar="B",
                   help="groups per batch (default: 64, Neos Table 12)")
    p.add_argument("--group-size", type=positive_int, default=8, metavar="G",
                   help="trajectories per group (default: 8, Neos Table 12)")
    p.add_argument("--slots", type=positive_int, default=1024, metavar="S",
                   help="inference slots, the same for every method (default: 1024)")
    p.add_argument("--sigma", type=positive_float, default=1.0,
                   help="lognormal shape of trajectory durations (default: 1.0)")
    p.add_argument("--cap", type=positive_float, default=20.0, metavar="X",
                   help="longest trajectory, in median durations (default: 20)")
    p.add_argument("--beta", type=positive_float, nargs=2, default=(0.3, 0.9), metavar=("A", "B"),
                   help="question pass rates ~ Beta(A, B) (default: 0.3 0.9)")
    p.add_argument("--seeds", type=positive_int, default=5, metavar="N",
                   help="seeded runs per method; medians are printed (default: 5)")
    p.add_argument("--batches", type=positive_int, default=6, metavar="N",
                   help="consecutive batches per seed (default: 6)")
    p.add_argument("--sweep", action="store_true", help="one line per pass-rate setting of a fixed sweep, "
                   "instead of --beta")
    return p


def main() -> None:
    args = parser().parse_args()
    betas = SWEEP if args.sweep else [tuple(args.beta)]
    for beta in betas:
        work = Workload(args.groups, args.group_size, args.slots, args.sigma, args.cap, beta)
        print(line(work, measure(work, args.seeds, args.batches)), flush=True)


if __name__ == "__main__":
    main()
