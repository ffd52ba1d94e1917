"""The credit judge as ``+recipe=neos`` composes it: the judge's shipped defaults (output budget, images, timeout),
the fallback threshold, and a user's ``references`` override reaching the worker's settings."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl_ext.advantage.estimator import credit_params_from_config, max_fallback_share_from_config
from verl_ext.credit import CreditParams
from verl_ext.credit.judge import CREDIT_MAX_TOKENS, CreditJudgeConfig
from verl_ext.rollout.tq_worker import JUDGE_KEY


def _compose(*overrides: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=["+recipe=neos", *overrides])


def test_the_neos_recipe_gets_the_judges_shipped_defaults() -> None:
    job = _compose(f"+actor_rollout_ref.rollout.custom.{JUDGE_KEY}.references=/data/neos/references.jsonl")
    settings = OmegaConf.to_container(job.actor_rollout_ref.rollout.custom[JUDGE_KEY], resolve=True)
    assert (settings.pop("kind"), settings.pop("references")) == ("llm", "/data/neos/references.jsonl")
    config = CreditJudgeConfig.from_mapping(settings)  # what NeosAgentLoopWorker builds
    assert (config.max_tokens, config.images, config.timeout_s) == (CREDIT_MAX_TOKENS, True, 300.0)
    assert CREDIT_MAX_TOKENS == 8192
    assert max_fallback_share_from_config(job.algorithm) == 0.1
    assert credit_params_from_config(job.algorithm) == CreditParams()  # Table 12, the full Eq. 3
