"""Adaptive admission: how many trajectories the mixed-group sampler keeps in flight, from the rollout replicas' state.

Why: a round is bounded by the replicas' KV pools, not by the recipe's constant (Neos Table 12's 2BG = 1,024). When
the live trajectories' contexts outgrow the pools, a context is evicted while its tools run and prefilled again at its
next turn (reserve-at-admission engines), or running requests are preempted and recomputed (vLLM's on-demand blocks);
either way the replicas spend the round recomputing. Fewer trajectories in flight keep the working set in the pools.

The law (:meth:`AdmissionController.update`, once per ``interval_s``), from what the engines expose:

- **KV** (vLLM's ``/metrics``: ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``): the running requests hold
  ``sum(kv_usage)`` pools between them, so a live trajectory needs ``sum(kv_usage) / sum(running)`` of a pool and the
  replicas hold ``kv_target x replicas / that`` trajectories. A trajectory between turns (its tools running) has a
  context like a running one's, so this is the in-flight count whose contexts fill ``kv_target`` of the pools.
- **Preemptions** (``vllm:num_preemptions_total``): any since the last update cap the estimate at
  ``limit x (1 - backoff)``: the pools overflowed.
- **Waiting** (``vllm:num_requests_waiting``): requests queued on a full pool (``kv_usage >= kv_full``) forbid raising
  the limit.
- **Turn latency** (the router's mean turn time per replica) where no replica reports KV usage (``hf`` backend,
  metrics off): the limit backs off while turns take longer than ``latency_tolerance`` x the fastest seen, and grows by
  ``latency_step`` otherwise. Cruder (a turn's time grows with its context too); counted as a fallback.

The limit moves ``gain`` of the way to the estimate each update, between a floor of ``min_per_replica`` trajectories a
replica (enough running requests that no replica idles while tools run) and the recipe's constant. No signal at all:
the limit holds (counted). Framework-free: no verl, Ray or HTTP here (``replica_signals`` reads the engines).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Source = Literal["kv", "latency", "none"]


class AdmissionSettings(BaseModel):
    """``trainer.v1.neos.sampler.adaptive_admission``; the recipe's ``admission_limit`` is the upper bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enable: bool = True
    interval_s: float = Field(10.0, gt=0)  # seconds between updates (the engines' gauges refresh every step)
    kv_target: float = Field(1.2, gt=0, le=4)  # the live contexts' KV over the replicas' pools (> 1: some recompute)
    kv_full: float = Field(0.95, gt=0, le=1)  # kv usage at which waiting requests mean the pool is full
    gain: float = Field(0.5, gt=0, le=1)  # share of the gap to a lower estimate closed per update
    # the most the limit rises per update: a trajectory's KV shows minutes after its admission, as its context grows
    max_raise: float = Field(0.05, gt=0, le=1)
    # a trajectory's KV share is remembered at its highest, decaying by 1/kv_memory_updates an update: a new round's
    # trajectories start small, and the estimate must not read their first turns as room
    kv_memory_updates: int = Field(60, ge=1)
    preemption_backoff: float = Field(0.1, ge=0, lt=1)  # the cut after an interval with preemptions
    min_per_replica: int = Field(16, ge=1)  # the floor: trajectories in flight per replica
    initial: int | None = Field(None, ge=1)  # the first limit (None: the upper bound)
    latency_tolerance: float = Field(1.5, gt=1)  # fallback: back off above this x the fastest mean turn seen
    latency_step: float = Field(0.1, gt=0, le=1)  # fallback: relative raise (or cut) per update
    fallback_warn_share: float = Field(0.5, ge=0, le=1)  # warn once when this share of updates had no KV signal


@dataclass(frozen=True)
class ReplicaSignals:
    """One replica's state; None where the engine or the router does not report it."""

    running: int | None = None  # vllm:num_requests_running
    waiting: int | None = None  # vllm:num_requests_waiting
    kv_usage: float | None = None  # vllm:kv_cache_usage_perc, 0..1
    preemptions: float | None = None  # vllm:num_preemptions_total (cumulative)
    turn_s: float | None = None  # mean seconds a turn (one generate request) took, the router's measure


@dataclass(frozen=True)
class AdmissionDecision:
    limit: int
    source: Source
    estimate: float | None  # the signals' in-flight count before smoothing and bounds
    preemptions: float  # since the previous update, over all replicas


@dataclass
class AdmissionStats:
    """Since the last :meth:`AdmissionController.take_stats`: what the metrics report per batch."""

    updates: int = 0
    by_source: dict[str, int] = field(default_factory=lambda: {"kv": 0, "latency": 0, "none": 0})
    preemptions: float = 0.0
    limit_sum: float = 0.0
    limit_min: int | None = None
    limit_max: int | None = None


class AdmissionController:
    """The in-flight limit; :meth:`update` with the replicas' signals, :meth:`limit` between updates."""

    def __init__(self, settings: AdmissionSettings, upper: int, replicas: int) -> None:
        if upper < 1 or replicas < 1:
            raise ValueError(f"admission needs upper >= 1 and replicas >= 1, got {upper} and {replicas}")
        self.settings = settings
        self.upper = upper
        self.replicas = replicas
        self._limit = float(min(upper, settings.initial or upper))
        self._last_update: float | None = None
        self._preemptions: dict[int, float] = {}
        self._fastest_turn_s: float | None = None
        self._per_trajectory: float | None = None  # of one pool, remembered at its highest (kv_memory_updates)
        self.stats = AdmissionStats()
        self.total_updates = 0
        self.total_fallbacks = 0

    @property
    def floor(self) -> int:
        return min(self.upper, self.settings.min_per_replica * self.replicas)

    @property
    def limit(self) -> int:
        return self.upper if not self.settings.enable else max(self.floor, min(self.upper, round(self._limit)))

    def due(self, now: float) -> bool:
        last = self._last_update
        return self.settings.enable and (last is None or now - last >= self.settings.interval_s)

    def update(self, signals: Sequence[ReplicaSignals], now: float) -> AdmissionDecision:
        """One control step from every replica's signals (index = replica, stable across calls)."""
        s = self.settings
        self._last_update = now
        preempted = self._preempted(signals)
        estimate, source = self._kv_estimate(signals)
        if source == "kv" and preempted > 0:
            estimate = min(estimate, self._limit * (1 - s.preemption_backoff))
        if source == "kv" and estimate > self._limit and self._pool_full(signals):
            estimate = self._limit
        if source == "none":
            estimate, source = self._latency_estimate(signals)
        if estimate is not None:
            step = s.gain * (estimate - self._limit) if source == "kv" else estimate - self._limit
            self._limit += min(step, s.max_raise * self._limit)
            self._limit = max(float(self.floor), min(float(self.upper), self._limit))
        self._record(source, preempted)
        return AdmissionDecision(self.limit, source, estimate, preempted)

    def take_stats(self) -> AdmissionStats:
        taken, self.stats = self.stats, AdmissionStats()
        return taken

    def fallback_share(self) -> float:
        return self.total_fallbacks / self.total_updates if self.total_updates else 0.0

    # internals
    def _preempted(self, signals: Sequence[ReplicaSignals]) -> float:
        """New preemptions since the last update; a counter that went down (engine restarted) counts from zero."""
        total = 0.0
        for i, sig in enumerate(signals):
            if sig.preemptions is None:
                continue
            before = self._preemptions.get(i)
            if before is not None:
                total += sig.preemptions - before if sig.preemptions >= before else sig.preemptions
            self._preemptions[i] = sig.preemptions
        return total

    def _kv_estimate(self, signals: Sequence[ReplicaSignals]) -> tuple[float | None, Source]:
        reporting = [sig for sig in signals if sig.kv_usage is not None and sig.running is not None]
        if not reporting:
            return None, "none"
        running = sum(sig.running for sig in reporting)
        usage = sum(sig.kv_usage for sig in reporting)
        if running > 0 and usage > 0:
            now = usage / running  # of one pool
            held = self._per_trajectory
            decayed = now if held is None else held + (now - held) / self.settings.kv_memory_updates
            self._per_trajectory = max(now, decayed)
        if self._per_trajectory is None:
            return float(self.upper), "kv"  # nothing has run yet: nothing bounds admission
        return self.settings.kv_target * len(reporting) / self._per_trajectory, "kv"

    def _pool_full(self, signals: Sequence[ReplicaSignals]) -> bool:
        return any(
            (sig.waiting or 0) > 0 and sig.kv_usage is not None and sig.kv_usage >= self.settings.kv_full
            for sig in signals
        )

    def _latency_estimate(self, signals: Sequence[ReplicaSignals]) -> tuple[float | None, Source]:
        turns = [sig.turn_s for sig in signals if sig.turn_s is not None and math.isfinite(sig.turn_s)]
        if not turns:
            return None, "none"
        mean = sum(turns) / len(turns)
        self._fastest_turn_s = mean if self._fastest_turn_s is None else min(self._fastest_turn_s, mean)
        s = self.settings
        if mean > s.latency_tolerance * self._fastest_turn_s:
            return self._limit * (1 - s.latency_step), "latency"
        return self._limit * (1 + s.latency_step), "latency"

    def _record(self, source: Source, preempted: float) -> None:
        st = self.stats
        st.updates += 1
        st.by_source[source] += 1
        st.preemptions += preempted
        limit = self.limit
        st.limit_sum += limit
        st.limit_min = limit if st.limit_min is None else min(st.limit_min, limit)
        st.limit_max = limit if st.limit_max is None else max(st.limit_max, limit)
        self.total_updates += 1
        self.total_fallbacks += source != "kv"
