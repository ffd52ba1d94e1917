"""Logged MEI calls (retained by co-evolution, or cold-start pairs from data generation) -> SFT examples -> the tensors verl's ``TrainingWorker`` trains on (Neos Eq. 5).

One example per call: the chat messages the MEI model was sent, answered by the validated JSON it returned (the
paper's "self-generated response targets"). Tokenisation renders prompt and prompt+target through the MEI model's
own processor and chat template (:mod:`.chat`) and sets ``loss_mask`` to 1 exactly on the target: the JSON text and
the closing end-of-turn token, nothing of the system/user turns, the image placeholders, the assistant header or the
template's trailing newline. Each tokenised example is the dict verl's ``MultiTurnSFTDataset`` yields in
``no_padding`` mode (``input_ids``, ``loss_mask``, ``position_ids`` with Qwen-VL's 4 rows, ``multi_modal_inputs``; the
last one empty rather than absent for text-only calls, unlike verl's dataset, whose collator then fails), and
:func:`collate` batches them with verl's own ``SFTTensorCollator`` plus the metadata ``sft_trainer_ray`` attaches.

Loss: verl's ``sft_loss`` already is Eq. 5. The engine sets ``batch_num_tokens`` to the mask's sum over the global
batch (all micro-batches, all DP ranks) and ``sft_loss`` returns ``-sum(mask * log p) / batch_num_tokens * dp_size``
per micro-batch, the ``dp_size`` undoing FSDP's gradient averaging; summed over micro-batches and ranks that is the
masked log-likelihood normalised by the number of target tokens (test: ``tests/mei/test_sft_on_cpu.py``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.tensorclass import NonTensorData
from verl.models.transformers.qwen2_vl import get_rope_index
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.dataset_utils import DatasetPadMode, SFTTensorCollator

from tool_server.mei.log import BlobStore, MEIRecord, load_images
from verl_ext.mei.chat import ChatInputError, render

MAX_SEQ_LEN = 32_768  # Neos Table 12, online MEI SFT


class SFTExampleError(ValueError):
    """A call that cannot become a training example (missing inputs or images, too long, template mismatch)."""


@dataclass(frozen=True, slots=True)
class SFTExample:
    call_id: str
    messages: list[dict[str, Any]]  # as the MEI model was sent them (images as PNG data URLs)
    target: str  # the JSON answer


def target_text(output: dict[str, Any]) -> str:
    """The SFT target of a logged output: compact JSON, keys in schema order, non-ASCII kept (as a model writes it)."""
    return json.dumps(output, ensure_ascii=False)


def sft_example(call: MEIRecord, blobs: BlobStore) -> SFTExample:
    if not call.messages:
        raise SFTExampleError(f"call {call.call_id} has no logged input messages")
    try:
        messages = load_images(call.messages, blobs)
    except (FileNotFoundError, ValueError) as e:
        raise SFTExampleError(f"call {call.call_id}: an image of its input is unavailable: {e}") from e
    return SFTExample(call.call_id, messages, target_text(call.output))


def _uses_vl_positions(processor: Any) -> bool:
    return "Qwen2VLImageProcessor" in type(getattr(processor, "image_processor", None)).__name__


def tokenize(example: SFTExample, processor: Any, *, max_length: int = MAX_SEQ_LEN) -> dict[str, Any]:
    """One example in verl's ``no_padding`` SFT layout; raises :class:`SFTExampleError` when it cannot be."""
    try:
        prompt = render(processor, example.messages)
        full = render(processor, example.messages, target=example.target)
    except ChatInputError as e:
        raise SFTExampleError(f"call {example.call_id}: {e}") from e
    images = full.images or None
    prompt_ids = processor(text=[prompt.text], images=images, return_tensors="pt")["input_ids"][0]
    inputs = processor(text=[full.text], images=images, return_tensors="pt")
    input_ids = inputs["input_ids"][0]
    n = prompt_ids.shape[0]
    if input_ids.shape[0] <= n or not torch.equal(input_ids[:n], prompt_ids):
        raise SFTExampleError(f"call {example.call_id}: the template's prompt is not a prefix of prompt + target")
    end_id = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ends = (input_ids[n:] == end_id).nonzero()
    if len(ends) == 0:
        raise SFTExampleError(f"call {example.call_id}: no end-of-turn token after the target")
    last = n + int(ends[0])  # the target's closing <|im_end|>; what the template adds after it is not a target
    if input_ids.shape[0] > max_length:
        raise SFTExampleError(f"call {example.call_id}: {input_ids.shape[0]} tokens, more than {max_length}")
    loss_mask = torch.zeros_like(input_ids)
    loss_mask[n : last + 1] = 1
    multi_modal_inputs = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
    if _uses_vl_positions(processor):
        vision = get_rope_index(processor, input_ids=input_ids, image_grid_thw=multi_modal_inputs.get("image_grid_thw"),
                                attention_mask=torch.ones_like(input_ids))
        text = torch.arange(input_ids.shape[0], dtype=torch.long).unsqueeze(0)
        position_ids = torch.cat((text, vision), dim=0)  # (4, L), as verl's MultiTurnSFTDataset builds it
    else:
        position_ids = torch.arange(input_ids.shape[0], dtype=torch.long)
    # Always present, empty for a text-only call: verl's collator takes the keys of the first row for the batch, and
    # its engine skips empty inputs, so text-only and image calls can share a batch.
    return {"input_ids": input_ids, "loss_mask": loss_mask, "position_ids": position_ids,
            "multi_modal_inputs": multi_modal_inputs}


@dataclass(slots=True)
class Tokenized:
    items: list[dict[str, Any]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # SFTExampleError reasons, by kind


def tokenize_calls(
    calls: list[MEIRecord], blobs: BlobStore, processor: Any, *, max_length: int = MAX_SEQ_LEN
) -> Tokenized:
    """Tokenise logged calls, skipping (and counting) those that cannot be examples rather than failing the update."""
    out = Tokenized()
    for call in calls:
        try:
            out.items.append(tokenize(sft_example(call, blobs), processor, max_length=max_length))
            out.call_ids.append(call.call_id)
        except SFTExampleError as e:
            kind = "too_long" if "more than" in str(e) else "unavailable_input" if "unavailable" in str(e) else "other"
            out.skipped[kind] += 1
    return out


def collate(items: list[dict[str, Any]], *, pad_token_id: int) -> TensorDict:
    """A global batch for ``TrainingWorker.train_batch``: verl's collator (nested tensors) plus the metadata
    ``sft_trainer_ray`` attaches (pad mode, per-sequence token counts, lr-scheduler step). Micro-batching and
    padding removal are left to the worker's engine config (``train_batch`` fills them in)."""
    if not items:
        raise ValueError("collate needs at least one example")
    data = SFTTensorCollator(DatasetPadMode.NO_PADDING)(items)
    meta = {
        "temperature": 1.0,
        "global_batch_size": len(items),
        "pad_mode": DatasetPadMode.NO_PADDING,
        "pad_token_id": pad_token_id,
    }
    td = tu.get_tensordict(tensor_dict=data, non_tensor_dict=meta)
    seqlens = td["input_ids"].offsets().diff().tolist()
    tu.assign_non_tensor(td, update_lr_scheduler=True, global_token_num=NonTensorData(seqlens))
    return td
