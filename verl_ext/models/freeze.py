"""Keep a vision-language policy's vision encoder and merger frozen during RL (Neos, Appendix C: "vision encoder and
multimodal merger frozen throughout", for the policy and for MEI).

verl 0.9.1 declares ``actor_rollout_ref.actor.freeze_vision_tower`` but no engine reads it. Freezing must happen before
an engine builds its optimizer (and, on Megatron, its DDP gradient buffers), or the "frozen" weights still sit in the
optimizer with zero gradients, where decoupled weight decay moves them. Each engine gets the mechanism it honours:

- **Megatron** (the paper's engine): verl hands every key of ``actor.megatron.override_transformer_config`` to the
  Megatron-Bridge model provider as an attribute, and the vision-language providers (Qwen2.5-VL, Qwen3-VL,
  Qwen3.5-VL) set ``requires_grad=False`` on the encoder (``freeze_vision_model``) and the merger
  (``freeze_vision_projection``) in ``provide()``, before the pre-wrap hooks, DDP and the distributed optimizer: neither
  DDP's buffers nor the optimizer hold the tower. The neos recipe sets both from ``freeze_vision_tower``
  (``recipes/neos_parallel/paper_32gpu.yaml``).
- **FSDP** and other engines that build a Hugging Face module: a process-wide torch forward-pre-hook that the plugin
  installs in every process when ``NEOS_FREEZE_VISION_TOWER=1`` (the recipe sets it in Ray's runtime environment). At
  the model's first forward it sets ``requires_grad=False`` on the tower's parameters and detaches the tower's
  outputs, so no gradient reaches the tower even where the engine built its optimizer before that forward: the
  parameters' ``.grad`` stays ``None`` and torch's optimizers skip them (no Adam step, no weight decay). Exact on
  FSDP2 (``strategy: fsdp2``, one sharded tensor per parameter). On FSDP1 (``strategy: fsdp``, verl's
  ``use_orig_params: false``) the tower's parameters outside a wrapped vision block (Qwen-VL: patch embedding and
  merger) share the root ``FlatParameter`` with the language model's embeddings, so they get zero gradients, not
  ``None``: no Adam step, but AdamW's decoupled decay of ``lr * weight_decay`` per step (1e-8 at Neos' settings,
  below half an fp32 ulp, so the fp32 weights do not move; at larger settings they would).

:func:`vision_freeze_gap` says when a config would not do what ``freeze_vision_tower`` says (true and no mechanism
acts, or false and the hook still freezes): the neos trainer refuses to start then. :func:`vision_freeze_caveat` says
when the freeze is only approximate (the trainer logs a warning).

A model counts as vision-language when it has a submodule at one of ``VISION_ATTRS`` (Qwen2-VL, Qwen2.5-VL and
Qwen3-VL keep encoder and merger under ``visual``; Megatron-Bridge's Qwen3-VL models under ``vision_model``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

ENV_FLAG = "NEOS_FREEZE_VISION_TOWER"
VISION_ATTRS = ("visual", "vision_tower", "vision_model")  # encoder + merger (projector) live under these
# Megatron-Bridge vision-language provider attributes and the values a frozen tower needs: the encoder, the merger
# (projector, with Qwen3-VL's deepstack mergers), and the language model said trainable outright (Megatron-Bridge's
# Qwen3-VL MoE provider defaults it frozen).
MEGATRON_PROVIDER_FREEZE = {"freeze_vision_model": True, "freeze_vision_projection": True,
                            "freeze_language_model": False}

_seen: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_frozen: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_handle: torch.utils.hooks.RemovableHandle | None = None


def vision_towers(model: nn.Module) -> Iterator[nn.Module]:
    """The vision encoder(s) + merger of ``model``, found at ``VISION_ATTRS`` on it or on its ``.model``."""
    for holder in (model, getattr(model, "model", None)):
        if isinstance(holder, nn.Module):
            for attr in VISION_ATTRS:
                tower = getattr(holder, attr, None)
                if isinstance(tower, nn.Module):
                    yield tower


def _detach(value):
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        detached = [_detach(v) for v in value]
        return type(value)(*detached) if hasattr(value, "_fields") else type(value)(detached)
    if isinstance(value, dict):  # transformers' ModelOutput is a dict subclass with attribute access
        for key in list(value.keys()):
            value[key] = _detach(value[key])
        return value
    return value


def _detach_outputs(module: nn.Module, args, output):
    return _detach(output)


def freeze_vision_tower(model: nn.Module) -> int:
    """Freeze ``model``'s vision tower(s) in place (idempotent); returns how many parameters were frozen."""
    count = 0
    for tower in vision_towers(model):
        if tower in _frozen:
            continue
        for param in tower.parameters():
            param.requires_grad_(False)
            count += 1
        tower.register_forward_hook(_detach_outputs)
        _frozen.add(tower)
    return count


def _on_forward(module: nn.Module, args) -> None:
    # Called before every module's forward in the process: one weak-set lookup after the first call of each module.
    if module in _seen:
        return
    _seen.add(module)
    if any(True for _ in vision_towers(module)):
        freeze_vision_tower(module)


def install(enabled: bool | None = None) -> bool:
    """Install the process-wide hook when ``enabled`` (default: ``$NEOS_FREEZE_VISION_TOWER == "1"``); idempotent."""
    global _handle
    if enabled is None:
        enabled = os.environ.get(ENV_FLAG, "0") == "1"
    if enabled and _handle is None:
        _handle = nn.modules.module.register_module_forward_pre_hook(_on_forward)
    return _handle is not None


def uninstall() -> None:
    """Remove the process-wide hook (models frozen so far stay frozen)."""
    global _handle
    if _handle is not None:
        _handle.remove()
        _handle = None


def vision_freeze_gap(config: Mapping[str, Any], env: Mapping[str, str] = os.environ) -> str | None:
    """Why the policy's vision tower would not be frozen or trained as ``actor_rollout_ref.actor.freeze_vision_tower``
    says with this (verl ``main_ppo``) config, or ``None`` when it would. ``env``: the trainer process's environment,
    where the hook's flag may come from the Ray cluster instead of the config."""
    config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    actor = "actor_rollout_ref.actor"
    freeze = bool(OmegaConf.select(config, f"{actor}.freeze_vision_tower", default=False))
    env_vars = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars", default=None) or {}
    hook = str(env_vars.get(ENV_FLAG, env.get(ENV_FLAG, "0"))) == "1"
    if not freeze:
        if hook:  # the hook acts in every worker, whatever the engine
            return (f"actor_rollout_ref.actor.freeze_vision_tower=false, but {ENV_FLAG}=1 freezes the tower in every "
                    f"worker: drop ray_kwargs.ray_init.runtime_env.env_vars.{ENV_FLAG}")
        return None
    strategy = OmegaConf.select(config, f"{actor}.strategy")
    if strategy == "megatron":
        if OmegaConf.select(config, f"{actor}.megatron.vanilla_mbridge", default=False):
            return ("actor_rollout_ref.actor.freeze_vision_tower=true on Megatron needs Megatron-Bridge's providers: "
                    "set actor_rollout_ref.actor.megatron.vanilla_mbridge=false")
        overrides = OmegaConf.select(config, f"{actor}.megatron.override_transformer_config", default=None) or {}
        missing = [key for key, value in MEGATRON_PROVIDER_FREEZE.items() if overrides.get(key) is not value]
        if missing:
            keys = " and ".join(f"actor_rollout_ref.actor.megatron.override_transformer_config.{key}="
                                f"{str(MEGATRON_PROVIDER_FREEZE[key]).lower()}" for key in missing)
            return f"actor_rollout_ref.actor.freeze_vision_tower=true on Megatron needs {keys}"
        return None
    if not hook:
        return (f"actor_rollout_ref.actor.freeze_vision_tower=true on {strategy} needs "
                f"ray_kwargs.ray_init.runtime_env.env_vars.{ENV_FLAG}='1' (the hook that freezes the tower)")
    return None


def vision_freeze_caveat(config: Mapping[str, Any]) -> str | None:
    """A warning when the freeze is real but not exact with this config (FSDP1: see the module docstring), or None."""
    config = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    actor = "actor_rollout_ref.actor"
    if not OmegaConf.select(config, f"{actor}.freeze_vision_tower", default=False):
        return None
    if OmegaConf.select(config, f"{actor}.strategy") != "fsdp":
        return None
    return ("vision tower frozen on FSDP1: its parameters that share the root FlatParameter with the language model "
            "(patch embedding, merger) keep zero gradients in the optimizer, so AdamW's weight decay still scales them "
            "by 1 - lr*weight_decay per step; actor_rollout_ref.actor.strategy=fsdp2 freezes them exactly")
