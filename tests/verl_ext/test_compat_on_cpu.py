"""The verl 0.9.1 fixes in ``verl_ext.compat``: the actor's mini-batch split survives Qwen-VL position ids whose row
offsets arrive wrong (the H200 failure, rebuilt here with the same values and offsets), and a text-only micro-batch
gets through verl's Qwen2.5-VL forward under transformers 5 with the vision tower still in the backward."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.engine import base as engine_base

from verl_ext import compat

LENGTHS = (10, 12, 11, 12)  # 45 tokens
ROWS = [torch.arange(4 * n).reshape(4, n) for n in LENGTHS]  # (rope dims, seq len) per row


def batch(position_offsets: list[int]) -> TensorDict:
    """position_ids with the true values (4, 45) and the given row offsets; input_ids with the true lengths."""
    values = torch.cat(ROWS, dim=1)
    position_ids = torch.nested.nested_tensor_from_jagged(values, torch.tensor(position_offsets), jagged_dim=2)
    input_ids = torch.nested.as_nested_tensor([torch.arange(n) for n in LENGTHS], layout=torch.jagged)
    return TensorDict({"position_ids": position_ids, "input_ids": input_ids}, batch_size=[4])


def split_rows(data: TensorDict) -> list[torch.Tensor]:
    """What verl's train_mini_batch does: fix, then make_iterator -> index_select_tensor_dict per mini-batch."""
    engine_workers.maybe_fix_3d_position_ids(data)
    minis = tu.make_iterator(data, mini_batch_size=2, epochs=1, seed=0, dataloader_kwargs={"shuffle": False})
    return [row for mini in minis for row in mini["position_ids"].unbind()]


def test_verls_own_fix_leaves_the_h200_batch_broken():
    # If this fails, verl fixed it upstream: delete verl_ext/compat.py and its registration.
    data = batch([0, 4, 8, 12, 16])
    compat.verl_original(data)
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly to 45"):
        data["position_ids"].unbind()


def test_every_verl_caller_gets_the_fix_and_rows_come_back_intact():
    assert engine_workers.maybe_fix_3d_position_ids is compat.maybe_fix_3d_position_ids
    assert engine_base.maybe_fix_3d_position_ids is compat.maybe_fix_3d_position_ids
    got = split_rows(batch([0, 4, 8, 12, 16]))
    assert [tuple(r.shape) for r in got] == [(4, n) for n in LENGTHS]
    assert all(torch.equal(a, b) for a, b in zip(got, ROWS, strict=True))


def test_right_offsets_are_left_alone():
    data = batch([0, 10, 22, 33, 45])
    before = data["position_ids"]
    compat.maybe_fix_3d_position_ids(data)
    assert data["position_ids"] is before
    assert all(torch.equal(a, b) for a, b in zip(split_rows(data), ROWS, strict=True))


def test_values_that_do_not_fit_input_ids_are_not_touched():
    data = batch([0, 4, 8, 12, 16])
    data["input_ids"] = torch.nested.as_nested_tensor([torch.arange(n) for n in (1, 2, 3, 4)], layout=torch.jagged)
    before = data["position_ids"]
    compat.maybe_fix_3d_position_ids(data)
    assert data["position_ids"] is before  # 45 values but 10 tokens: not this bug, leave it to fail loudly


@pytest.fixture(scope="module")
def tiny_vl(tiny_vl_model_dir):
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32).model


def test_verls_text_only_embeds_fail_under_transformers_5(tiny_vl):
    # If this fails, verl (or transformers) fixed it: delete compat.get_input_embeds and its registration.
    with pytest.raises(AttributeError, match="BaseModelOutputWithPooling"):
        compat.verl_get_input_embeds(tiny_vl, torch.tensor([[1, 2, 3, 4]]))


def test_text_only_embeds_are_the_token_embeddings_and_reach_the_vision_tower(tiny_vl):
    from verl.models.transformers import qwen2_vl

    assert qwen2_vl._get_input_embeds is compat.get_input_embeds  # what qwen2_vl_base_forward calls
    tiny_vl.zero_grad()
    ids, mask = torch.tensor([[1, 2, 3, 4]]), torch.ones(1, 4, dtype=torch.long)
    embeds, out_mask = qwen2_vl._get_input_embeds(tiny_vl, ids, mask)
    assert torch.equal(embeds, tiny_vl.get_input_embeddings()(ids)) and out_mask is mask
    embeds.sum().backward()
    vision_grads = [p.grad for p in tiny_vl.visual.parameters() if p.requires_grad]
    assert vision_grads and all(g is not None for g in vision_grads)  # every rank's vision tower joins the backward
    assert all(torch.count_nonzero(g) == 0 for g in vision_grads)  # ... with zero gradient (0.0 * mean)


def test_batches_with_images_still_go_to_verls_function(tiny_vl, monkeypatch):
    seen = []
    monkeypatch.setattr(compat, "verl_get_input_embeds", lambda *args: seen.append(args) or ("embeds", "mask"))
    pixels = torch.zeros(16, 3 * 2 * 14 * 14)
    assert compat.get_input_embeds(tiny_vl, torch.tensor([[1]]), None, pixels) == ("embeds", "mask")
    assert seen and seen[0][3] is pixels


def test_what_the_fix_cannot_check_is_reported_once_with_the_layout(caplog, monkeypatch):
    monkeypatch.setattr(compat, "_reported", set())
    data = batch([0, 4, 8, 12, 16])
    data["input_ids"] = torch.zeros(4, 12, dtype=torch.long)  # padded, not nested: no row lengths to check against
    with caplog.at_level("WARNING", logger="verl_ext.compat"):
        compat.maybe_fix_3d_position_ids(data)
        compat.maybe_fix_3d_position_ids(data)
    (record,) = [r for r in caplog.records if "offsets not checked" in r.getMessage()]
    assert "offsets [0, 4, 8, 12, 16]" in record.getMessage() and "dense (4, 12)" in record.getMessage()
