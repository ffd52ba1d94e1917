"""The verl 0.9.1 fixes in ``verl_ext.compat``: the actor's mini-batch split survives Qwen-VL position ids of a batch
whose rows all have the same length (verl's own ``left_right_2_no_padding`` builds the tensor that failed on the H200),
and a text-only micro-batch gets through verl's Qwen2.5-VL forward under transformers 5 with the vision tower still in
the backward."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.engine import base as engine_base
from verl.workers.utils.padding import left_right_2_no_padding

from verl_ext import compat

WIDTH = 12  # padded sequence length


def padded_batch(lengths: list[int]) -> tuple[TensorDict, list[torch.Tensor]]:
    """A left-right padded Qwen-VL batch as verl's trainer holds it (valid tokens left-aligned here, which is all
    ``left_right_2_no_padding`` looks at) and each row's true ``(4, length)`` position ids."""
    rows = len(lengths)
    mask = torch.zeros(rows, WIDTH, dtype=torch.long)
    position_ids = torch.zeros(rows, 4, WIDTH, dtype=torch.long)
    expected = []
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        row = 100 * i + torch.arange(4 * n).reshape(4, n)
        position_ids[i, :, :n] = row
        expected.append(row)
    data = TensorDict(
        {
            "input_ids": torch.arange(rows * WIDTH).reshape(rows, WIDTH),
            "attention_mask": mask,
            "response_mask": mask[:, -4:],
            "position_ids": position_ids,
        },
        batch_size=[rows],
    )
    return left_right_2_no_padding(data), expected


def split_rows(data: TensorDict) -> list[torch.Tensor]:
    """What verl's train_mini_batch does: fix, then make_iterator -> index_select_tensor_dict per mini-batch."""
    engine_workers.maybe_fix_3d_position_ids(data)
    minis = tu.make_iterator(data, mini_batch_size=2, epochs=1, seed=0, dataloader_kwargs={"shuffle": False})
    return [row for mini in minis for row in mini["position_ids"].unbind()]


def test_verl_packs_equal_rows_on_the_rope_dimension_and_its_own_fix_leaves_them_broken():
    # If this fails, verl fixed it upstream: delete compat.maybe_fix_3d_position_ids and its registration.
    data, _ = padded_batch([9, 9, 9, 9])
    packed = data["position_ids"]
    assert tuple(packed.values().shape) == (16, 9) and packed.offsets().tolist() == [0, 4, 8, 12, 16]
    compat.verl_original(data)
    with pytest.raises(RuntimeError):  # torch 2.11: "split_with_sizes expects split_sizes to sum exactly to 9"
        data["position_ids"].unbind()


def test_every_verl_caller_gets_the_fix_and_equal_rows_come_back_intact():
    assert engine_workers.maybe_fix_3d_position_ids is compat.maybe_fix_3d_position_ids
    assert engine_base.maybe_fix_3d_position_ids is compat.maybe_fix_3d_position_ids
    data, expected = padded_batch([9, 9, 9, 9])
    got = split_rows(data)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    fixed = data["position_ids"]  # the layout verl's remove-padding forward reads: (4, total tokens)
    assert tuple(fixed.values().shape) == (4, 36) and fixed.offsets().tolist() == [0, 9, 18, 27, 36]


def test_rows_of_different_lengths_are_left_alone():
    data, expected = padded_batch([5, 9, 7, 12])
    before = data["position_ids"]
    compat.maybe_fix_3d_position_ids(data)
    assert data["position_ids"] is before
    assert all(torch.equal(a, b) for a, b in zip(split_rows(data), expected, strict=True))


def test_a_layout_that_does_not_fit_input_ids_is_not_touched():
    data, _ = padded_batch([9, 9, 9, 9])
    data["input_ids"] = torch.nested.as_nested_tensor([torch.arange(n) for n in (1, 2, 3, 4)], layout=torch.jagged)
    before = data["position_ids"]
    compat.maybe_fix_3d_position_ids(data)
    assert data["position_ids"] is before  # 9 tokens a row but input_ids say otherwise: leave it to fail loudly


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
    data, _ = padded_batch([9, 9, 9, 9])
    data["input_ids"] = torch.zeros(4, 12, dtype=torch.long)  # padded, not nested: no row lengths to check against
    with caplog.at_level("WARNING", logger="verl_ext.compat"):
        compat.maybe_fix_3d_position_ids(data)
        compat.maybe_fix_3d_position_ids(data)
    (record,) = [r for r in caplog.records if "offsets not checked" in r.getMessage()]
    assert "values (16, 9) offsets [0, 4, 8, 12, 16]" in record.getMessage() and "dense (4, 12)" in record.getMessage()
