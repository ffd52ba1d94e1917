"""The turn router's decisions, hand-computed: loads in tokens, prefix mirrors, the cache-aware margin, down replicas.

The router is framework-free (``verl_ext.rollout.routing``); ``test_turn_router_on_cpu.py`` runs it as verl's load
balancer behind verl's real server manager and our agent loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pydantic import ValidationError

from verl_ext.rollout.routing import NO_REPLICA, NoReplicaError, ReplicaCost, RouterSettings, TurnRouter, prefix_keys

ROUTERS = Path(__file__).resolve().parents[2] / "recipes" / "routers"


def router(policy: str, replicas=("a", "b", "c"), **settings) -> TurnRouter:
    return TurnRouter(RouterSettings(policy=policy, **settings), replicas)


def test_shipped_defaults_and_router_files():
    s = RouterSettings()
    assert (s.policy, s.expected_generation_tokens, s.block_tokens) == ("sticky", 512, 256)
    assert (s.balance_abs_threshold, s.balance_rel_threshold, s.cache_threshold) == (131_072, 1.5, 0.3)
    for path in ROUTERS.glob("*.yaml"):
        data = OmegaConf.to_container(OmegaConf.load(path))
        assert data.pop("router_class") == "verl_ext.rollout.turn_router.TurnLoadBalancer"
        assert RouterSettings.model_validate(data).policy == path.stem
    assert sorted(p.stem for p in ROUTERS.glob("*.yaml")) == ["cache_aware", "cost_aware", "least_loaded", "sticky"]


def test_unknown_policy_or_field_is_refused():
    with pytest.raises(ValidationError, match="policy"):
        RouterSettings(policy="round_robin")
    with pytest.raises(ValidationError, match="margin"):
        RouterSettings.model_validate({"margin": 3})


def test_prefix_keys_cover_whole_blocks_and_name_the_whole_prefix():
    a = prefix_keys(list(range(10)), 4)
    assert len(a) == 2  # tokens 8, 9 are a partial block
    assert prefix_keys(list(range(12)), 4)[:2] == a  # an extended prompt keeps its prefix's keys
    assert prefix_keys([99, *range(1, 10)], 4)[1] != a[1]  # a different first block changes every later key


def test_load_is_prompt_plus_expected_generation_and_release_returns_it():
    r = router("least_loaded", expected_generation_tokens=100)
    d = r.route("ep1", [], prompt_tokens=1000, max_tokens=None)
    assert d.replica == "a" and r.replicas["a"].load_tokens == 1100
    d2 = r.route("ep2", [], prompt_tokens=50, max_tokens=30)  # max_tokens below the estimate caps it
    assert d2.replica == "b" and r.replicas["b"].load_tokens == 80
    r.release("a", "ep1")
    assert (r.replicas["a"].load_tokens, r.replicas["a"].in_flight) == (0, 0)
    r.release("a", "ep1")  # a second release of the same request changes nothing
    assert r.replicas["a"].load_tokens == 0


def test_least_loaded_spreads_one_episodes_sequential_turns():
    """Alone, every turn sees equal (zero) loads: the replica given the least work so far takes it."""
    r = router("least_loaded", expected_generation_tokens=10)
    placed = []
    for prompt in (100, 200, 300, 400):
        placed.append(r.route("ep", [], prompt).replica)
        r.release(placed[-1], "ep")
    assert placed == ["a", "b", "c", "a"]


def test_least_loaded_goes_where_the_outstanding_tokens_are_fewest_not_the_requests():
    r = router("least_loaded", expected_generation_tokens=10)
    r.route("long", [], 50_000)  # a: one request, 50,010 tokens
    r.route("s1", [], 100)  # b
    r.route("s2", [], 100)  # c
    r.route("s3", [], 100)  # b or c (110 each; b was given no more work than c)
    assert r.route("next", [], 100).replica != "a"  # a has the fewest requests but the most work


def test_sticky_is_verls_behaviour_first_turn_to_fewest_in_flight_then_stays():
    r = router("sticky", seed=1)
    first = r.route("ep", [], 100).replica
    for _ in range(5):
        r.release(first, "ep")
        assert r.route("ep", [], 100_000).replica == first
    others = {r.route(f"o{i}", [], 10).replica for i in range(2)}
    assert others == {"a", "b", "c"} - {first}  # one in flight on `first`: new episodes go to the idle ones


def test_cache_aware_stays_with_the_prefix_until_its_load_exceeds_both_margins():
    r = router("cache_aware", expected_generation_tokens=1, balance_abs_threshold=1000, block_tokens=4)
    prompt = list(range(40))
    keys = prefix_keys(prompt, 4)
    home = r.route("ep", keys, 40).replica
    r.release(home, "ep")
    d = r.route("ep", prefix_keys(prompt + [7] * 8, 4), 48)  # the next turn: 40 of its 48 tokens are cached
    assert (d.replica, d.reason, d.cached_tokens) == (home, "cache_hit", 40)
    r.release(home, "ep")
    others = [rid for rid in r.replicas if rid != home]

    def loads(held: int, low: int) -> None:  # the holder's and the other replicas' outstanding tokens
        r.replicas[home].load_tokens = held
        for rid in others:
            r.replicas[rid].load_tokens = low

    loads(900, 0)  # 900 above the least loaded: under the 1,000-token margin, stay
    assert r.route("ep", keys, 40).reason == "cache_hit"
    r.release(home, "ep")
    loads(10_000, 8_000)  # 2,000 above, but not 1.5x: stay
    assert r.route("ep", keys, 40).reason == "cache_hit"
    r.release(home, "ep")
    loads(2_000, 0)  # above both: leave for the least loaded, where the prefix is recomputed
    d = r.route("ep", keys, 40)
    assert d.replica != home and d.reason == "rebalanced" and d.cached_tokens == 0
    assert r.counters["rebalanced"] == 1 and r.counters["cache_hit"] == 3


def test_cache_aware_without_a_useful_match_goes_least_loaded():
    r = router("cache_aware", block_tokens=4, cache_threshold=0.5)
    r.route("x", prefix_keys(list(range(8)), 4), 8)  # caches 2 blocks on "a"
    d = r.route("y", prefix_keys(list(range(8)) + list(range(100, 120)), 4), 28)  # 8 of 28 tokens match: < 0.5
    assert (d.replica, d.reason) == ("b", "no_cache_match")


def test_replica_cost_by_hand():
    c = ReplicaCost()
    # 27,000 tokens from scratch: 27,000 linear + 27,000^2 / (2 x 27,000) attention first-token-equivalents
    assert c.prefill_s(0, 27_000) == pytest.approx(1.15e-5 * 40_500)
    assert c.prefill_s(27_000, 27_000) == 0.0 and c.prefill_s(500, 100) == 0.0
    assert c.step_s(100_000, 10) == pytest.approx(8e-3 + 10 * 1e-5 + 100_000 * 1.1e-8)
    assert c.kv_capacity_tokens == 1_600_000 and RouterSettings().cache_capacity_tokens == 1_600_000


def cost_router(**settings) -> TurnRouter:
    """Round numbers: a 1,000-token KV pool, 10 ms a decode step whatever the batch, 1 ms a prefilled token (the
    attention term is negligible at 1e9), turns of 10 generated tokens, 10-token blocks."""
    cost = ReplicaCost(
        kv_capacity_tokens=1000,
        decode_step_s=0.01,
        decode_s_per_sequence=0.0,
        decode_s_per_context_token=0.0,
        prefill_s_per_token=0.001,
        prefill_attention_tokens=10**9,
    )
    return router("cost_aware", block_tokens=10, expected_generation_tokens=10, cost=cost, **settings)


def test_cost_aware_moves_a_turn_only_when_the_queue_it_avoids_outweighs_the_recompute_it_causes():
    r = cost_router()
    keys = prefix_keys(list(range(100)), 10)
    first = r.route("ep", keys, 100)
    assert (first.replica, first.reason) == ("a", "no_cache_match")  # nothing cached anywhere: all cost the same
    r.release("a", "ep")

    def state(home_load: int, home_in_flight: int, other_load: int = 0, other_in_flight: int = 0) -> None:
        for rid, (load, n) in {"a": (home_load, home_in_flight), "b": (other_load, other_in_flight)}.items():
            r.replicas[rid].load_tokens, r.replicas[rid].in_flight = load, n
        r.replicas["c"].load_tokens, r.replicas["c"].in_flight = 10**6, 50  # far behind: never chosen

    # home a: 890 outstanding + 110 = the pool, no wait: 10 steps = 0.1 s. b: 100 tokens of prefill 0.1 s + 0.1 s.
    state(890, 1)
    d = r.route("ep", keys, 100)
    assert (d.replica, d.reason, d.cached_tokens) == ("a", "cache_hit", 100)
    # home a: 2,000 outstanding, 1,110 over the pool drain at 1,000 / (10 x 0.01 s): 0.111 s of wait + 0.1 s.
    # b runs one request that the 0.1 s recompute would stall: 0.2 + 0.1 = 0.3 s > 0.211 s: stay
    state(2000, 2, other_load=100, other_in_flight=1)
    assert r.route("ep", keys, 100).reason == "cache_hit"
    # the same with b idle: 0.2 s. Moving saves 0.011 s more than the recompute costs.
    state(2000, 2)
    d = r.route("ep", keys, 100)
    assert (d.replica, d.reason, d.cached_tokens) == ("b", "moved", 0)
    assert r.counters == {"no_cache_match": 1, "cache_hit": 2, "moved": 1}
    assert r.status()["replicas"]["a"]["routed"] == 3 and r.status()["replicas"]["b"]["routed"] == 1


def test_cost_aware_prefers_the_episodes_last_replica_among_equal_prefixes():
    r = cost_router()
    shared = prefix_keys(list(range(100)), 10)  # the group's question: the same prompt for its G trajectories
    assert r.route("sibling 1", shared, 100).replica == "a"
    r.release("a", "sibling 1")
    r.replicas["b"].mirror.insert(shared)  # b holds the same prompt (another sibling ran there)
    r.replicas["b"].assigned_tokens = 0  # and was given less work so far: without a last replica, b would win
    d = r.route("sibling 1", prefix_keys(list(range(120)), 10), 120)  # its next turn: equal matches, equal costs
    assert (d.replica, d.reason) == ("a", "cache_hit")


@pytest.mark.parametrize("policy", ["sticky", "least_loaded", "cache_aware", "cost_aware"])
def test_a_down_or_removed_replica_is_never_chosen(policy):
    r = router(policy, block_tokens=4)
    keys = prefix_keys(list(range(16)), 4)
    home = r.route("ep", keys, 16).replica
    r.release(home, "ep")
    assert r.set_down(home, True)
    for i in range(6):
        chosen = r.route("ep" if i % 2 == 0 else f"new{i}", keys, 16).replica
        assert chosen != home
    gone = next(rid for rid in r.replicas if rid != home)
    r.remove([gone])  # verl removes a replica from its balancer while it sleeps for a weight update
    (last,) = set(r.replicas) - {home, gone}
    assert {r.route(f"n{i}", keys, 16).replica for i in range(4)} == {last}
    if policy == "sticky":
        assert r.counters["sticky_replica_unavailable"] >= 1
    if policy in ("cache_aware", "cost_aware"):
        assert r.counters["down_skipped"] >= 1  # the down replica held the best prefix: counted


def test_no_replica_up_raises_verls_error_and_counts_it():
    r = router("least_loaded", replicas=("a",))
    r.set_down("a", True)
    with pytest.raises(NoReplicaError, match=NO_REPLICA):
        r.route("ep", [], 10)
    assert r.counters["no_replica"] == 1
    assert r.set_down("a", False) and r.route("ep", [], 10).replica == "a"


def test_clear_forgets_placements_and_prefixes():
    r = router("cache_aware", block_tokens=4)
    keys = prefix_keys(list(range(16)), 4)
    r.route("ep", keys, 16)
    assert r.clear() == 0  # cache_aware keeps no sticky map
    assert all(len(s.mirror) == 0 for s in r.replicas.values())
    s = router("sticky")
    s.route("ep", [], 1)
    assert s.clear() == 1 and not s.sticky


def test_the_neos_recipe_routes_turns_sticky_through_verls_router_hook():
    """``+recipe=neos`` sets verl's ``rollout.router_config_path`` to the shipped sticky file (the only policy >= 0.98x
    sticky in every simulated regime, docs/routing.md); what verl's ``get_router_handle`` would load from it builds
    our balancer with the default settings and that policy."""
    from hydra import compose, initialize_config_module
    from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

    import verl_ext.config  # noqa: F401  (the neos_path resolver, as the plugin registers it)
    from verl_ext.rollout.turn_router import TurnLoadBalancer

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        job = compose(config_name="ppo_trainer", overrides=["+recipe=neos"])
    path = job.actor_rollout_ref.rollout.router_config_path
    assert Path(path).name == "sticky.yaml" and Path(path).is_file()
    loaded = _load_router_yaml(path)
    assert _resolve_router_class(loaded["router_class"]) is TurnLoadBalancer
    assert TurnLoadBalancer({}, loaded).settings == RouterSettings()
