"""Turn-level routing at the paper's scale: a discrete-event simulation of one rollout round per routing policy.

Every policy runs the same seeded workload through the same replicas; decisions come from the production router
(``verl_ext.rollout.routing.TurnRouter``). Printed per workload and policy: round makespan, replica idle fraction,
prefill tokens computed and the share of them recomputed (an episode's own earlier context prefilled again because
its turn went to a replica that did not hold it), and the makespan ratio sticky / policy.

What it assumes (defaults; every number is a flag):

- 32 policy GPUs as rollout replicas of ``--tp`` GPUs each (default TP 2: 16 replicas of a 9B model).
- A round collects B*G = 512 finished trajectories (B=64 groups of G=8, Neos Table 12) while keeping up to
  ``--in-flight`` trajectories running (the adaptive sampler's admission limit 2BG = 1,024; a finished trajectory's
  slot takes a new one); the round ends at the 512th finish, the rest are cancelled at the policy boundary.
  ``--in-flight 512`` is a plain batch: the round waits for its slowest trajectory.
- Trajectories (our data generation's expert episodes, ``sft.jsonl`` of ``python -m data_gen neos``: median 8 turns,
  p90 12, max 15; observations median 323 tokens, log-sd 0.95; system prompt with tool schemas 1,310 tokens):
  a group's 8 trajectories share a 1,310 + 400 (question image) token prefix; turns ~ lognormal(median 8,
  ``--turn-sigma``) capped at 50; each turn generates ~ lognormal(median 300, 0.5) tokens (the expert's ~40-token
  call plus reasoning, assumed); observations ~ lognormal(median 323, 0.95) capped at 8,192; the ``skewed``
  workload draws a per-trajectory observation scale ~ lognormal(0, 1) and a wider turn spread (sigma 0.8): a few
  trajectories grow to ~100k-token contexts. Contexts stop at 131,072 tokens. Tool latency ~ lognormal(median 2 s,
  sigma 1).
- Replicas batch continuously: each step decodes one token for every running request and prefills up to 8,192
  uncached prompt tokens (chunked prefill). Step time = 8 ms + 2.2e-8 s per context token of the decoding requests
  (KV reads, 9B GQA on 2 GPUs) + 2.3e-5 s per prefilled token. Each replica has a KV pool of 800k tokens: a request
  is admitted (FCFS) when its prompt + generation fit beside the running ones; the rest of the pool is that
  replica's prefix cache (LRU by block of 256 tokens, evicted as running requests need room). Prefill cost is the
  prompt tokens not in the chosen replica's cache.
- Routing decisions take no time; the router's prefix mirror and the engine's cache use the same block keys.
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from data_gen.common.usage import OneLineParser, nonnegative_float, nonnegative_int, positive_float, positive_int
from verl_ext.rollout.routing import PrefixMirror, RouterSettings, TurnRouter

CONTEXT_LIMIT = 131_072
PREFIX_TOKENS = 1_310 + 400
BLOCK = 256
MAX_MACRO_STEPS = 16  # decode steps simulated at once when nothing else changes (an arrival waits at most this)


@dataclass
class Cost:
    step_s: float = 8e-3
    kv_s_per_token: float = 2.2e-8
    prefill_s_per_token: float = 2.3e-5
    prefill_chunk: int = 8192
    kv_tokens: int = 800_000


@dataclass
class Trajectory:
    idx: int
    group: int
    gens: list[int]
    observations: list[int]
    tool_s: list[float]
    context: int = PREFIX_TOKENS
    turn: int = 0
    computed: int = 0  # tokens of this trajectory's context computed so far (its own history)

    def keys(self, length: int) -> list[tuple]:
        prefix_blocks = PREFIX_TOKENS // BLOCK
        return [("g", self.group, i) if i < prefix_blocks else ("t", self.idx, i) for i in range(length // BLOCK)]


@dataclass
class Request:
    traj: Trajectory
    prompt: int
    gen: int
    prefill_left: int
    generated: int = 0


@dataclass
class Replica:
    rid: str
    cache: PrefixMirror
    queue: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    reserved: int = 0
    busy_s: float = 0.0
    stepping: bool = False


class Workload:
    def __init__(self, kind: str, seed: int, turn_sigma: float | None, tool_sigma: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.skewed = kind == "skewed"
        self.turn_sigma = turn_sigma if turn_sigma is not None else (0.8 if self.skewed else 0.31)
        self.tool_sigma = tool_sigma
        self.made = 0

    def next(self, group_size: int) -> Trajectory:
        r = self.rng
        turns = int(min(50, max(1, round(8 * math.exp(self.turn_sigma * r.standard_normal())))))
        scale = math.exp(r.standard_normal()) if self.skewed else 1.0
        gens = [int(max(16, 300 * math.exp(0.5 * r.standard_normal()))) for _ in range(turns)]
        obs = [int(min(8192, max(16, scale * 323 * math.exp(0.95 * r.standard_normal())))) for _ in range(turns)]
        tools = [2.0 * math.exp(self.tool_sigma * r.standard_normal()) for _ in range(turns)]
        t = Trajectory(self.made, self.made // group_size, gens, obs, tools)
        self.made += 1
        return t


class Round:
    def __init__(self, policy: str, args: argparse.Namespace, seed: int, kind: str) -> None:
        self.args, self.cost = args, Cost(kv_tokens=args.kv_tokens)
        self.replicas = {
            f"r{i}": Replica(f"r{i}", PrefixMirror(self.cost.kv_tokens // BLOCK)) for i in range(args.gpus // args.tp)
        }
        settings = RouterSettings(
            policy=policy,
            block_tokens=BLOCK,
            balance_abs_threshold=args.abs_threshold,
            balance_rel_threshold=args.rel_threshold,
            cache_capacity_tokens=args.mirror_tokens,
            seed=seed,
        )
        self.router = TurnRouter(settings, self.replicas)
        self.workload = Workload(kind, seed, args.turn_sigma, args.tool_sigma)
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.finished = 0
        self.started = 0
        self.prefill = 0
        self.recomputed = 0
        self.prompt_tokens = 0

    def push(self, at: float, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def start_trajectory(self) -> None:
        self.started += 1
        self.arrive(self.workload.next(self.args.group_size))

    def arrive(self, traj: Trajectory) -> None:
        keys = traj.keys(traj.context)
        rid = self.router.route(str(traj.idx), keys, traj.context).replica
        replica = self.replicas[rid]
        gen = min(traj.gens[traj.turn], CONTEXT_LIMIT - traj.context)
        replica.queue.append(Request(traj, traj.context, max(1, gen), 0))
        if not replica.stepping:
            self.step(replica)

    def admit(self, replica: Replica) -> None:
        cost = self.cost
        while replica.queue:
            req = replica.queue[0]
            need = req.prompt + req.gen
            if replica.running and replica.reserved + need > cost.kv_tokens:
                break  # FCFS: the head waits for room
            replica.queue.popleft()
            keys = req.traj.keys(req.prompt)
            cached = min(req.prompt, replica.cache.match(keys) * BLOCK)
            req.prefill_left = req.prompt - cached
            self.prefill += req.prefill_left
            self.prompt_tokens += req.prompt
            self.recomputed += max(0, min(req.traj.computed, req.prompt) - max(cached, PREFIX_TOKENS))
            replica.reserved += need
            replica.running.append(req)
            replica.cache.capacity = max(1, (cost.kv_tokens - replica.reserved) // BLOCK)
            replica.cache.insert(keys)

    def step(self, replica: Replica) -> None:
        self.admit(replica)
        if not replica.running:
            replica.stepping = False
            return
        replica.stepping = True
        cost = self.cost
        prefilling = [r for r in replica.running if r.prefill_left > 0]
        decoding = [r for r in replica.running if r.prefill_left == 0]
        kv = sum(r.prompt + r.generated for r in decoding)
        if prefilling:
            steps, budget = 1, cost.prefill_chunk
            for r in prefilling:
                take = min(budget, r.prefill_left)
                r.prefill_left -= take
                budget -= take
                if budget == 0:
                    break
            prefilled = cost.prefill_chunk - budget
        else:
            steps = min(MAX_MACRO_STEPS, min(r.gen - r.generated for r in decoding))
            prefilled = 0
        dt = steps * (cost.step_s + cost.kv_s_per_token * (kv + steps * len(decoding) / 2))
        dt += cost.prefill_s_per_token * prefilled
        for r in decoding:
            r.generated += steps
        replica.busy_s += dt
        self.push(self.now + dt, "step", replica)

    def step_done(self, replica: Replica) -> None:
        done = [r for r in replica.running if r.prefill_left == 0 and r.generated >= r.gen]
        for req in done:
            replica.running.remove(req)
            replica.reserved -= req.prompt + req.gen
            replica.cache.capacity = max(1, (self.cost.kv_tokens - replica.reserved) // BLOCK)
            traj = req.traj
            self.router.release(replica.rid, str(traj.idx))
            traj.context = req.prompt + req.gen
            traj.computed = traj.context
            replica.cache.insert(traj.keys(traj.context))
            traj.turn += 1
            obs = traj.observations[traj.turn - 1]
            if traj.turn >= len(traj.gens) or traj.context + obs + 16 >= CONTEXT_LIMIT:
                self.finish()
            else:
                self.push(self.now + traj.tool_s[traj.turn - 1], "tool", (traj, obs))
        self.step(replica)

    def finish(self) -> None:
        self.finished += 1
        if self.args.in_flight > self.args.groups * self.args.group_size:  # the sampler refills the freed slot
            self.start_trajectory()

    def run(self) -> dict[str, float]:
        for _ in range(self.args.in_flight):
            self.start_trajectory()
        target = self.args.groups * self.args.group_size
        while self.finished < target:
            self.now, _, kind, payload = heapq.heappop(self.events)
            if kind == "step":
                self.step_done(payload)
            else:
                traj, obs = payload
                traj.context += obs
                self.arrive(traj)
        makespan = self.now
        busy = sum(min(r.busy_s, makespan) for r in self.replicas.values())  # a step may end after the round
        return {
            "makespan_s": makespan,
            "idle": max(0.0, 1 - busy / (makespan * len(self.replicas))),
            "prefill_tokens": self.prefill,
            "recomputed_tokens": self.recomputed,
            "recomputed_share": self.recomputed / max(1, self.prefill),
            "started": self.started,
        }


POLICIES = ("sticky", "least_loaded", "cache_aware")
WORKLOADS = ("uniform", "skewed")


def _subset(allowed: tuple[str, ...]):
    """argparse ``type`` for a comma-separated subset of ``allowed``, in the order given."""

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items or set(items) - set(allowed):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(allowed)}, got {text!r}")
        return items

    return parse


def parser() -> argparse.ArgumentParser:
    router = RouterSettings()
    p = OneLineParser(prog="python bench/bench_routing.py", description="Turn-level routing at the paper's scale: a "
                      "discrete-event simulation of one rollout round per routing policy, with the production router's "
                      "decisions; prints makespan, idle share, prefill recomputed and the ratio sticky / policy. The "
                      "assumptions are in the script's docstring; every number is a flag.")
    p.add_argument("--gpus", type=positive_int, default=32, metavar="N", help="policy GPUs (default: 32)")
    p.add_argument("--tp", type=positive_int, default=2, metavar="N",
                   help="tensor parallelism: GPUs per replica, dividing --gpus (default: 2)")
    p.add_argument("--groups", type=positive_int, default=64, metavar="B",
                   help="question groups per round (default: 64, Neos Table 12)")
    p.add_argument("--group-size", type=positive_int, default=8, metavar="G",
                   help="trajectories per group (default: 8, Neos Table 12)")
    p.add_argument("--in-flight", type=positive_int, default=1024, metavar="N",
                   help="trajectories kept running, the sampler's admission limit 2BG; B*G is a plain batch "
                   "(default: 1024)")
    p.add_argument("--workloads", type=_subset(WORKLOADS), default=list(WORKLOADS), metavar="W,W",
                   help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    p.add_argument("--policies", type=_subset(POLICIES), default=list(POLICIES), metavar="P,P",
                   help=f"comma-separated subset of {','.join(POLICIES)}; sticky is the ratios' baseline "
                   "(default: all)")
    p.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                   help="seeded workloads per policy; medians are printed (default: 3)")
    p.add_argument("--turn-sigma", type=nonnegative_float, default=None, metavar="S",
                   help="log-sd of turns per trajectory (default: 0.31 uniform, 0.8 skewed)")
    p.add_argument("--tool-sigma", type=nonnegative_float, default=1.0, metavar="S",
                   help="log-sd of tool latency around its 2 s median (default: 1.0)")
    p.add_argument("--kv-tokens", type=positive_int, default=Cost.kv_tokens, metavar="N",
                   help=f"KV pool per replica, tokens (default: {Cost.kv_tokens})")
    p.add_argument("--abs-threshold", type=nonnegative_int, default=router.balance_abs_threshold, metavar="N",
                   help="router: tokens of work a replica must exceed the least-loaded one's by before a turn moves "
                   f"(default: {router.balance_abs_threshold})")
    p.add_argument("--rel-threshold", type=positive_float, default=router.balance_rel_threshold, metavar="X",
                   help="router: and times the least-loaded one's work, at least 1 "
                   f"(default: {router.balance_rel_threshold})")
    p.add_argument("--mirror-tokens", type=positive_int, default=router.cache_capacity_tokens, metavar="N",
                   help=f"router: prefix-mirror capacity per replica, tokens (default: {router.cache_capacity_tokens})")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.gpus % args.tp:
        p.error(f"--gpus {args.gpus} must be a multiple of --tp {args.tp}")
    if args.rel_threshold < 1:
        p.error(f"argument --rel-threshold: must be >= 1, got {args.rel_threshold}")
    policies = args.policies
    print(
        f"{args.gpus // args.tp} replicas x TP {args.tp}; round = {args.groups * args.group_size} finished "
        f"trajectories, {args.in_flight} in flight; medians of {args.seeds} seeds"
    )
    print("| workload | policy | makespan s | vs sticky | idle | prefill Mtok | recomputed | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in args.workloads:
        base = None
        for policy in policies:
            t0 = time.perf_counter()
            runs = [Round(policy, args, seed, kind).run() for seed in range(args.seeds)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            if policy == "sticky":
                base = med["makespan_s"]
            ratio = f"{base / med['makespan_s']:.2f}x" if base else "-"
            print(
                f"| {kind} | {policy} | {med['makespan_s']:.0f} | {ratio} | {med['idle']:.1%} | "
                f"{med['prefill_tokens'] / 1e6:.1f} | {med['recomputed_share']:.1%} | {time.perf_counter() - t0:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
