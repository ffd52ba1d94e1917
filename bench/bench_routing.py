"""Turn-level routing at the paper's scale: a discrete-event simulation of one rollout round per routing policy.

Every policy runs the same seeded workload through the same replicas; decisions come from the production router
(``verl_ext.rollout.routing.TurnRouter``) and the round is driven by the production sampler
(``verl_ext.trainer.sampler.MixedGroupSampler``). Printed per workload and policy: round makespan, replica idle
fraction, mean KV-queue wait per turn, prefill tokens computed and the share of them recomputed (an episode's own
earlier context prefilled again because its turn went to a replica that no longer or never held it), and the
makespan ratio sticky / policy.

What it assumes (every number is a flag or a field of ``ReplicaCost``; docs/routing.md says why each is what it is):

- 32 policy GPUs as ``--gpus / --tp`` rollout replicas (default 8 x TP 4 of a dense 9B, the neos recipe's layout;
  ``ReplicaCost``'s TP-4 replica, scaled in proportion for another ``--tp``).
- The round is the adaptive mixed-group sampler's (Neos Appendix B, Table 12): B = 64 groups of G = 8, a window of 128
  questions, at most 1,024 trajectories in flight (a finished one's slot starts the next one the sampler picks), up
  to 12 samples a group; it ends the moment 64 groups have >= 8 outcomes with both a success and a failure, and every
  trajectory still running is cancelled. A question's pass rate is Beta(0.3, 0.9) (``bench_sampler``'s default); a
  trajectory's outcome is drawn when it ends. ``--plain`` instead runs one plain batch of 64 x 8 that waits for its
  slowest trajectory.
- Trajectory shapes (``uniform``, from our data generation's expert episodes: 8 turns median, observations median 323
  tokens, log-sd 0.95; system prompt with tool schemas 1,310 tokens + a 400-token question image shared by the
  group; ``skewed``: a wider spread of turns and a per-trajectory observation scale, so a few contexts reach ~100k
  tokens; ``long``: the paper's regime, 16 turns median, 1,000 tokens written and 1,000 observed a turn, 8 s tools):
  see ``WORKLOADS``. Generation per turn lognormal (median ``gen_median``). Contexts end at 131,072 tokens
  (Neos Table 12) and episodes at 50 turns. Tool latency lognormal (median ``--tool-median`` s, sigma 1).
- Replicas batch continuously (fluid model, exact at every arrival and completion): each step decodes one token for
  every running request and prefills up to 8,192 prompt tokens, FCFS (chunked prefill); step time from
  ``ReplicaCost`` (a fixed part, a part per sequence, a part per context token read; prefill per token, growing with
  the position for attention). A request is admitted FCFS when its prompt + generation fit in the KV pool beside the
  running ones (otherwise it queues); the pool not reserved for running generations is that replica's prefix cache
  (LRU of 256-token blocks plus each trajectory's last partial block). A turn's prefill is its prompt minus the
  longest cached prefix there.
- Routing decisions take no time; the router's prefix mirror sees the same block keys as the engine but keeps its own
  LRU bound (``--mirror-tokens``, default the pool), and it knows a turn's generation only as its expected length
  (the workload's mean).
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

from neos_core.usage import OneLineParser, positive_float, positive_int, subset
from verl_ext.rollout.admission_control import AdmissionController, AdmissionSettings, ReplicaSignals
from verl_ext.rollout.routing import PrefixMirror, ReplicaCost, RouterSettings, TurnRouter
from verl_ext.trainer.sampler import MixedGroupSampler, SamplerConfig

CONTEXT_LIMIT = 131_072
MAX_TURNS = 50
PREFIX_TOKENS = 1_310 + 400
BLOCK = 256
PREFILL_CHUNK = 8_192
POLICIES = ("sticky", "least_loaded", "cache_aware", "cost_aware")
ENGINES = ("reserve", "ondemand")
WATERMARK = 0.01  # on-demand: a waiting request is admitted only with this share of the pool left free (vLLM's)
EPS = 1e-9


@dataclass(frozen=True)
class Shape:
    turns_median: float
    turns_sigma: float
    obs_median: float
    obs_sigma: float
    scale_sigma: float  # per-trajectory observation scale, lognormal(0, scale_sigma): the long tail of contexts
    gen_median: float
    gen_sigma: float
    tool_median: float  # seconds, lognormal with sigma 1
    slow_replica: float = 1.0  # replica r0's steps take this many times as long (a degraded or co-loaded replica)


EXPERT = {"turns_median": 8, "obs_median": 323, "obs_sigma": 0.95, "gen_median": 300, "gen_sigma": 0.5}
WORKLOADS = {
    "uniform": Shape(**EXPERT, turns_sigma=0.31, scale_sigma=0.0, tool_median=2.0),
    "skewed": Shape(**EXPERT, turns_sigma=0.8, scale_sigma=1.0, tool_median=2.0),
    "degraded": Shape(**EXPERT, turns_sigma=0.31, scale_sigma=0.0, tool_median=2.0, slow_replica=3.0),
    # the paper's regime: hard questions, a thinking policy, MEI-processed pages and fetched images in the context
    "long": Shape(
        turns_median=16, turns_sigma=0.6, obs_median=1000, obs_sigma=1.0, scale_sigma=0.7, gen_median=1000,
        gen_sigma=0.7, tool_median=8.0,
    ),
}


@dataclass
class Trajectory:
    idx: int
    question: str
    session: int
    success: bool
    gens: list[int]
    observations: list[int]
    tool_s: list[float]
    context: int = PREFIX_TOKENS
    turn: int = 0
    computed: int = 0  # tokens of this trajectory's context computed so far (its own history)
    cancelled: bool = False

    def keys(self, length: int) -> list[tuple]:
        shared = PREFIX_TOKENS // BLOCK
        return [("q", self.question, i) if i < shared else ("t", self.idx, i) for i in range(length // BLOCK)]


@dataclass
class Request:
    traj: Trajectory
    prompt: int
    gen: int
    queued_at: float
    prefill_left: float = 0.0  # in first-token-equivalents (attention's growth folded in)
    generated: float = 0.0

    @property
    def context(self) -> float:
        return self.prompt + self.generated


@dataclass
class Replica:
    rid: str
    cache: PrefixMirror
    queue: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    reserved: int = 0  # KV of the running requests: prompt + generation
    reserved_gen: int = 0  # of which generation (their prompts' blocks are in the prefix cache, pinned while they run)
    # trajectory -> the context length it left here: the engine caches the last partial block too (SGLang's radix
    # cache is per token, vLLM's blocks are 16 tokens), the 256-token keys of the model do not
    tails: dict = field(default_factory=dict)
    slow: float = 1.0  # step-time factor (Shape.slow_replica on r0)
    preemptions: int = 0  # on-demand engine: running requests evicted for room and recomputed
    busy_s: float = 0.0
    since: float = 0.0  # the running requests' state is exact at this time
    step_s: float = 0.0  # the current step time (0: idle)
    prefill_rate: float = 0.0  # prefill first-token-equivalents per step now
    kv_share: float = 0.0  # of the current step time: reading the running requests' KV
    prefill_share: float = 0.0  # of the current step time: prefill
    version: int = 0


class Workload:
    def __init__(self, shape: Shape, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.shape = shape
        self.rates: dict[str, float] = {}
        self.made = 0

    def questions(self):
        n = 0
        while True:
            yield f"q{n}"
            n += 1

    def trajectory(self, question: str, session: int) -> Trajectory:
        r, s = self.rng, self.shape
        if question not in self.rates:
            self.rates[question] = float(r.beta(0.3, 0.9))
        turns = int(min(MAX_TURNS, max(1, round(s.turns_median * math.exp(s.turns_sigma * r.standard_normal())))))
        scale = math.exp(s.scale_sigma * r.standard_normal())
        gens = [int(max(16, s.gen_median * math.exp(s.gen_sigma * r.standard_normal()))) for _ in range(turns)]
        obs = [
            int(min(8192, max(16, scale * s.obs_median * math.exp(s.obs_sigma * r.standard_normal()))))
            for _ in range(turns)
        ]
        tools = [s.tool_median * math.exp(r.standard_normal()) for _ in range(turns)]
        success = bool(r.random() < self.rates[question])
        t = Trajectory(self.made, question, session, success, gens, obs, tools)
        self.made += 1
        return t


def replica_cost(tp: int, kv_tokens: int | None) -> ReplicaCost:
    """``ReplicaCost``'s TP-4 replica scaled to ``tp`` GPUs: KV pool, KV bandwidth and FLOPs in proportion (the fixed
    step time kept: fewer weights to read a GPU, more all-reduce partners)."""
    base, scale = ReplicaCost(), tp / 4
    return ReplicaCost(
        kv_capacity_tokens=kv_tokens or int(base.kv_capacity_tokens * scale),
        decode_step_s=base.decode_step_s,
        decode_s_per_sequence=base.decode_s_per_sequence / scale,
        decode_s_per_context_token=base.decode_s_per_context_token / scale,
        prefill_s_per_token=base.prefill_s_per_token / scale,
        prefill_attention_tokens=base.prefill_attention_tokens,
    )


class Round:
    def __init__(
        self,
        policy: str,
        args: argparse.Namespace,
        seed: int,
        shape: Shape,
        controller: AdmissionController | None = None,
    ) -> None:
        self.args, self.cost = args, replica_cost(args.tp, args.kv_tokens)
        n = args.gpus // args.tp
        blocks = self.cost.kv_capacity_tokens // BLOCK
        self.replicas = {f"r{i}": Replica(f"r{i}", PrefixMirror(blocks)) for i in range(n)}
        self.replicas["r0"].slow = shape.slow_replica
        self.ondemand = args.engine == "ondemand"
        if controller is None and args.adaptive:
            controller = AdmissionController(self.admission_settings(args), args.in_flight, n)
        self.controller = controller
        self.limits: list[int] = []
        settings = RouterSettings(
            policy=policy,
            block_tokens=BLOCK,
            expected_generation_tokens=int(shape.gen_median * math.exp(shape.gen_sigma**2 / 2)),  # the mean
            cache_capacity_tokens=args.mirror_tokens or self.cost.kv_capacity_tokens,
            cost=self.cost,
            seed=seed,
        )
        self.router = TurnRouter(settings, self.replicas)
        self.workload = Workload(shape, seed)
        self.sampler = MixedGroupSampler(
            SamplerConfig(groups=args.groups, group_size=args.group_size, admission_limit=args.in_flight),
            self.workload.questions(),
        )
        self.live: dict[int, Trajectory] = {}
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.done = False
        self.finished = 0
        self.prefill = 0
        self.recomputed = 0
        self.waits: list[float] = []
        self.kv_s = self.prefill_s = 0.0  # replica time spent reading KV in decode steps, and prefilling
        self.recompute_s = 0.0  # of the prefill time: recomputing trajectories' own earlier context

    @staticmethod
    def admission_settings(args: argparse.Namespace) -> AdmissionSettings:
        given = {"kv_target": args.kv_target, "initial": args.initial_limit}
        return AdmissionSettings(**{k: v for k, v in given.items() if v is not None})

    # events
    def push(self, at: float, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def admit_trajectories(self) -> None:
        if self.args.plain and self.sampler.stats.admitted >= self.args.groups * self.args.group_size:
            return
        limit = self.controller.limit if self.controller else self.args.in_flight
        for a in self.sampler.admit(max(0, limit - len(self.live))):
            traj = self.workload.trajectory(a.question_id, a.session_index)
            self.live[a.session_index] = traj
            self.arrive(traj)

    def arrive(self, traj: Trajectory) -> None:
        if traj.cancelled:
            return
        keys = traj.keys(traj.context)
        replica = self.replicas[self.router.route(str(traj.idx), keys, traj.context).replica]
        gen = max(1, min(traj.gens[traj.turn], CONTEXT_LIMIT - traj.context))
        self.advance(replica)
        replica.queue.append(Request(traj, traj.context, gen, self.now))
        self.replan(replica)

    def control(self) -> None:
        """Adaptive admission: the controller reads what vLLM's /metrics would show, then free slots are filled."""
        signals = []
        for replica in self.replicas.values():
            self.advance(replica)
            held = self.used(replica) if self.ondemand else replica.reserved
            signals.append(
                ReplicaSignals(
                    running=len(replica.running),
                    waiting=len(replica.queue),
                    kv_usage=min(1.0, held / self.cost.kv_capacity_tokens),
                    preemptions=replica.preemptions,
                )
            )
        self.limits.append(self.controller.update(signals, self.now).limit)
        self.push(self.now + self.controller.settings.interval_s, "control", None)
        self.admit_trajectories()

    @staticmethod
    def used(replica: Replica) -> float:
        """On-demand engine: KV blocks held now (every running request's prompt and what it generated so far)."""
        return sum(r.context for r in replica.running)

    def fits(self, replica: Replica, req: Request) -> bool:
        cap = self.cost.kv_capacity_tokens
        if self.ondemand:
            return self.used(replica) + req.prompt <= cap * (1 - WATERMARK)
        return replica.reserved + req.prompt + req.gen <= cap

    def set_cache_room(self, replica: Replica) -> None:
        """The prefix cache is the pool less the running generations (their prompts' blocks are cached, pinned)."""
        held_gen = sum(r.generated for r in replica.running) if self.ondemand else replica.reserved_gen
        replica.cache.capacity = max(1, int(self.cost.kv_capacity_tokens - held_gen) // BLOCK)
        replica.cache.insert(())

    def preempt(self, replica: Replica) -> None:
        """On-demand engine, pool full: the last admitted running request gives its blocks back and waits at the
        queue's head to be recomputed (vLLM's recompute preemption); its computed blocks stay in the prefix cache."""
        while len(replica.running) > 1 and self.used(replica) >= self.cost.kv_capacity_tokens - 0.5:
            req = replica.running.pop()
            replica.reserved -= req.prompt + req.gen
            replica.reserved_gen -= req.gen
            done = int(req.generated)
            if req.prefill_left <= 0:
                req.traj.computed = max(req.traj.computed, req.prompt + done)
                replica.cache.insert(req.traj.keys(req.prompt + done))
            req.prompt, req.gen, req.generated, req.prefill_left = req.prompt + done, req.gen - done, 0.0, 0.0
            req.queued_at = self.now
            replica.queue.appendleft(req)
            replica.preemptions += 1

    # the replica's fluid continuous batching
    def advance(self, replica: Replica) -> None:
        """Bring the running requests' progress up to now at the step time planned at ``since``."""
        if replica.step_s > 0:
            steps = (self.now - replica.since) / replica.step_s
            budget = steps * replica.prefill_rate
            for req in replica.running:
                if req.prefill_left > 0:
                    take = min(budget, req.prefill_left)
                    req.prefill_left -= take
                    budget -= take
                else:
                    req.generated = min(req.gen, req.generated + steps)
            elapsed = self.now - replica.since
            replica.busy_s += elapsed
            self.kv_s += elapsed * replica.kv_share
            self.prefill_s += elapsed * replica.prefill_share
        replica.since = self.now

    def admit(self, replica: Replica) -> None:
        cost = self.cost
        while replica.queue:
            req = replica.queue[0]
            need = req.prompt + req.gen
            if replica.running and not self.fits(replica, req):
                break  # FCFS: the head waits for room
            replica.queue.popleft()
            self.waits.append(self.now - req.queued_at)
            keys = req.traj.keys(req.prompt)
            blocks = replica.cache.match(keys)
            cached = min(req.prompt, blocks * BLOCK)
            tail = replica.tails.get(req.traj.idx, 0)
            if tail // BLOCK == blocks and tail <= req.prompt:  # its whole last context is still here
                cached = tail
            req.prefill_left = cost.prefill_s(cached, req.prompt) / cost.prefill_s_per_token
            self.prefill += req.prompt - cached
            redo = (max(cached, PREFIX_TOKENS), min(req.traj.computed, req.prompt))
            self.recomputed += max(0, redo[1] - redo[0])
            self.recompute_s += cost.prefill_s(*redo)
            replica.reserved += need
            replica.reserved_gen += req.gen
            replica.running.append(req)
            self.set_cache_room(replica)
            replica.cache.insert(keys)

    def replan(self, replica: Replica) -> None:
        """Admit what fits, set the step time, and schedule the next prefill end or generation end."""
        self.admit(replica)
        replica.version += 1
        if not replica.running:
            replica.step_s = replica.prefill_rate = 0.0
            return
        decoding = [r for r in replica.running if r.prefill_left <= 0]
        prefill = sum(r.prefill_left for r in replica.running if r.prefill_left > 0)
        replica.prefill_rate = min(PREFILL_CHUNK, prefill)
        context = sum(r.context for r in decoding)
        prefill_s = self.cost.prefill_s_per_token * replica.prefill_rate
        replica.step_s = (self.cost.step_s(context, len(decoding)) + prefill_s) * replica.slow
        replica.kv_share = self.cost.decode_s_per_context_token * context / replica.step_s
        replica.prefill_share = prefill_s / replica.step_s
        steps = min((r.gen - r.generated for r in decoding), default=math.inf)
        head = next((r for r in replica.running if r.prefill_left > 0), None)
        if head is not None:
            steps = min(steps, head.prefill_left / replica.prefill_rate)
        if self.ondemand and decoding:  # until the growing generations fill the pool
            steps = min(steps, (self.cost.kv_capacity_tokens - self.used(replica)) / len(decoding))
        steps = min(max(steps, EPS), 256)  # re-plan at least every 256 steps: contexts grow
        self.push(self.now + steps * replica.step_s, "step", (replica, replica.version))

    def step_done(self, replica: Replica, version: int) -> None:
        if version != replica.version:
            return  # re-planned since
        self.advance(replica)
        for req in [r for r in replica.running if r.prefill_left > 0 and r.prefill_left < 1e-6]:
            req.prefill_left = 0.0
        done = [r for r in replica.running if r.prefill_left <= 0 and r.generated >= r.gen - 1e-6]
        for req in done:
            replica.running.remove(req)
            replica.reserved -= req.prompt + req.gen
            replica.reserved_gen -= req.gen
            self.set_cache_room(replica)
            traj = req.traj
            self.router.release(replica.rid, str(traj.idx))
            if traj.cancelled:
                continue
            traj.context = traj.computed = req.prompt + req.gen
            replica.cache.insert(traj.keys(traj.context))
            replica.tails[traj.idx] = traj.context
            traj.turn += 1
            obs = traj.observations[traj.turn - 1]
            if traj.turn >= len(traj.gens) or traj.context + obs + 16 >= CONTEXT_LIMIT:
                self.push(self.now, "end", traj)
            else:
                self.push(self.now + traj.tool_s[traj.turn - 1], "tool", (traj, obs))
        if self.ondemand:
            self.preempt(replica)
            self.set_cache_room(replica)
        self.replan(replica)

    def end(self, traj: Trajectory) -> None:
        del self.live[traj.session]
        self.finished += 1
        self.sampler.finish(traj.question, traj.session, traj.success)
        if self.args.plain:
            self.done = self.finished == self.args.groups * self.args.group_size
            return
        if self.sampler.ready():
            self.done = True
            for other in self.live.values():  # the policy boundary: the rest is cancelled
                other.cancelled = True
            return
        self.admit_trajectories()

    def run(self) -> dict[str, float]:
        if self.controller:
            self.control()
        else:
            self.admit_trajectories()
        while not self.done and self.events:
            self.now, _, kind, payload = heapq.heappop(self.events)
            if kind == "step":
                self.step_done(*payload)
            elif kind == "end":
                self.end(payload)
            elif kind == "control":
                self.control()
            else:
                traj, obs = payload
                traj.context += obs
                self.arrive(traj)
        if not self.done:
            raise RuntimeError("the round ran out of events before the sampler was ready")
        makespan = self.now
        for replica in self.replicas.values():
            self.advance(replica)
        busy = sum(min(r.busy_s, makespan) for r in self.replicas.values())
        return {
            "makespan_s": makespan,
            "idle": max(0.0, 1 - busy / (makespan * len(self.replicas))),
            "wait_s": statistics.fmean(self.waits),
            "kv_share": self.kv_s / max(busy, EPS),
            "prefill_share": self.prefill_s / max(busy, EPS),
            "recompute_share": self.recompute_s / max(busy, EPS),
            "prefill_tokens": self.prefill,
            "recomputed_share": self.recomputed / max(1, self.prefill),
            "started": self.sampler.stats.admitted,
            "moved": self.router.counters.get("moved", 0) + self.router.counters.get("rebalanced", 0),
            "preemptions": sum(r.preemptions for r in self.replicas.values()),
            "limit": statistics.fmean(self.limits) if self.limits else self.args.in_flight,
        }


def run_round(policy: str, args: argparse.Namespace, seed: int, shape: Shape) -> dict[str, float]:
    """One round; with adaptive admission the controller first runs a round of another seed (unless ``--cold``), as
    in training every round but the first starts from the last round's state."""
    controller = None
    if args.adaptive and not args.cold:
        warm_up = Round(policy, args, seed + 1_000, shape)
        warm_up.run()
        controller = warm_up.controller
    return Round(policy, args, seed, shape, controller).run()


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_routing.py", description="Turn-level routing at the paper's scale: a "
                      "discrete-event simulation of one rollout round per routing policy, with the production router's "
                      "decisions; prints makespan, idle share, prefill recomputed and the ratio sticky / policy. The "
                      "assumptions are in the script's docstring; every number is a flag.")
    p.add_argument("--gpus", type=positive_int, default=32, metavar="N", help="policy GPUs (default: 32)")
    p.add_argument("--tp", type=positive_int, default=4, metavar="N",
                   help="rollout tensor-parallel size, dividing --gpus (default: 4, the neos recipe's)")
    p.add_argument("--groups", type=positive_int, default=64, metavar="B",
                   help="question groups per round (default: 64, Neos Table 12)")
    p.add_argument("--group-size", type=positive_int, default=8, metavar="G",
                   help="trajectories per group (default: 8, Neos Table 12)")
    p.add_argument("--in-flight", type=positive_int, default=1024, metavar="N",
                   help="the sampler's admission limit (default: 1024, Neos Table 12)")
    p.add_argument("--adaptive", action="store_true",
                   help="adaptive admission (verl_ext.rollout.admission_control), --in-flight its upper bound")
    p.add_argument("--cold", action="store_true",
                   help="adaptive: measure the first round (default: a round after one of another seed)")
    p.add_argument("--kv-target", type=positive_float, default=None, metavar="X",
                   help="adaptive: AdmissionSettings.kv_target (default: its default)")
    p.add_argument("--initial-limit", type=positive_int, default=None, metavar="N",
                   help="adaptive: the first limit, as a later round starts from the last one's (default: --in-flight)")
    p.add_argument("--engine", choices=ENGINES, default="reserve",
                   help="reserve: a request is admitted when prompt + generation fit (the default); ondemand: when "
                   "its prompt fits, blocks grow as it writes and a full pool preempts the last admitted request, "
                   "recomputed later (vLLM's)")
    p.add_argument("--plain", action="store_true", help="one plain batch of groups x group-size, waited for in full")
    p.add_argument("--workloads", type=subset(tuple(WORKLOADS)), default=list(WORKLOADS), metavar="W,W",
                   help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    p.add_argument("--policies", type=subset(POLICIES), default=list(POLICIES), metavar="P,P",
                   help=f"comma-separated subset of {','.join(POLICIES)}; sticky is the ratios' baseline "
                   "(default: all)")
    p.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                   help="seeded workloads per policy; medians are printed (default: 3)")
    p.add_argument("--tool-median", type=positive_float, default=None, metavar="SECONDS",
                   help="median tool latency, s (default: the workload's)")
    p.add_argument("--gen-median", type=positive_float, default=None, metavar="N",
                   help="tokens a turn writes, median (default: the workload's)")
    p.add_argument("--kv-tokens", type=positive_int, default=None, metavar="N",
                   help="KV pool a replica, tokens (default: 400,000 a GPU)")
    p.add_argument("--mirror-tokens", type=positive_int, default=None, metavar="N",
                   help="the router's prefix mirror, tokens (default: the pool)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.gpus % args.tp:
        p.error(f"--tp: {args.tp} must divide --gpus {args.gpus}")
    policies = args.policies
    if args.plain:
        args.in_flight = args.groups * args.group_size
    round_kind = "plain batch" if args.plain else f"sampler round, {args.in_flight} in flight"
    print(
        f"{args.gpus // args.tp} replicas x TP {args.tp}; {round_kind}; B={args.groups} G={args.group_size}; "
        f"medians of {args.seeds} seeds"
    )
    print(
        "| workload | policy | makespan s | vs sticky | idle | busy: KV reads / prefill / recompute | KV wait s/turn "
        "| prefill Mtok | recomputed | moved turns |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.workloads:
        shape = WORKLOADS[kind]
        for flag in ("gen_median", "tool_median"):
            if getattr(args, flag) is not None:
                shape = Shape(**{**shape.__dict__, flag: getattr(args, flag)})
        base = None
        for policy in policies:
            t0 = time.perf_counter()
            runs = [run_round(policy, args, seed, shape) for seed in range(args.seeds)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            if policy == "sticky":
                base = med["makespan_s"]
            ratio = f"{base / med['makespan_s']:.2f}x" if base else "-"
            print(
                f"| {kind} | {policy} | {med['makespan_s']:.0f} | {ratio} | {med['idle']:.1%} | "
                f"{med['kv_share']:.0%} / {med['prefill_share']:.0%} / {med['recompute_share']:.0%} | "
                f"{med['wait_s']:.2f} | "
                f"{med['prefill_tokens'] / 1e6:.1f} | {med['recomputed_share']:.1%} | {med['moved']:.0f} | "
                f"({time.perf_counter() - t0:.0f} s wall)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
