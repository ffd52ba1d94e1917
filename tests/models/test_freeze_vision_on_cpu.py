"""The vision tower stays frozen through a training step (Neos, Appendix C), through the same pieces a verl FSDP worker
runs: the process-wide hook the plugin installs, a real Qwen2.5-VL forward with an image, verl's FSDP2 wrapping
(``apply_fsdp2``) and ``build_optimizer`` (the optimizer its FSDP engine builds before the first forward) with Neos'
weight decay. The default (no flag) trains the tower, which shows the check can fail.

On Megatron the freeze is Megatron-Bridge's (provider switches, see ``verl_ext.models.freeze``); Megatron-Bridge,
Megatron-Core and Transformer Engine are not installable here, so what is checked on CPU is the config that selects
it (``tests/recipes/test_paper_recipes_on_cpu.py``) and, below, that its two switches cover the real model's tower."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from verl_ext.models import freeze

from ..forks import FRESH_PARENT, run_forked


@pytest.fixture
def fresh_model(tiny_vl_model_dir: Path):
    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32).train()


@pytest.fixture
def hook():
    yield freeze
    freeze.uninstall()


def _one_step(model, processor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One AdamW step (verl's ``build_optimizer`` with Neos' lr scale and wd 0.01) on an image question; returns the
    vision and language parameters before the step."""
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer

    image = Image.new("RGB", (112, 84), (200, 30, 30))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which flag is this?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True) + "Austria<|im_end|>"
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    vision = {n: _full(p) for n, p in model.named_parameters() if ".visual." in f".{n}"}
    language = {n: _full(p) for n, p in model.named_parameters() if ".visual." not in f".{n}"}
    optimizer = build_optimizer(model.parameters(), FSDPOptimizerConfig(lr=1e-2, weight_decay=0.01))
    loss = model(**inputs, labels=inputs["input_ids"]).loss
    loss.backward()
    optimizer.step()
    return vision, language


def _full(param: torch.Tensor) -> torch.Tensor:
    """A plain copy of a parameter, gathered when FSDP2 has sharded it into a DTensor."""
    return (param.full_tensor() if hasattr(param, "full_tensor") else param).detach().clone()


def _changed(model, before: dict[str, torch.Tensor]) -> set[str]:
    params = dict(model.named_parameters())
    return {n for n, old in before.items() if not torch.equal(_full(params[n]), old)}


def test_with_the_flag_the_vision_tower_gets_no_update_and_the_language_model_does(
    fresh_model, tiny_vl_processor, hook, monkeypatch
):
    monkeypatch.setenv(freeze.ENV_FLAG, "1")
    assert hook.install() is True  # what the plugin does on `import verl` in each Ray worker
    vision, language = _one_step(fresh_model, tiny_vl_processor)
    assert len(vision) > 10  # encoder blocks and the merger
    assert any("merger" in n for n in vision)
    assert _changed(fresh_model, vision) == set()
    assert all(p.grad is None for n, p in fresh_model.named_parameters() if n in vision)  # no Adam step, no decay
    assert len(_changed(fresh_model, language)) > 0.9 * len(language)


def test_without_the_flag_nothing_is_frozen(fresh_model, tiny_vl_processor, hook, monkeypatch):
    monkeypatch.delenv(freeze.ENV_FLAG, raising=False)
    assert hook.install() is False
    vision, _ = _one_step(fresh_model, tiny_vl_processor)
    assert len(_changed(fresh_model, vision)) > 0.9 * len(vision)


def test_freezing_is_idempotent_and_finds_the_tower_under_model(fresh_model):
    towers = list(freeze.vision_towers(fresh_model))
    assert towers and all(t is fresh_model.model.visual for t in towers)
    first = freeze.freeze_vision_tower(fresh_model)
    assert first == sum(1 for _ in fresh_model.model.visual.parameters())
    assert freeze.freeze_vision_tower(fresh_model) == 0
    assert not any(p.requires_grad for p in fresh_model.model.visual.parameters())
    assert all(p.requires_grad for n, p in fresh_model.named_parameters() if ".visual." not in f".{n}")


def test_the_plugin_installs_the_hook_in_a_fresh_process_only_when_asked(tmp_path):
    """Each flag in a fork of a parent that imported only verl's third-party dependencies (``tests/forks.py``)."""
    probe = "import os\nos.environ[{!r}] = {!r}\nimport verl, verl_ext.models.freeze as f\nprint(f._handle is not None)"
    flags = {"1": "True", "0": "False"}
    children = run_forked(FRESH_PARENT, {flag: probe.format(freeze.ENV_FLAG, flag) for flag in flags}, tmp_path)
    for flag, expected in flags.items():
        assert children[flag].stdout.strip().splitlines()[-1] == expected, children[flag].stderr[-2000:]


@pytest.fixture
def cpu_process_group(tmp_path):
    """A one-rank gloo group (FSDP2 runs on CPU with it; FSDP1 needs an accelerator)."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fsdp2_as_verl_wraps_the_policy_keeps_the_tower_frozen(
    fresh_model, tiny_vl_processor, hook, monkeypatch, cpu_process_group
):
    """verl's FSDP engine wraps the model and builds its optimizer before the first forward, so the hook freezes after
    both: FSDP2 keeps one sharded tensor per parameter, whose gradient stays None, and the optimizer skips it."""
    from torch.distributed.device_mesh import init_device_mesh
    from verl.utils.fsdp_utils import apply_fsdp2

    monkeypatch.setenv(freeze.ENV_FLAG, "1")
    assert hook.install() is True
    apply_fsdp2(fresh_model, {"mesh": init_device_mesh("cpu", (1,)), "reshard_after_forward": True}, {})
    vision, language = _one_step(fresh_model, tiny_vl_processor)
    assert len(vision) > 10
    assert _changed(fresh_model, vision) == set()
    assert all(p.grad is None for n, p in fresh_model.named_parameters() if n in vision)
    assert len(_changed(fresh_model, language)) > 0.9 * len(language)


def test_megatron_bridges_two_switches_cover_the_whole_qwen25_vl_tower_and_nothing_else(fresh_model):
    """Megatron-Bridge's Qwen2.5-VL model holds this same Hugging Face vision transformer as ``visual``; its
    ``freeze`` takes ``patch_embed`` and ``blocks`` for ``freeze_vision_model`` and ``merger`` for
    ``freeze_vision_projection`` (its Qwen3-VL and Qwen3.5-VL models: the whole ``vision_model``, then the mergers).
    Both switches on must leave no vision parameter trainable and touch no language parameter."""
    visual = fresh_model.model.visual
    switched = {id(p) for part in (visual.patch_embed, visual.blocks, visual.merger) for p in part.parameters()}
    assert switched == {id(p) for p in visual.parameters()}
    assert len(switched) > 10
    assert switched.isdisjoint(id(p) for p in fresh_model.model.language_model.parameters())


def test_fsdp1_leaves_patch_embedding_and_merger_in_the_root_unit(fresh_model):
    """FSDP1 itself needs an accelerator (not run here). What the trainer's FSDP1 warning rests on: verl's wrap policy
    makes each vision block a unit of its own but not the patch embedding or merger, so FSDP1 (``use_orig_params``
    false) flattens those into the root ``FlatParameter`` beside the language model's embeddings. The hook then leaves
    them with zero gradients rather than None, which AdamW's weight decay still reaches."""
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    policy = get_fsdp_wrap_policy(fresh_model, {})
    visual = fresh_model.model.visual

    def wrapped(module) -> bool:
        return bool(policy(module, False, sum(p.numel() for p in module.parameters())))

    assert all(wrapped(block) for block in visual.blocks)
    assert not wrapped(visual)
    assert not any(wrapped(m) for part in (visual.patch_embed, visual.merger) for m in part.modules())
