"""Turn-level routing of generate requests over rollout replicas (Neos Appendix B: "requests are scheduled at turn
boundaries; there is no permanent trajectory-to-replica binding"). Framework-free: no verl, no Ray; the verl load
balancer (:mod:`verl_ext.rollout.turn_router`) and the routing benchmark (``bench/bench_routing.py``) both drive
:class:`TurnRouter`.

Policies (``RouterSettings.policy``):

- ``sticky``: verl 0.9.1's ``GlobalRequestLoadBalancer``: a request id (our agent loops pass one per episode) stays on
  the replica its first turn went to; a first turn goes to the replica with the fewest requests in flight.
- ``least_loaded``: every turn to the replica with the least outstanding work, wherever the episode's prefix is.
- ``cache_aware``: stay on the replica whose prefix cache holds most of the prompt, unless that replica's outstanding
  work exceeds the least-loaded one's by both ``balance_abs_threshold`` tokens and ``balance_rel_threshold`` times
  (SGLang router's two imbalance thresholds, applied between the cache holder and the least-loaded replica).
- ``cost_aware``: the replica where the turn costs least in seconds of delay (:meth:`ReplicaCost.placement_s`):
  its own wait for KV room, prefill of the prompt tokens *not* cached there (leaving the prefix holder is charged
  the recompute of the episode's context) and decoding at that replica's step time, plus the delay it adds to the
  requests already there. A turn moves only when the queueing it avoids outweighs the recompute it causes; ties stay
  with the prefix holder.

Outstanding work of a replica = the sum, over its requests in flight, of prompt tokens + expected generation tokens
(``min(max_tokens, expected_generation_tokens)``). The router mirrors each replica's prefix cache as an LRU of
full-block prefix keys (vLLM's and SGLang's prefix caches also match whole blocks from the start of the prompt),
bounded by ``cache_capacity_tokens``; the mirror is an estimate: the engine may evict earlier under memory pressure.
A replica marked down, or removed from the pool (verl removes replicas from its balancer while they sleep for a
weight update), is never chosen; with none left :class:`NoReplicaError` is raised, as verl's balancer does.
"""

from __future__ import annotations

import random
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Policy = Literal["sticky", "least_loaded", "cache_aware", "cost_aware"]
NO_REPLICA = "No available servers in load balancer"  # verl's message: FullyAsyncLLMServerClient retries on it


class NoReplicaError(RuntimeError):
    """No replica is up and in the pool."""


class ReplicaCost(BaseModel):
    """What a turn costs on one rollout replica, in seconds: ``cost_aware``'s estimate, and the routing benchmark's
    replica model. Defaults: the ``+recipe=neos`` replica, a dense 9B (Qwen3-8B's shape: 36 layers, 8 KV heads of
    128, bf16 KV = 144 KiB a token) at tensor-parallel 4 on four 80 GB H100s (Neos trains on H100s with TP 4; its
    rollout TP is not stated, the recipe uses the training TP). Set them to the engine and hardware in use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 4 x 80 GB less weights, activations and CUDA graphs: ~62 GB of KV a GPU at 144 KiB a token
    kv_capacity_tokens: int = Field(1_600_000, ge=1)
    # one decode step: weights read once (4 GB a GPU at ~3.3 TB/s), 72 all-reduces and launches ...
    decode_step_s: float = Field(8e-3, gt=0)
    decode_s_per_sequence: float = Field(1e-5, ge=0)  # ... sampling and the batch's own matmul rows ...
    decode_s_per_context_token: float = Field(1.1e-8, ge=0)  # ... and every running sequence's KV (36 KiB a GPU)
    # prefill: 2 x 8e9 non-embedding FLOPs a token on 4 GPUs at ~350 TFLOP/s each ...
    prefill_s_per_token: float = Field(1.15e-5, gt=0)
    # ... plus attention, 4 x 36 layers x 4,096 x position FLOPs: a token at this position costs twice the first one
    prefill_attention_tokens: int = Field(27_000, ge=1)

    def prefill_s(self, start: int, end: int) -> float:
        """Prefilling prompt positions ``start..end`` (the cached ``start`` tokens are not recomputed)."""
        if end <= start:
            return 0.0
        attention = (end * end - start * start) / (2 * self.prefill_attention_tokens)
        return self.prefill_s_per_token * ((end - start) + attention)

    def step_s(self, context_tokens: float, sequences: int) -> float:
        """One decode step of ``sequences`` requests holding ``context_tokens`` of KV together."""
        per_sequence = self.decode_s_per_sequence * sequences
        return self.decode_step_s + per_sequence + self.decode_s_per_context_token * context_tokens

    def placement_s(
        self, load_tokens: int, in_flight: int, prompt_tokens: int, cached_tokens: int, generation: int
    ) -> float:
        """Seconds of delay that placing a turn on a replica costs everyone, ``cost_aware``'s score. The turn's own
        time: the wait for KV room (the outstanding ``load_tokens`` beyond the pool drain at pool / (generation x
        step) tokens a second: a full pool turns over once per turn), the prefill of its ``prompt_tokens`` less the
        ``cached_tokens``, and ``generation`` decode steps at the replica's step time with it running. Plus what it
        adds to each of the ``in_flight`` requests already there that run beside it (those the pool holds): its
        prefill stalls their steps (chunked prefill shares the step) and its context is read in every step it
        shares with them. Without the second part a turn
        would leave its prefix for a step a few milliseconds shorter and make forty others wait through its
        recompute."""
        need = prompt_tokens + generation
        full_step = self.step_s(self.kv_capacity_tokens, in_flight + 1)
        overflow = max(0, load_tokens + need - self.kv_capacity_tokens)
        wait = overflow * generation * full_step / self.kv_capacity_tokens
        running = min(load_tokens + need, self.kv_capacity_tokens)
        prefill = self.prefill_s(cached_tokens, prompt_tokens)
        own = wait + prefill + generation * self.step_s(running, in_flight + 1)
        added = prefill + generation * (self.decode_s_per_sequence + self.decode_s_per_context_token * need)
        sharing = in_flight * min(1.0, self.kv_capacity_tokens / (load_tokens + need))  # the queued ones do not run
        return own + sharing * added


class RouterSettings(BaseModel):
    """What ``rollout.router_config_path``'s YAML holds besides ``router_class``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # +recipe=neos's: no other policy is >= 0.98x sticky in every simulated regime (docs/routing.md)
    policy: Policy = "sticky"
    # Per-turn generation estimate for the load (a turn is a reasoning step and one call; max_tokens caps it).
    expected_generation_tokens: int = Field(512, ge=1)
    block_tokens: int = Field(256, ge=1)  # prefix-cache block: only whole blocks match
    # per replica: tokens of prefix the mirror keeps, ReplicaCost's pool (the engine caches in all of its free pool; a
    # smaller mirror forgets prefixes the engine still holds, and cost_aware would move turns away from them)
    cache_capacity_tokens: int = Field(1_600_000, ge=1)
    # cache_aware leaves the prefix holder only when it is busier than the least-loaded replica by both thresholds
    # (SGLang router's abs/rel pair); abs = one full context: moving recomputes up to a whole context's prefill.
    balance_abs_threshold: int = Field(131_072, ge=0)  # tokens
    balance_rel_threshold: float = Field(1.5, ge=1.0)
    cache_threshold: float = Field(0.3, ge=0.0, le=1.0)  # cache_aware: below this matched share, go least loaded
    cost: ReplicaCost = ReplicaCost()  # cost_aware's replica model (set it to the engine and hardware in use)
    max_tracked_requests: int = Field(10_000, ge=1)  # sticky map entries (verl's DEFAULT_ROUTING_CACHE_SIZE)
    health_check_interval_s: float = Field(5.0, gt=0)  # the Ray balancer probes every replica this often
    health_check_timeout_s: float = Field(30.0, gt=0)
    seed: int = 0  # sticky's random tie-break among equally busy replicas, as verl's


def prefix_keys(token_ids: Sequence[int], block_tokens: int) -> list[int]:
    """One key per whole block of ``token_ids``, each identifying the prefix up to its block's end (chained hashes,
    as vLLM's prefix cache keys its blocks). A partial last block has no key: engines do not share it."""
    keys, parent = [], 0
    for end in range(block_tokens, len(token_ids) + 1, block_tokens):
        parent = hash((parent, tuple(token_ids[end - block_tokens : end])))
        keys.append(parent)
    return keys


class PrefixMirror:
    """The router's picture of one replica's prefix cache: an LRU of block keys, at most ``capacity`` blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, keys: Sequence[Hashable]) -> int:
        """How many leading blocks of ``keys`` are cached."""
        n = 0
        for key in keys:
            if key not in self._blocks:
                break
            n += 1
        return n

    def insert(self, keys: Iterable[Hashable]) -> None:
        """The replica computed (or reused) these blocks: most recently used now; the oldest go past capacity."""
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


@dataclass
class ReplicaState:
    mirror: PrefixMirror
    load_tokens: int = 0  # outstanding work
    in_flight: int = 0
    routed: int = 0  # requests (turns) ever routed here
    assigned_tokens: int = 0  # all work ever routed here: least_loaded's tie-break, so equal loads take turns
    down: bool = False
    # (request id) -> the tokens each of its in-flight requests added, released in order
    pending: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


@dataclass(frozen=True)
class Decision:
    replica: str
    cached_tokens: int  # of the prompt, on the chosen replica as the mirror sees it
    reason: str  # sticky | first_turn | least_loaded | cache_hit | rebalanced | moved | no_cache_match


class TurnRouter:
    """Chooses a replica per generate request and keeps the per-replica load and prefix mirrors.

    Counters (``counters``): every decision by its reason, plus ``sticky_replica_unavailable`` (an episode's sticky
    replica was down or gone: it moved) and ``down_skipped`` (a down replica held the best prefix)."""

    def __init__(self, settings: RouterSettings, replicas: Iterable[str] = ()) -> None:
        self.settings = settings
        self.replicas: dict[str, ReplicaState] = {}
        self.sticky: OrderedDict[str, str] = OrderedDict()
        self.counters: dict[str, int] = defaultdict(int)
        self._rng = random.Random(settings.seed)
        self._capacity_blocks = max(1, settings.cache_capacity_tokens // settings.block_tokens)
        self.add(replicas)

    # pool
    def add(self, replica_ids: Iterable[str]) -> None:
        """New (or re-added, e.g. woken after a weight update) replicas start with an empty prefix cache."""
        for rid in replica_ids:
            self.replicas[rid] = ReplicaState(PrefixMirror(self._capacity_blocks))

    def remove(self, replica_ids: Iterable[str]) -> None:
        for rid in replica_ids:
            self.replicas.pop(rid, None)

    def set_down(self, replica_id: str, down: bool) -> bool:
        """Mark a replica down (never chosen) or up again; returns whether that changed anything. A replica that
        comes back has lost its cache (a restarted engine starts empty)."""
        state = self.replicas.get(replica_id)
        if state is None or state.down == down:
            return False
        state.down = down
        if not down:
            state.mirror = PrefixMirror(self._capacity_blocks)
        return True

    def clear(self) -> int:
        """Forget episode placements and cached prefixes (verl's ``clear_sticky_cache`` at a phase switch, after which
        engines reset their prefix caches); returns the number of sticky entries dropped."""
        dropped = len(self.sticky)
        self.sticky.clear()
        for state in self.replicas.values():
            state.mirror = PrefixMirror(self._capacity_blocks)
        return dropped

    # routing
    def expected_generation(self, max_tokens: int | None) -> int:
        cap = self.settings.expected_generation_tokens
        return cap if max_tokens is None else max(1, min(int(max_tokens), cap))

    def route(
        self, request_id: str, keys: Sequence[Hashable], prompt_tokens: int, max_tokens: int | None = None
    ) -> Decision:
        """Choose a replica for one turn and account for it (call :meth:`release` when it returns). ``keys`` are the
        prompt's :func:`prefix_keys` (the benchmark passes its own; any hashable keys that identify prefixes do)."""
        up = [rid for rid, s in self.replicas.items() if not s.down]
        if not up:
            self.counters["no_replica"] += 1
            raise NoReplicaError(NO_REPLICA)
        policy = self.settings.policy
        if policy == "sticky":
            decision = self._sticky(request_id, up)
        elif policy == "least_loaded":
            decision = Decision(self._least_loaded(up), 0, "least_loaded")
        elif policy == "cache_aware":
            decision = self._cache_aware(keys, up, prompt_tokens)
        else:
            decision = self._cost_aware(request_id, keys, up, prompt_tokens, self.expected_generation(max_tokens))
        state = self.replicas[decision.replica]
        cached = min(prompt_tokens, state.mirror.match(keys) * self.settings.block_tokens)
        work = prompt_tokens + self.expected_generation(max_tokens)
        state.load_tokens += work
        state.assigned_tokens += work
        state.in_flight += 1
        state.routed += 1
        state.pending[request_id].append(work)
        state.mirror.insert(keys)
        self.counters[decision.reason] += 1
        return Decision(decision.replica, cached, decision.reason)

    def release(self, replica_id: str, request_id: str) -> None:
        """A request routed to ``replica_id`` returned (or failed). Unknown ids are ignored (the replica may have been
        removed meanwhile)."""
        state = self.replicas.get(replica_id)
        if state is None or not state.pending.get(request_id):
            return
        work = state.pending[request_id].pop(0)
        if not state.pending[request_id]:
            del state.pending[request_id]
        state.load_tokens -= work
        state.in_flight -= 1

    def _sticky(self, request_id: str, up: list[str]) -> Decision:
        placed = self.sticky.get(request_id)
        if placed is not None:
            if placed in up:
                self.sticky.move_to_end(request_id)
                return Decision(placed, 0, "sticky")
            self.counters["sticky_replica_unavailable"] += 1
        fewest = min(self.replicas[rid].in_flight for rid in up)
        chosen = self._rng.choice([rid for rid in up if self.replicas[rid].in_flight == fewest])
        self._remember(request_id, chosen)
        return Decision(chosen, 0, "first_turn")

    def _remember(self, request_id: str, replica: str) -> None:
        """The replica a request id last went to (an LRU of ``max_tracked_requests``, as verl's sticky map)."""
        self.sticky[request_id] = replica
        self.sticky.move_to_end(request_id)
        while len(self.sticky) > self.settings.max_tracked_requests:
            self.sticky.popitem(last=False)

    def _least_loaded(self, up: list[str]) -> str:
        """Least outstanding tokens; equal loads go to the replica that was given the least work so far."""
        return min(up, key=lambda rid: (self.replicas[rid].load_tokens, self.replicas[rid].assigned_tokens))

    def _matches(self, keys: Sequence[Hashable], up: list[str]) -> dict[str, int]:
        """Cached leading blocks of ``keys`` per up replica; counts a down replica that held more (``down_skipped``)."""
        matches = {rid: self.replicas[rid].mirror.match(keys) for rid in up}
        if max((s.mirror.match(keys) for s in self.replicas.values() if s.down), default=0) > max(matches.values()):
            self.counters["down_skipped"] += 1
        return matches

    def _cache_aware(self, keys: Sequence[Hashable], up: list[str], prompt_tokens: int) -> Decision:
        matches = self._matches(keys, up)
        least = self._least_loaded(up)
        holder = max(matches, key=lambda rid: (matches[rid], -self.replicas[rid].load_tokens))
        matched = min(prompt_tokens, matches[holder] * self.settings.block_tokens)
        if matches[holder] == 0 or matched < self.settings.cache_threshold * prompt_tokens:
            return Decision(least, 0, "no_cache_match")
        held, low = self.replicas[holder].load_tokens, self.replicas[least].load_tokens
        s = self.settings
        if held - low > s.balance_abs_threshold and held > s.balance_rel_threshold * low:
            return Decision(least, 0, "rebalanced")
        return Decision(holder, 0, "cache_hit")

    def _cost_aware(
        self, request_id: str, keys: Sequence[Hashable], up: list[str], prompt_tokens: int, generation: int
    ) -> Decision:
        matches = self._matches(keys, up)
        last = self.sticky.get(request_id)
        block, cost = self.settings.block_tokens, self.settings.cost

        def finish_s(rid: str) -> float:
            s = self.replicas[rid]
            cached = min(prompt_tokens, matches[rid] * block)
            return cost.placement_s(s.load_tokens, s.in_flight, prompt_tokens, cached, generation)

        # The prefix holder first, so an equal estimate keeps the turn where its context is; among equal mirror
        # matches (say only the group's shared prompt) the episode's last replica, whose engine may still hold more
        # of its context than the bounded mirror remembers.
        order = sorted(up, key=lambda rid: (-matches[rid], rid != last, self.replicas[rid].assigned_tokens))
        best = min(order, key=finish_s)
        self._remember(request_id, best)
        if matches[order[0]] == 0:
            return Decision(best, 0, "no_cache_match")
        return Decision(best, 0, "cache_hit" if best == order[0] else "moved")

    def status(self) -> dict[str, object]:
        return {
            "policy": self.settings.policy,
            "replicas": {
                rid: {
                    "load_tokens": s.load_tokens,
                    "in_flight": s.in_flight,
                    "routed": s.routed,
                    "assigned_tokens": s.assigned_tokens,
                    "cached_blocks": len(s.mirror),
                    "down": s.down,
                }
                for rid, s in self.replicas.items()
            },
            "counters": dict(self.counters),
        }
