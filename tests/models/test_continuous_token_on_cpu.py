"""verl's own Continuous Token builder on the tiny model: image placeholders expand to the processor's token counts in
the first prompt and in a later tool turn, and the incrementally merged prompt equals a full render of the
conversation (the invariant whose failure drops images in later turns, verl #4613)."""

from __future__ import annotations

import pytest
from PIL import Image

from verl_ext.models.tiny_vl import HF_MODEL_TYPE

IMAGE_PAD = 151655
FETCH = {
    "type": "function",
    "function": {
        "name": "fetch",
        "description": "Fetch an image.",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    },
}
CALL = '<tool_call>\n{"name": "fetch", "arguments": {"url": "u"}}\n</tool_call><|im_end|>'


@pytest.fixture(scope="module")
def builder(tiny_vl_processor):
    from verl.utils.tokenizer.continuous_token import QwenVLContinuousTokenBuilder
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    built = create_continuous_token_builder(
        tiny_vl_processor.tokenizer, hf_model_type=HF_MODEL_TYPE, processor=tiny_vl_processor
    )
    assert isinstance(built, QwenVLContinuousTokenBuilder)
    return built


def _image_tokens(processor, image: Image.Image) -> int:
    grid = processor.image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    return int(grid.prod()) // processor.image_processor.merge_size**2


def test_image_in_user_then_tool_turn(builder, tiny_vl_processor):
    tokenizer = tiny_vl_processor.tokenizer
    # 100x60 resizes to 112x56: a 4x8 patch grid, 32 patches, 8 merged tokens; 56x84 -> 6x4 grid -> 6 tokens.
    first, second = Image.new("RGB", (100, 60), (200, 10, 10)), Image.new("RGB", (56, 84), (0, 0, 255))
    assert (_image_tokens(tiny_vl_processor, first), _image_tokens(tiny_vl_processor, second)) == (8, 6)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image", "image": first}, {"type": "text", "text": "What is this?"}]},
    ]
    mm_inputs: dict = {}
    prompt = builder.build_initial_tokens(messages, tools=[FETCH], images=[first], mm_inputs_out=mm_inputs)
    assert prompt.count(IMAGE_PAD) == 8 and mm_inputs["image_grid_thw"].tolist() == [[1, 4, 8]]
    assert tokenizer.decode(prompt).endswith(
        "<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * 8 + "<|vision_end|>What is this?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )

    response = tokenizer.encode(CALL, add_special_tokens=False)  # what the policy writes, ending at <|im_end|>
    assistant = builder.merge_assistant_tokens(prompt, response)
    assert assistant.token_ids == prompt + response and assistant.kind == "assistant"

    before = [
        *messages,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "fetch", "arguments": {"url": "u"}}}],
        },
    ]
    after = [
        *before,
        {"role": "tool", "content": [{"type": "image", "image": second}, {"type": "text", "text": "fetched"}]},
    ]
    context = builder.merge_context_tokens(before, after, assistant.token_ids, tools=[FETCH])
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert context.inserted_token_ids == newline  # the "\n" after <|im_end|> the model never writes
    appended = context.token_ids[len(assistant.token_ids) + 1 :]
    assert len(appended) == context.appended_token_count and appended.count(IMAGE_PAD) == 6
    assert tokenizer.decode(appended) == (
        "<|im_start|>user\n<tool_response>\n<|vision_start|>" + "<|image_pad|>" * 6 + "<|vision_end|>fetched\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert context.token_ids.count(IMAGE_PAD) == 8 + 6
    full = builder.render_tokens_with_mm(after, [first, second], add_generation_prompt=True, tools=[FETCH])
    assert context.token_ids == full
