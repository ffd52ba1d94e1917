"""A fix for a verl 0.9.1 bug that stops the actor update of every Qwen-VL model, applied on plugin load.

Qwen-VL rows carry 3-D ``position_ids`` (``(4, seq_len)`` per row), stored in TransferQueue as a jagged tensor whose
ragged dimension is the second one. On the H200 image (torch 2.11) the copy that reaches the actor worker's
``train_mini_batch`` has the right values (``(4, total_tokens)``) but wrong row offsets (``[4, 4, 4, 4]`` instead of the
row lengths), so verl's mini-batch split dies in ``unbind`` (``split_with_sizes expects split_sizes to sum exactly to
45 ... got [4, 4, 4, 4]``). verl's own ``maybe_fix_3d_position_ids`` resets only ``_ragged_idx``. Ours then checks the
offsets against ``input_ids`` (same rows, same lengths by construction) and, where they disagree but the values fit,
rebuilds the jagged tensor from the values and ``input_ids``' offsets. A tensor that is already right is left alone,
so the fix is a no-op wherever torch keeps the offsets (torch 2.14 on CPU does).

verl imports the function by name into ``engine_workers`` and ``engine.base``; all three names are replaced.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
_PATCHED = "_neos_checks_offsets"  # verl_ext.registrations looks for it
_MODULES = ("verl.utils.tensordict_utils", "verl.workers.engine_workers", "verl.workers.engine.base")
verl_original = None  # verl's own function, for the test that shows what it leaves broken


def repaired_position_ids(position_ids: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor | None:
    """``position_ids`` rebuilt on ``input_ids``' row offsets, or None when they already agree (or cannot be fixed)."""
    offsets = input_ids.offsets()
    values = position_ids.values()
    if values.dim() != 2 or values.shape[1] != int(offsets[-1]):
        return None  # not the (rope_dims, total_tokens) layout this fix knows
    if position_ids.offsets().shape == offsets.shape and torch.equal(position_ids.offsets().cpu(), offsets.cpu()):
        return None
    return torch.nested.nested_tensor_from_jagged(values=values, offsets=offsets.to(values.device), jagged_dim=2)


def maybe_fix_3d_position_ids(data) -> None:
    """verl's fix (``_ragged_idx = 2``) plus the offsets check against ``input_ids``."""
    verl_original(data)
    if "position_ids" not in data.keys() or "input_ids" not in data.keys():
        return
    position_ids, input_ids = data["position_ids"], data["input_ids"]
    if not (position_ids.is_nested and position_ids.dim() == 3 and input_ids.is_nested):
        return
    fixed = repaired_position_ids(position_ids, input_ids)
    if fixed is not None:
        log.warning(
            "position_ids row offsets %s disagree with input_ids %s: rebuilt from input_ids' offsets",
            position_ids.offsets().diff().tolist(),
            input_ids.offsets().diff().tolist(),
        )
        data["position_ids"] = fixed


setattr(maybe_fix_3d_position_ids, _PATCHED, True)


def apply() -> None:
    import importlib

    global verl_original
    modules = [importlib.import_module(name) for name in _MODULES]
    if verl_original is None:
        verl_original = modules[0].maybe_fix_3d_position_ids
    for module in modules:
        module.maybe_fix_3d_position_ids = maybe_fix_3d_position_ids


apply()
