"""MEI SFT data: loss_mask is 1 exactly on the target JSON and its end-of-turn token (real tokenizer, processor and
template of the tiny VL model), verl's layout and collator, and verl's sft_loss is Eq. 5 (hand-computed)."""

import io
import math

import pytest
import torch
from PIL import Image
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.dataset_utils import DatasetPadMode
from verl.utils.model import extract_multi_modal_inputs
from verl.workers.utils.losses import sft_loss

from tool_server.mei.log import BlobStore, store_images
from tool_server.mei.prompts import reverse_image_messages, web_visit_messages
from tool_server.mei.schema import ImageView, PageView
from verl_ext.mei.sft import SFTExample, SFTExampleError, collate, sft_example, target_text, tokenize, tokenize_calls

from .conftest import mei_record


def png(color: str, size=(56, 56)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


OUTPUT = {"rational": "Both show the tower.", "candidates": [{"index": 0, "match_state": "visual_match",
                                                               "caption": "Tour Eiffel à l'aube"}]}


def reverse_example() -> SFTExample:
    q = ImageView(url="https://neos-world.invalid/q.png", png=png("red"))
    c = ImageView(url="https://neos-world.invalid/c.png", png=png("blue", (84, 56)))
    return SFTExample("r1", reverse_image_messages("same landmark?", q, [c]), target_text(OUTPUT))


def test_mask_is_exactly_the_target_and_its_end_token(tiny_vl_processor):
    ex = reverse_example()
    item = tokenize(ex, tiny_vl_processor)
    ids, mask = item["input_ids"], item["loss_mask"]
    tok = tiny_vl_processor.tokenizer
    assert tok.decode(ids[mask == 1]) == ex.target + "<|im_end|>"
    on = mask.nonzero()[:, 0]
    assert on.tolist() == list(range(int(on[0]), int(on[-1]) + 1))  # one contiguous run
    assert tok.decode(ids[: on[0]]).endswith("<|im_start|>assistant\n")  # the header is context
    assert tok.decode(ids[on[-1] + 1:]) == "\n"  # the template's newline after <|im_end|> is not a target
    # two images: 2x2 and 3x2 merged tokens (56x56 -> 4x4 patches -> 2x2 after merging; 84x56 -> 6x4 -> 3x2)
    image_pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert int((ids == image_pad).sum()) == 4 + 6 and int(mask[ids == image_pad].sum()) == 0
    assert item["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 6]]
    assert item["position_ids"].shape == (4, ids.shape[0])
    assert torch.equal(item["position_ids"][0], torch.arange(ids.shape[0]))


def test_text_only_example_and_limits(tiny_vl_processor):
    page = PageView(url="https://neos-world.invalid/wiki/X", title="X", text="Lyon is in France.")
    target = target_text({"rational": "r", "evidence": "Lyon is in France.", "summary": "s", "relevant_images": []})
    ex = SFTExample("w1", web_visit_messages("where is Lyon", page, max_page_chars=1000), target)
    item = tokenize(ex, tiny_vl_processor)
    assert item["multi_modal_inputs"] == {}
    assert tiny_vl_processor.tokenizer.decode(item["input_ids"][item["loss_mask"] == 1]) == target + "<|im_end|>"
    with pytest.raises(SFTExampleError, match="more than"):
        tokenize(ex, tiny_vl_processor, max_length=50)


def test_logged_calls_resolve_images_and_unavailable_ones_are_counted(tiny_vl_processor, tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    logged = store_images(reverse_example().messages, blobs)
    ok = mei_record("ok", messages=logged).model_copy(update={"output": OUTPUT})
    assert sft_example(ok, blobs).messages == reverse_example().messages
    gone = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "blob:sha256:" + "0" * 64}}]}]
    lost = mei_record("lost", messages=gone)
    out = tokenize_calls([ok, lost], blobs, tiny_vl_processor)
    assert out.call_ids == ["ok"] and dict(out.skipped) == {"unavailable_input": 1}


def test_collate_builds_verl_nested_layout(tiny_vl_processor):
    a = tokenize(reverse_example(), tiny_vl_processor)
    page = PageView(url="https://neos-world.invalid/wiki/X", title="X", text="Lyon is in France.")
    text_only = tokenize(SFTExample("w", web_visit_messages("Lyon", page, max_page_chars=100), "{}"),
                         tiny_vl_processor)
    td = collate([text_only, a], pad_token_id=tiny_vl_processor.tokenizer.pad_token_id)  # text-only row first
    lengths = [len(text_only["input_ids"]), len(a["input_ids"])]
    assert td["input_ids"].is_nested and td["input_ids"].offsets().diff().tolist() == lengths
    assert td["global_token_num"] == lengths and td["global_batch_size"] == 2
    # what verl's engine makes of the rows' multi-modal inputs: the image row's, the text row adding nothing
    mm = extract_multi_modal_inputs(td["multi_modal_inputs"])
    assert mm["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 6]]
    assert td["pad_mode"] == DatasetPadMode.NO_PADDING and td["update_lr_scheduler"] is True
    with pytest.raises(ValueError):
        collate([], pad_token_id=0)


def _nested(rows):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged)


def test_verl_sft_loss_is_eq5_over_micro_batches():
    """Two sequences; log_probs[k] is log p(x_{k+1} | x_<=k), so target token k is scored at k-1 (verl rolls the
    mask). Sequence A: tokens 2, 3 are targets; B: token 1. Eq. 5 = -(lA[1] + lA[2] + lB[0]) / 3."""
    la = [math.log(0.5), math.log(0.25), math.log(0.125), math.log(0.9)]
    lb = [math.log(0.1), math.log(0.7), math.log(0.3)]
    ma, mb = [0, 0, 1, 1], [0, 1, 0]
    expected = -(math.log(0.25) + math.log(0.125) + math.log(0.1)) / 3

    def loss(rows, masks, total):
        td = TensorDict({"loss_mask": torch.nested.as_nested_tensor([torch.tensor(m) for m in masks],
                                                                    layout=torch.jagged)}, batch_size=[len(rows)])
        tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=total)
        value, _ = sft_loss(None, {"log_probs": _nested(rows)}, td)
        return float(value)

    assert loss([la, lb], [ma, mb], 3) == pytest.approx(expected)
    # The engine splits the batch into micro-batches but keeps the global token count: the sum is still Eq. 5
    # (a mean of per-micro-batch means would be -(log .25 + log .125) / 4 - log(.1) / 2).
    assert loss([la], [ma], 3) + loss([lb], [mb], 3) == pytest.approx(expected)
    # Data parallel: each of 2 ranks multiplies by dp_size = 2 and FSDP averages gradients over the 2 ranks.
    td = TensorDict({"loss_mask": torch.nested.as_nested_tensor([torch.tensor(ma)], layout=torch.jagged)},
                    batch_size=[1])
    tu.assign_non_tensor(td, dp_size=2, batch_num_tokens=3)
    rank0, _ = sft_loss(None, {"log_probs": _nested([la])}, td)
    assert (float(rank0) + 2 * loss([lb], [mb], 3)) / 2 == pytest.approx(expected)
