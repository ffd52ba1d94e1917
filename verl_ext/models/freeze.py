"""Keep a vision-language policy's vision encoder and merger frozen during RL (Neos, Appendix C: "vision encoder and
multimodal merger frozen throughout", for the policy and for MEI).

verl 0.9.1 declares ``actor_rollout_ref.actor.freeze_vision_tower`` but no engine reads it, and the model is built
inside verl's engines (FSDP: a Hugging Face module; Megatron: an mbridge module), out of a plugin's reach. What every
engine does run is the model's forward. So the freeze acts there, once per model, through a process-wide torch
forward-pre-hook that the plugin installs in every process when ``NEOS_FREEZE_VISION_TOWER=1`` (the recipe sets it in
Ray's runtime environment next to verl's key):

- the vision tower's parameters get ``requires_grad=False``;
- the tower's outputs are detached, so no gradient reaches it even where an engine captured ``requires_grad`` when
  it built its optimizer: the parameters' ``.grad`` stays ``None`` and torch's optimizers skip them (no Adam step,
  no weight decay). On Megatron the distributed optimizer keeps fp32 grad buffers (zeros, not ``None``) for
  parameters that required grads when it was built: Adam's step is then exactly zero, while decoupled weight decay
  still shrinks those weights by ``lr * weight_decay`` per step (1e-8 at Neos' settings).

A model counts as vision-language when it has a submodule at one of ``VISION_ATTRS`` (Qwen2-VL, Qwen2.5-VL and
Qwen3-VL keep encoder and merger under ``visual``; mbridge's models under ``vision_model``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator

import torch
from torch import nn

ENV_FLAG = "NEOS_FREEZE_VISION_TOWER"
VISION_ATTRS = ("visual", "vision_tower", "vision_model")  # encoder + merger (projector) live under these

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
