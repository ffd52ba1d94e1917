"""TransformersGenerateClient on the tiny Qwen2.5-VL: the TokenOutput contract of verl's servers, images really
reaching the model (3-D RoPE included), placeholder/image mismatches refused, forced responses scored for real."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from PIL import Image

from verl_ext.rollout.hf_generate import GenerateCall, TransformersGenerateClient

IMAGE_PAD, IM_END = 151655, 151645
GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
RED, BLUE = (200, 10, 10), (10, 10, 200)


def _image(color=RED, size=(100, 60)) -> Image.Image:
    return Image.new("RGB", size, color)  # 100x60 -> 112x56: grid (1, 4, 8), 32 patches, 8 image tokens


def _inputs(processor, images: list[Image.Image], text: str = "What is this?") -> dict[str, torch.Tensor]:
    """Prompt as verl builds it: the chat template through the processor, placeholders expanded."""
    content = [*({"type": "image", "image": image} for image in images), {"type": "text", "text": text}]
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return dict(processor(text=[prompt], images=images or None, return_tensors="pt"))


def _ids(inputs: dict[str, torch.Tensor]) -> list[int]:
    return inputs["input_ids"][0].tolist()


@pytest.fixture
def client(tiny_vl_model, tiny_vl_processor) -> TransformersGenerateClient:
    return TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=8, global_steps=7)


async def test_greedy_generate_returns_a_well_formed_token_output(client, tiny_vl_processor):
    inputs = _inputs(tiny_vl_processor, [_image()])
    out = await client.generate("r1", prompt_ids=_ids(inputs), sampling_params=GREEDY, image_data=[_image()])
    assert 1 <= len(out.token_ids) <= 8 and len(out.log_probs) == len(out.token_ids)
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in out.log_probs)
    assert out.stop_reason == ("stop" if out.token_ids[-1] == IM_END else "length")
    assert out.extra_fields["global_steps"] == 7 and isinstance(out.extra_fields["global_steps"], int)
    assert IMAGE_PAD not in out.token_ids
    (call,) = client.calls
    assert (call.request_id, call.prompt_len, call.num_images, call.num_image_pad_tokens) == (
        "r1",
        len(_ids(inputs)),
        1,
        8,
    )
    assert call.pixel_values_shape == (32, 3 * 2 * 14 * 14) and call.image_grid_thw == ((1, 4, 8),)


@pytest.mark.parametrize("with_image", [True, False])
async def test_greedy_tokens_match_transformers_generate(client, tiny_vl_model, tiny_vl_processor, with_image):
    """The reference is HF's own generate on the processor's outputs (mm_token_type_ids included), so positions
    (3-D RoPE with images), the KV cache and greedy selection must all agree."""
    images = [_image()] if with_image else []
    inputs = _inputs(tiny_vl_processor, images)
    out = await client.generate("r", prompt_ids=_ids(inputs), sampling_params=GREEDY, image_data=images)
    reference = tiny_vl_model.generate(
        **inputs, do_sample=False, max_new_tokens=8, suppress_tokens=[IMAGE_PAD, IMAGE_PAD + 1], eos_token_id=IM_END
    )[0, len(_ids(inputs)) :].tolist()
    assert out.token_ids == reference


async def test_temperature_zero_is_deterministic_and_max_tokens_bounds_length(client, tiny_vl_processor):
    ids = _ids(_inputs(tiny_vl_processor, [_image()]))
    first = await client.generate("a", prompt_ids=ids, sampling_params=GREEDY, image_data=[_image()])
    again = await client.generate("b", prompt_ids=ids, sampling_params=GREEDY, image_data=[_image()])
    assert (first.token_ids, first.log_probs) == (again.token_ids, again.log_probs)
    short = await client.generate(
        "c", prompt_ids=ids, sampling_params={**GREEDY, "max_tokens": 3}, image_data=[_image()]
    )
    assert short.token_ids == first.token_ids[:3] and short.stop_reason == "length"
    sampled = {"temperature": 1.0, "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1, "seed": 3}
    one = await client.generate("d", prompt_ids=ids, sampling_params=sampled, image_data=[_image()])
    two = await client.generate("e", prompt_ids=ids, sampling_params=sampled, image_data=[_image()])
    assert one.token_ids == two.token_ids and len(one.token_ids) <= 8  # a request seed makes sampling repeatable


async def test_placeholders_that_do_not_match_the_images_are_refused(client, tiny_vl_processor):
    one_image = _ids(_inputs(tiny_vl_processor, [_image()]))
    cases = {
        "image dropped": (one_image, []),
        "image added": (one_image, [_image(), _image(BLUE)]),
        "other size": (one_image, [_image(size=(56, 84))]),  # 6 tokens, not 8
        "vLLM-style deduplicated placeholders": (
            [t for i, t in enumerate(one_image) if not (t == IMAGE_PAD and one_image[i - 1] == IMAGE_PAD)],
            [_image()],
        ),
    }
    for name, (ids, images) in cases.items():
        with pytest.raises(ValueError, match="image placeholder"):
            await client.generate(name, prompt_ids=ids, sampling_params=GREEDY, image_data=images)
    assert client.calls == []


async def test_mm_processor_kwargs_process_the_images_as_the_prompt_was(client, tiny_vl_processor):
    small = {"size": {"shortest_edge": 4 * 28 * 28, "longest_edge": 4 * 28 * 28}}  # at most 4 image tokens
    content = [{"type": "image", "image": _image()}, {"type": "text", "text": "?"}]
    text = tiny_vl_processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    ids = tiny_vl_processor(text=[text], images=[_image()], return_tensors="pt", **small)["input_ids"][0].tolist()
    assert ids.count(IMAGE_PAD) == 2  # 100x60 -> 56x28 at 4*28*28 pixels at most: grid (1, 2, 4), 2 tokens
    await client.generate("a", prompt_ids=ids, sampling_params=GREEDY, image_data=[_image()], mm_processor_kwargs=small)
    assert client.calls[-1].image_grid_thw == ((1, 2, 4),)
    with pytest.raises(ValueError, match="image placeholders do not match"):
        await client.generate("b", prompt_ids=ids, sampling_params=GREEDY, image_data=[_image()])


async def test_unsupported_inputs_are_refused_not_ignored(client, tiny_vl_processor):
    ids = _ids(_inputs(tiny_vl_processor, []))
    with pytest.raises(ValueError, match="min_p"):
        await client.generate("a", prompt_ids=ids, sampling_params={**GREEDY, "min_p": 0.1})
    with pytest.raises(TypeError, match="lora_request"):
        await client.generate("b", prompt_ids=ids, sampling_params=GREEDY, lora_request=object())
    with pytest.raises(NotImplementedError):
        await client.generate("c", prompt_ids=ids, sampling_params=GREEDY, video_data=[object()])
    # What verl's agent loop always passes is accepted.
    out = await client.generate(
        "d",
        prompt_ids=ids,
        sampling_params={**GREEDY, "stop_token_ids": [IM_END]},
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        mm_processor_output=None,
    )
    assert out.token_ids


async def test_forced_response_is_scored_with_the_images_by_teacher_forcing(tiny_vl_model, tiny_vl_processor):
    seen: list[GenerateCall] = []

    def forced(call: GenerateCall) -> str:
        seen.append(call)
        return "A red flag."

    client = TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=8, forced=forced)
    red, blue = _inputs(tiny_vl_processor, [_image(RED)]), _inputs(tiny_vl_processor, [_image(BLUE)])
    assert _ids(red) == _ids(blue)  # same tokens: only the pixels differ
    out_red = await client.generate(
        "r", prompt_ids=_ids(red), sampling_params={"temperature": 1.0}, image_data=[_image(RED)]
    )
    out_blue = await client.generate(
        "b", prompt_ids=_ids(blue), sampling_params={"temperature": 1.0}, image_data=[_image(BLUE)]
    )
    expected = tiny_vl_processor.tokenizer.encode("A red flag.", add_special_tokens=False) + [IM_END]
    assert out_red.token_ids == out_blue.token_ids == expected and out_red.stop_reason == "stop"
    assert all(math.isfinite(lp) for lp in out_red.log_probs)
    assert max(abs(a - b) for a, b in zip(out_red.log_probs, out_blue.log_probs)) > 1e-3  # the pixels reach the model
    assert [c.num_image_pad_tokens for c in seen] == [8, 8]

    # Reference: the model's own forward on the processor outputs (it derives 3-D positions from mm_token_type_ids).
    full = torch.tensor([_ids(red) + expected[:-1]])
    mm_types = torch.cat(
        [red["mm_token_type_ids"], torch.zeros(1, len(expected) - 1, dtype=red["mm_token_type_ids"].dtype)], 1
    )
    with torch.inference_mode():
        tiny_vl_model.model.rope_deltas = None
        logits = tiny_vl_model(
            input_ids=full,
            pixel_values=red["pixel_values"],
            image_grid_thw=red["image_grid_thw"],
            mm_token_type_ids=mm_types,
        ).logits[0, len(_ids(red)) - 1 :]
    reference = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(expected)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out_red.log_probs), reference, atol=1e-4)

    client.max_new_tokens = 3
    cut = await client.generate(
        "c", prompt_ids=_ids(red), sampling_params={"temperature": 1.0}, image_data=[_image(RED)]
    )
    assert (
        cut.token_ids == expected[:3]
        and cut.stop_reason == "length"
        and cut.log_probs == pytest.approx(out_red.log_probs[:3], abs=1e-4)
    )


async def test_concurrent_calls_all_complete_one_at_a_time(client, tiny_vl_processor, monkeypatch):
    active, peak = 0, 0
    inner = client._generate

    def counting(*args):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return inner(*args)
        finally:
            active -= 1

    monkeypatch.setattr(client, "_generate", counting)
    ids = _ids(_inputs(tiny_vl_processor, [_image()]))
    outs = await asyncio.gather(
        *(client.generate(f"r{i}", prompt_ids=ids, sampling_params=GREEDY, image_data=[_image()]) for i in range(6))
    )
    assert len({tuple(o.token_ids) for o in outs}) == 1 and all(o.token_ids for o in outs)
    assert sorted(c.request_id for c in client.calls) == [f"r{i}" for i in range(6)] and peak == 1


async def test_abort_stops_running_and_queued_calls_and_later_calls_run(tiny_vl_model, tiny_vl_processor):
    """The policy boundary: the running call returns at its next token, a queued one at once, both "aborted"; a call
    made after the abort is untouched. Greedy on the tiny model never ends before 400 tokens here (asserted)."""
    client = TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=400, record_calls=True)
    ids = _ids(_inputs(tiny_vl_processor, []))
    reference = await client.generate("ref", prompt_ids=ids, sampling_params=GREEDY)
    assert (len(reference.token_ids), reference.stop_reason) == (400, "length")
    running = asyncio.create_task(client.generate("running", prompt_ids=ids, sampling_params=GREEDY))
    queued = asyncio.create_task(client.generate("queued", prompt_ids=ids, sampling_params=GREEDY))
    while len(client.calls) < 2:  # "running" has entered the worker thread
        await asyncio.sleep(0.005)
    assert await client.abort() == 2
    running_out, queued_out = await running, await queued
    assert running_out.stop_reason == "aborted" and 1 <= len(running_out.token_ids) < 400
    assert running_out.token_ids == reference.token_ids[: len(running_out.token_ids)]  # what it had, unchanged
    assert (queued_out.stop_reason, queued_out.token_ids) == ("aborted", [])
    after = await client.generate("after", prompt_ids=ids, sampling_params=GREEDY)
    assert after.token_ids == reference.token_ids and after.stop_reason == "length"
