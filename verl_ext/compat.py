"""Fixes for two verl 0.9.1 bugs that stop Qwen-VL training, applied on plugin load; each function verl calls is
replaced by ours (marked ``_neos_fix``, which ``verl_ext.registrations`` checks). Delete a fix once verl has it.

1. ``maybe_fix_3d_position_ids`` (every actor update of a Qwen-VL model). verl packs each row's 3-D ``position_ids``
(``(4, seq_len)``) with ``torch.nested.as_nested_tensor`` (``left_right_2_no_padding``; the CPU test builds its batch
with it). The fix sits in verl's own consumer-side hook, which every train and infer path calls, not in that producer.
When the rows differ in length torch makes the sequence dimension the ragged one (values ``(4, total_tokens)``), as verl
expects; when every row has the same length (a batch of equal prompts whose responses all hit the limit) nothing is
ragged and torch packs the rope dimension instead (values ``(4 * rows, seq_len)``, offsets ``[0, 4, 8, ...]``). verl's
own fix then only sets ``_ragged_idx = 2``, so the actor's mini-batch split dies in ``unbind`` (seen on the H200:
``split_with_sizes expects split_sizes to sum exactly to 45 ... got [4, 4, 4, 4]``, values ``(16, 45)``) and the
remove-padding forward would read the rope rows as tokens. Ours recognises that layout against ``input_ids`` (same rows,
same lengths) and rebuilds the tensor ragged in the sequence dimension; a tensor already laid out right is left alone,
and any other layout is reported (once per process) and left to fail loudly.

verl imports the function by name into ``engine_workers`` and ``engine.base``; all three names are replaced.

2. ``qwen2_vl._get_input_embeds`` (Qwen2-VL / Qwen2.5-VL, any micro-batch without images: MEI's WebVisit calls, a
text-only policy turn). verl runs a dummy vision pass there so every FSDP rank's vision tower takes part in the
backward, then calls ``.mean()`` on what ``model.visual`` returned: a tensor in transformers 4.x, a
``BaseModelOutputWithPooling`` in 5.x, so the step dies with ``AttributeError``. Ours unpacks it with verl's own
``unpack_visual_output`` (as verl's image branch already does) and otherwise delegates to verl's function.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
FIX_MARK = "_neos_fix"  # verl_ext.registrations looks for it on the function verl calls
_MODULES = ("verl.utils.tensordict_utils", "verl.workers.engine_workers", "verl.workers.engine.base")
verl_original = None  # verl's own function, for the test that shows what it leaves broken
verl_get_input_embeds = None  # verl's qwen2_vl._get_input_embeds


def repaired_position_ids(position_ids: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor | None:
    """``position_ids`` ragged in the sequence dimension on ``input_ids``' rows: the tensor itself where it already
    is, a rebuilt one where torch packed the rope dimension (equal-length rows), None for a layout it does not know."""
    offsets, values = position_ids.offsets(), position_ids.values()
    lengths = input_ids.offsets().diff().tolist()
    if values.dim() != 2 or len(offsets) != len(lengths) + 1:
        return None
    cuts = offsets.diff().tolist()
    if values.shape[1] == int(offsets[-1]) and cuts == lengths:
        return position_ids
    if values.shape[0] == int(offsets[-1]) and len(set(cuts)) == 1 and lengths == [values.shape[1]] * len(lengths):
        rows = values.split(cuts, dim=0)  # (rope_dims, seq_len) each
        return torch.nested.nested_tensor_from_jagged(
            values=torch.cat(rows, dim=1), offsets=input_ids.offsets().to(values.device), jagged_dim=2
        )
    return None


def describe(t: torch.Tensor) -> str:
    """What a (nested) tensor looks like to ``unbind``: values shape, offsets, lengths, ragged dim."""
    if not t.is_nested:
        return f"dense {tuple(t.shape)}"
    lengths = t.lengths()
    return (f"nested values {tuple(t.values().shape)} offsets {t.offsets().tolist()} "
            f"lengths {None if lengths is None else lengths.tolist()} ragged_idx {t._ragged_idx}")


_reported: set[str] = set()  # one diagnostic line per kind and process (the fix runs on every mini-batch)


def _report_once(kind: str, message: str, *args) -> None:
    if kind not in _reported:
        _reported.add(kind)
        log.warning(message, *args)


def maybe_fix_3d_position_ids(data) -> None:
    """verl's fix (``_ragged_idx = 2``), then the layout checked against ``input_ids`` and repaired where torch packed
    the rope dimension. Whatever it cannot check or repair is reported once per process with the tensors' layout (the
    H200 failure was diagnosed from such a line)."""
    verl_original(data)
    if "position_ids" not in data.keys():
        return
    position_ids = data["position_ids"]
    if not (position_ids.is_nested and position_ids.dim() == 3):
        return
    input_ids = data["input_ids"] if "input_ids" in data.keys() else None
    if input_ids is None or not input_ids.is_nested:
        _report_once("unchecked", "3-D position_ids (%s) without nested input_ids (%s): offsets not checked",
                     describe(position_ids), "absent" if input_ids is None else describe(input_ids))
        return
    fixed = repaired_position_ids(position_ids, input_ids)
    if fixed is position_ids:
        return
    if fixed is None:
        _report_once("layout", "3-D position_ids (%s) do not fit input_ids (%s): left as they are",
                     describe(position_ids), describe(input_ids))
        return
    _report_once("repaired", "position_ids packed on the rope dimension (%s; input_ids %s): rebuilt on input_ids' rows",
                 describe(position_ids), describe(input_ids))
    data["position_ids"] = fixed


def get_input_embeds(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
):
    """verl's ``_get_input_embeds``; for a micro-batch without pixels, its dummy vision pass, output unpacked."""
    if pixel_values is not None or pixel_values_videos is not None:
        return verl_get_input_embeds(
            model, input_ids, attention_mask, pixel_values, pixel_values_videos, image_grid_thw, video_grid_thw
        )
    from verl.utils.transformers_compat import unpack_visual_output

    inputs_embeds = model.get_input_embeddings()(input_ids)
    vision = model.config.vision_config
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    dummy = torch.zeros((16, patch_dim), dtype=inputs_embeds.dtype, device=inputs_embeds.device)
    grid = torch.tensor([[1, 4, 4]], dtype=torch.long, device=inputs_embeds.device)
    image_embeds, _ = unpack_visual_output(model.visual(dummy, grid_thw=grid))
    inputs_embeds = inputs_embeds + 0.0 * image_embeds.mean()
    if attention_mask is not None:
        attention_mask = attention_mask.to(inputs_embeds.device)
    return inputs_embeds, attention_mask


for _fix in (maybe_fix_3d_position_ids, get_input_embeds):
    setattr(_fix, FIX_MARK, True)


def apply() -> None:
    import importlib

    from verl.models.transformers import qwen2_vl

    global verl_original, verl_get_input_embeds
    modules = [importlib.import_module(name) for name in _MODULES]
    if verl_original is None:
        verl_original = modules[0].maybe_fix_3d_position_ids
    for module in modules:
        module.maybe_fix_3d_position_ids = maybe_fix_3d_position_ids
    if verl_get_input_embeds is None:
        verl_get_input_embeds = qwen2_vl._get_input_embeds
    qwen2_vl._get_input_embeds = get_input_embeds  # looked up at call time by qwen2_vl_base_forward


apply()
