"""``python -m verl.trainer.main_ppo +recipe=neos --cfg job`` resolves from the installed package."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf


def compose_job(*overrides: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of a source checkout on the path: only what pip installed
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return yaml.safe_load(out.stdout)


@pytest.fixture(scope="module")
def neos_job() -> dict:
    return compose_job("+recipe=neos")


def test_recipes_come_from_site_packages_not_the_checkout():
    import recipes

    assert "site-packages" in str(Path(recipes.__file__).resolve()), "run the suite through `make test`"


def test_neos_recipe_sets_the_papers_loss_and_sampling_defaults(neos_job):
    actor = neos_job["actor_rollout_ref"]["actor"]
    assert (actor["clip_ratio"], actor["clip_ratio_c"], actor["loss_agg_mode"]) == (0.2, 3.0, "token-mean")
    assert (actor["entropy_coeff"], actor["use_kl_loss"], actor["ppo_epochs"]) == (0, False, 1)
    assert (actor["optim"]["lr"], actor["optim"]["weight_decay"], actor["grad_clip"]) == (1e-6, 0.01, 1.0)
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


def test_neos_recipe_wires_our_reward_manager_and_packaged_tool_config():
    import verl  # noqa: F401  (registers the neos_path resolver through the plugin)
    from verl_ext.registrations import REGISTRATIONS

    job = compose_in_process("+recipe=neos")
    manager = job.reward.reward_manager
    assert (manager.source, manager.name) == ("register", "neos_answer_judge")
    assert ("reward_manager", "neos_answer_judge") in {(r.kind, r.name) for r in REGISTRATIONS}
    tool_config = Path(job.actor_rollout_ref.rollout.multi_turn.tool_config_path)  # resolved on access
    assert tool_config.is_file() and "site-packages" in str(tool_config)
    names = [t["tool_schema"]["function"]["name"] for t in yaml.safe_load(tool_config.read_text())["tools"]]
    assert names == ["TextSearch", "WebVisit", "ImageSearch", "ReverseImageSearch", "FetchImage", "CropImage"]


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
