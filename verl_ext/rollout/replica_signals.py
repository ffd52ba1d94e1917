"""The rollout replicas' state for adaptive admission (:mod:`verl_ext.rollout.admission_control`), read where verl's
server manager exposes it: each replica's HTTP address (``LLMServerManager.server_addresses``, ``host:port`` of the
engine's OpenAI server, which also serves Prometheus ``/metrics``) and the load balancer actor
(``global_load_balancer``; our :class:`~verl_ext.rollout.turn_router.TurnLoadBalancer` reports each replica's mean
turn time in ``get_status()["turn_latency_s"]``).

vLLM's names (``vllm/v1/metrics/loggers.py``; one series per engine core, summed): ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (0..1, averaged over engine cores) and the counter
``vllm:num_preemptions`` (``vllm:num_preemptions_total`` on the wire). vLLM fills them only with
``actor_rollout_ref.rollout.disable_log_stats=false`` (verl's default is true; ``+recipe=neos`` sets false).
A replica whose scrape fails or shows none of them gives no KV signal (``scrape_failures`` counts them).
"""

from __future__ import annotations

import logging
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from verl_ext.rollout.admission_control import ReplicaSignals

log = logging.getLogger(__name__)

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"


def parse_vllm_metrics(text: str) -> ReplicaSignals:
    """The admission signals in one ``/metrics`` page (Prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (RUNNING, WAITING, KV_USAGE, PREEMPTIONS):
                values[sample.name].append(float(sample.value))

    def total(name: str) -> float | None:
        return sum(values[name]) if values.get(name) else None

    running, waiting = total(RUNNING), total(WAITING)
    kv = values.get(KV_USAGE)
    return ReplicaSignals(
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        kv_usage=sum(kv) / len(kv) if kv else None,
        preemptions=total(PREEMPTIONS),
    )


class ReplicaProbe:
    """One :class:`ReplicaSignals` per replica address: the engine's metrics, plus the balancer's turn latency."""

    def __init__(self, addresses: Sequence[str], balancer: Any = None, timeout_s: float = 2.0) -> None:
        self.addresses = list(addresses)
        self.balancer = balancer
        self.timeout_s = timeout_s
        self.scrape_failures = 0
        self.latency_failures = 0

    def signals(self) -> list[ReplicaSignals]:
        latency = self._turn_latency()
        return [self._replica(address, latency.get(address)) for address in self.addresses]

    def _replica(self, address: str, turn_s: float | None) -> ReplicaSignals:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=self.timeout_s) as response:
                signals = parse_vllm_metrics(response.read().decode())
        except (OSError, ValueError) as exc:
            self.scrape_failures += 1
            log.debug("no metrics from rollout replica %s: %s", address, exc)
            signals = ReplicaSignals()
        if signals.kv_usage is None and signals.running is None:
            self.scrape_failures += signals != ReplicaSignals()  # a page without vLLM's gauges
        return ReplicaSignals(signals.running, signals.waiting, signals.kv_usage, signals.preemptions, turn_s)

    def _turn_latency(self) -> dict[str, float]:
        if self.balancer is None:
            return {}
        import ray

        try:
            status = ray.get(self.balancer.get_status.remote(), timeout=self.timeout_s)
        except Exception as exc:  # an actor error or timeout: this update goes without latency
            self.latency_failures += 1
            log.debug("no turn latency from the load balancer: %s", exc)
            return {}
        return {k: float(v) for k, v in (status.get("turn_latency_s") or {}).items()}
