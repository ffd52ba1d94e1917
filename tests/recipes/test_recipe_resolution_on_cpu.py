"""``python -m verl.trainer.main_ppo +recipe=neos --cfg job`` resolves from the installed package."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ..forks import main_ppo_jobs

URL_FROM_ENV = "${oc.env:NEOS_TOOL_SERVER_URL,http://127.0.0.1:8080}"  # --cfg job prints interpolations unresolved


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, dict]:
    """``python -m verl.trainer.main_ppo +recipe=RECIPE --cfg job`` for both paper recipes, as pip installed them."""
    recipes = {name: (f"+recipe={name}", "--cfg", "job") for name in ("neos", "modalsearcher")}
    return main_ppo_jobs(recipes, tmp_path_factory.mktemp("jobs"))


@pytest.fixture(scope="module")
def neos_job(jobs) -> dict:
    return jobs["neos"]


def test_recipes_come_from_site_packages_not_the_checkout():
    import recipes

    assert "site-packages" in str(Path(recipes.__file__).resolve()), "run the suite through `make test`"


def test_neos_recipe_sets_the_papers_loss_and_sampling_defaults(neos_job):
    actor = neos_job["actor_rollout_ref"]["actor"]
    assert (actor["clip_ratio"], actor["clip_ratio_c"], actor["loss_agg_mode"]) == (0.2, 3.0, "token-mean")
    assert (actor["entropy_coeff"], actor["use_kl_loss"], actor["ppo_epochs"]) == (0, False, 1)
    assert (actor["optim"]["lr"], actor["optim"]["weight_decay"], actor["optim"]["clip_grad"]) == (1e-6, 0.01, 1.0)
    rollout = neos_job["actor_rollout_ref"]["rollout"]
    assert (rollout["n"], rollout["temperature"], rollout["multi_turn"]["max_assistant_turns"]) == (8, 1.0, 50)


def compose_in_process(*overrides: str):
    """The same composition through Hydra's API (verl's config module, our search-path plugin), without a process."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_command_line_overrides_still_win_over_the_recipe():
    job = compose_in_process("+recipe=neos", "actor_rollout_ref.rollout.n=4")
    assert job.actor_rollout_ref.rollout.n == 4
    assert job.actor_rollout_ref.actor.clip_ratio_c == 3.0


def test_neos_recipe_wires_our_loop_estimator_and_reward(neos_job):
    assert neos_job["algorithm"]["adv_estimator"] == "neos_turn_credit"
    assert neos_job["algorithm"]["neos_credit"] == {"ablation": "full"}
    assert neos_job["trainer"]["v1"]["trainer_mode"] == "neos"
    assert neos_job["trainer"]["v1"]["neos"]["mei"]["enable"] is True
    assert neos_job["trainer"]["v1"]["neos"]["mei"]["update_every"] == 10  # K
    assert neos_job["actor_rollout_ref"]["actor"]["strategy"] == "megatron"
    assert neos_job["reward"]["reward_manager"]["name"] == "neos_answer_judge"
    rollout = neos_job["actor_rollout_ref"]["rollout"]
    assert rollout["agent"]["default_agent_loop"] == "neos_search_agent"
    assert rollout["agent"]["agent_loop_manager_class"] == "verl_ext.rollout.tq_worker.NeosAgentLoopManagerTQ"
    assert rollout["custom"]["neos_rollout"]["tool_server_url"] == URL_FROM_ENV
    assert rollout["custom"]["neos_credit_judge"]["kind"] == "llm"


def test_neos_smoke_is_the_neos_recipe_shrunk_to_one_gpu(monkeypatch):
    monkeypatch.setenv("NEOS_SMOKE_DATA", "/data/smoke")
    monkeypatch.setenv("NEOS_SMOKE_MODEL", "/models/tiny-vl")
    job = compose_in_process("+recipe=neos_smoke")
    assert job.trainer.v1.trainer_mode == "neos" and job.algorithm.adv_estimator == "neos_turn_credit"
    assert job.actor_rollout_ref.actor.clip_ratio_c == 3.0  # inherited from neos
    assert job.actor_rollout_ref.actor.strategy == "fsdp"  # not Megatron
    assert (job.actor_rollout_ref.rollout.name, job.actor_rollout_ref.rollout.n) == ("hf", 4)
    assert job.actor_rollout_ref.rollout.custom.neos_credit_judge.kind == "offline"
    assert job.trainer.v1.neos.mei.update_every == 2  # K
    assert job.trainer.v1.neos.sampler.enable is False  # one request at a time on the hf backend: plain batches
    assert (job.trainer.n_gpus_per_node, job.trainer.total_training_steps) == (1, 3)
    assert job.data.train_files == "/data/smoke/train.parquet"
    assert job.actor_rollout_ref.model.path == "/models/tiny-vl"


def test_the_tool_server_url_comes_from_the_environment_with_a_loopback_default(monkeypatch):
    monkeypatch.delenv("NEOS_TOOL_SERVER_URL", raising=False)
    for recipe in ("neos", "modalsearcher"):
        job = compose_in_process(f"+recipe={recipe}")
        assert job.actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url == "http://127.0.0.1:8080"
    monkeypatch.setenv("NEOS_TOOL_SERVER_URL", "http://tools.internal:9000")
    assert compose_in_process("+recipe=neos").actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url == (
        "http://tools.internal:9000"
    )


def test_modalsearcher_recipe_is_rloo_over_six_rollouts_with_the_react_loop(jobs):
    job = jobs["modalsearcher"]
    assert job["algorithm"]["adv_estimator"] == "rloo_vectorized"
    assert job["data"]["train_batch_size"] == 96
    assert job["actor_rollout_ref"]["actor"]["loss_agg_mode"] == "token-mean"
    rollout = job["actor_rollout_ref"]["rollout"]
    assert (rollout["n"], rollout["name"], rollout["multi_turn"]["max_assistant_turns"]) == (6, "vllm", 46)
    assert rollout["agent"]["default_agent_loop"] == "modalsearch_react_agent"
    assert rollout["custom"]["neos_rollout"] == {
        "tool_server_url": URL_FROM_ENV, "max_consecutive_errors": 3, "group_cache": True
    }
    assert job["reward"]["reward_manager"]["name"] == "modalsearch_reward"


def test_every_name_a_recipe_uses_is_registered_by_us_or_verl(monkeypatch):
    import verl  # noqa: F401  (loads our plugin)
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    monkeypatch.setenv("NEOS_CURVE_DATA", "/data/curve")
    monkeypatch.setenv("NEOS_CURVE_POLICY", "/models/warm")
    for recipe in ("neos", "neos_smoke", "neos_curve", "modalsearcher"):
        job = compose_in_process(f"+recipe={recipe}")
        assert job.trainer.v1.trainer_mode in TRAINER_REGISTRY
        assert job.algorithm.adv_estimator in ADV_ESTIMATOR_REGISTRY
        assert job.actor_rollout_ref.rollout.agent.default_agent_loop in _agent_loop_registry
        assert job.reward.reward_manager.name in REWARD_MANAGER
    assert "grpo" in ADV_ESTIMATOR_REGISTRY  # neos_curve's other estimator


def test_unknown_recipe_fails_with_hydras_message():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="no_such_recipe"):
        compose_in_process("+recipe=no_such_recipe")


def test_neos_path_resolver_returns_installed_files_and_refuses_escapes():
    import verl  # noqa: F401  (registers the resolver through the plugin)

    cfg = OmegaConf.create({"p": "${neos_path:recipe/neos.yaml}", "bad": "${neos_path:../setup.py}",
                            "gone": "${neos_path:recipe/none.yaml}"})
    assert Path(cfg.p).is_file() and Path(cfg.p).read_text().startswith("# @package _global_")
    with pytest.raises(Exception, match="relative path inside the recipes package"):
        _ = cfg.bad
    with pytest.raises(Exception, match="not shipped"):
        _ = cfg.gone
