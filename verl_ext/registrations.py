"""The one list of everything this project registers into verl, and how to look each one up.

verl loads plugins on ``import verl`` and swallows their import errors (debug log only), so a broken plugin shows up
as a missing registry entry much later, inside a Ray worker. Keeping the list here lets ``verl_ext.plugin`` import
exactly these modules and lets the tests assert every entry is present after a plain ``import verl``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

Kind = Literal[
    "adv_estimator", "agent_loop", "reward_manager", "trainer", "omegaconf_resolver", "rollout_backend", "verl_fix"
]


@dataclass(frozen=True)
class Registration:
    kind: Kind
    name: str
    module: str  # importing this module performs the registration


# Names are part of the public contract (users put them in their configs); later issues append their entries.
REGISTRATIONS: tuple[Registration, ...] = (
    Registration("omegaconf_resolver", "neos_path", "verl_ext.config"),
    Registration("reward_manager", "neos_answer_judge", "verl_ext.reward.managers"),
    Registration("reward_manager", "modalsearch_reward", "verl_ext.reward.managers"),
    Registration("agent_loop", "neos_search_agent", "verl_ext.rollout.agent_loop"),
    Registration("agent_loop", "modalsearch_react_agent", "verl_ext.rollout.agent_loop"),
    Registration("adv_estimator", "neos_turn_credit", "verl_ext.advantage.estimator"),
    Registration("rollout_backend", "hf", "verl_ext.rollout.hf_replica"),
    Registration("trainer", "neos", "verl_ext.trainer.neos_trainer"),
    Registration("verl_fix", "verl.workers.engine_workers.maybe_fix_3d_position_ids", "verl_ext.compat"),
    Registration("verl_fix", "verl.models.transformers.qwen2_vl._get_input_embeds", "verl_ext.compat"),
)


def is_registered(reg: Registration) -> bool:
    """Whether ``reg`` is present in the verl (or OmegaConf) registry it belongs to, in this process."""
    if reg.kind == "omegaconf_resolver":
        from omegaconf import OmegaConf

        return OmegaConf.has_resolver(reg.name)
    if reg.kind == "adv_estimator":
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        return reg.name in ADV_ESTIMATOR_REGISTRY
    if reg.kind == "agent_loop":
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

        return reg.name in _agent_loop_registry
    if reg.kind == "reward_manager":
        from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

        return reg.name in REWARD_MANAGER
    if reg.kind == "trainer":
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

        return reg.name in TRAINER_REGISTRY
    if reg.kind == "rollout_backend":  # a backend needs both: replica (trainer process) and adapter (workers)
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY
        from verl.workers.rollout.replica import RolloutReplicaRegistry

        return reg.name in RolloutReplicaRegistry._registry and (reg.name, "async") in _ROLLOUT_REGISTRY
    if reg.kind == "verl_fix":  # a verl 0.9.1 bug fixed on plugin load: the function verl calls (module.name) is ours
        module, name = reg.name.rsplit(".", 1)
        return getattr(getattr(importlib.import_module(module), name), "_neos_fix", False)
    raise ValueError(f"unknown registration kind {reg.kind!r}")


def missing() -> list[Registration]:
    return [reg for reg in REGISTRATIONS if not is_registered(reg)]


def register_all() -> None:
    """Import every registering module once (idempotent: Python caches modules)."""
    for module in dict.fromkeys(reg.module for reg in REGISTRATIONS):
        importlib.import_module(module)
