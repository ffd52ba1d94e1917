"""Adaptive admission: the controller's decisions from given replica signals (hand-computed), vLLM's /metrics page,
and the sampler buffer's use of the limit."""

from __future__ import annotations

import pytest

from verl_ext.rollout.admission_control import AdmissionController, AdmissionSettings, ReplicaSignals
from verl_ext.rollout.replica_signals import parse_vllm_metrics

PLAIN = {"gain": 1.0, "max_raise": 1.0, "min_per_replica": 1, "kv_target": 1.0}


def controller(upper: int = 1000, replicas: int = 2, **settings) -> AdmissionController:
    return AdmissionController(AdmissionSettings(**{**PLAIN, **settings}), upper, replicas)


def kv(running: int, usage: float, **more) -> ReplicaSignals:
    return ReplicaSignals(running=running, kv_usage=usage, **more)


def test_the_limit_is_the_in_flight_count_whose_contexts_fill_the_pools():
    # 20 running hold 0.5 + 0.3 = 0.8 pools: 0.04 a trajectory; 2 pools hold 50
    decision = controller().update([kv(10, 0.5), kv(10, 0.3)], now=0.0)
    assert (decision.limit, decision.source, decision.estimate) == (50, "kv", pytest.approx(50.0))
    # kv_target 1.2 (the default): 60; half the gap per update (gain 0.5) from 1,000: 530
    assert controller(kv_target=1.2).update([kv(10, 0.5), kv(10, 0.3)], 0.0).limit == 60
    assert controller(gain=0.5).update([kv(10, 0.5), kv(10, 0.3)], 0.0).limit == 525


def test_raises_are_capped_cuts_are_not_and_the_bounds_hold():
    c = controller(initial=100, max_raise=0.05)
    assert c.update([kv(10, 0.01), kv(10, 0.01)], 0.0).limit == 105  # estimate 2,000: +5% only
    assert controller(initial=100).update([kv(10, 0.01), kv(10, 0.01)], 0.0).limit == 200  # max_raise 1: x2
    assert controller(initial=600).update([kv(10, 0.01), kv(10, 0.01)], 0.0).limit == 1000  # the upper bound
    floor = controller(min_per_replica=16)  # 2 replicas: at least 32
    assert floor.floor == 32 and floor.update([kv(10, 1.0), kv(10, 1.0)], 0.0).limit == 32  # estimate 20


def test_preemptions_cut_the_limit_and_waiting_on_a_full_pool_forbids_a_raise():
    c = controller(initial=600, preemption_backoff=0.1)
    first = c.update([kv(10, 0.01, preemptions=5.0), kv(10, 0.01, preemptions=0.0)], 0.0)
    assert (first.preemptions, first.limit) == (0.0, 1000)  # the first reading is the counters' baseline
    second = c.update([kv(10, 0.01, preemptions=8.0), kv(10, 0.01, preemptions=1.0)], 10.0)
    assert (second.preemptions, second.limit) == (4.0, 900)  # 3 + 1 new: 1,000 x 0.9
    # 200 running hold 0.97 pools: estimate 2 / 0.00485 = 412 > 300, but replica 0 queues on a full pool (>= 0.95)
    assert controller(initial=300).update([kv(100, 0.96, waiting=3), kv(100, 0.01)], 0.0).limit == 300
    assert controller(initial=300).update([kv(100, 0.96), kv(100, 0.01)], 0.0).limit == 412  # no queue: raise


def test_the_per_trajectory_share_is_remembered_at_its_highest_and_decays():
    c = controller(kv_memory_updates=10)
    assert c.update([kv(10, 0.5), kv(10, 0.3)], 0.0).limit == 50  # 0.04 a trajectory
    # a fresh round: 0.002 a trajectory now; remembered 0.04 + (0.002 - 0.04) / 10 = 0.0362 -> 2 / 0.0362 = 55.2
    assert c.update([kv(10, 0.02), kv(10, 0.02)], 10.0).limit == 55
    assert c.update([kv(10, 1.0), kv(10, 1.0)], 20.0).limit == 20  # a larger share counts at once


def test_turn_latency_steers_where_no_replica_reports_kv_and_no_signal_holds():
    c = controller(initial=500, latency_tolerance=1.5, latency_step=0.1)
    assert c.update([ReplicaSignals(turn_s=2.0), ReplicaSignals(turn_s=2.0)], 0.0).limit == 550  # fastest: raise
    d = c.update([ReplicaSignals(turn_s=4.0), ReplicaSignals(turn_s=3.0)], 10.0)  # 3.5 > 1.5 x 2: cut
    assert (d.limit, d.source) == (495, "latency")
    held = c.update([ReplicaSignals(), ReplicaSignals()], 20.0)
    assert (held.limit, held.source) == (495, "none")
    stats = c.take_stats()
    assert (stats.updates, stats.by_source, stats.limit_min, stats.limit_max) == (
        3, {"kv": 0, "latency": 2, "none": 1}, 495, 550
    )
    assert c.fallback_share() == 1.0 and c.take_stats().updates == 0


def test_off_keeps_the_constant_and_updates_wait_for_the_interval():
    off = AdmissionController(AdmissionSettings(enable=False), 1024, 8)
    assert off.limit == 1024 and not off.due(0.0)
    c = controller(interval_s=10.0)
    assert c.due(0.0)
    c.update([kv(10, 0.5), kv(10, 0.3)], 0.0)
    assert not c.due(9.9) and c.due(10.0)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        AdmissionSettings(kv_target=0)
    with pytest.raises(ValueError):
        AdmissionSettings(unknown=1)
    with pytest.raises(ValueError):
        AdmissionController(AdmissionSettings(), 0, 2)


PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 30.0
vllm:num_requests_running{engine="1",model_name="m"} 12.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_total{engine="1",model_name="m"} 2.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 12345.0
"""


def test_vllm_metrics_page_sums_engine_cores_and_averages_kv_usage():
    signals = parse_vllm_metrics(PAGE)
    assert (signals.running, signals.waiting, signals.preemptions) == (42, 4, 9.0)
    assert signals.kv_usage == pytest.approx(0.7)
    assert parse_vllm_metrics("# nothing here\n") == ReplicaSignals()
