"""The fast text path gives the same token ids as verl's VL Continuous Token builder, turn by turn."""

from __future__ import annotations

from PIL import Image
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from verl_ext.models.tiny_vl import HF_MODEL_TYPE
from verl_ext.rollout import tokens
from verl_ext.rollout.tokens import fast_text_renders

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "TextSearch",
            "description": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "array"}}},
        },
    }
]


def _builder(processor):
    return create_continuous_token_builder(processor.tokenizer, hf_model_type=HF_MODEL_TYPE, processor=processor)


def _episode(builder, tokenizer) -> list[list[int]]:
    """A Neos-shaped conversation; returns the runtime token stream after every step."""
    image = Image.new("RGB", (120, 90), (200, 30, 30))
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Which flag?"}]},
    ]
    ids = builder.build_initial_tokens(messages, tools=TOOLS, images=[image])
    streams = [ids]
    call = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": ["red flag"]}}\n</tool_call>'
    observations = [
        {"role": "tool", "content": "1. Flag of Japan"},
        {
            "role": "tool",
            "content": [
                {"type": "text", "text": "img_2:"},
                {"type": "image", "image": Image.new("RGB", (60, 60), (0, 0, 200))},
                {"type": "text", "text": "fetched"},
            ],
        },
        {"role": "user", "content": "Tools are disabled now; answer."},
    ]
    for observation in observations:
        generated = tokenizer.encode(call) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        ids = builder.merge_assistant_tokens(ids, generated).token_ids
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "TextSearch", "arguments": {"query": ["red flag"]}}}
                ],
            }
        )
        previous = list(messages)
        messages.append(observation)
        ids = builder.merge_context_tokens(previous, messages, ids, tools=TOOLS).token_ids
        streams.append(ids)
    return streams


def test_fast_text_renders_match_verls_builder_at_every_turn(tiny_vl_processor):
    tokenizer = tiny_vl_processor.tokenizer
    reference = _episode(_builder(tiny_vl_processor), tokenizer)
    fast = fast_text_renders(_builder(tiny_vl_processor))
    assert type(fast).__name__.startswith("FastText")
    assert _episode(fast, tokenizer) == reference
    checked = [ok for (cls, *_), ok in tokens._verified.items() if cls is type(fast)]
    assert checked and all(checked)  # every conversation shape rendered both ways agreed
    assert tokens._tools_free[(type(fast), False)] is True and tokens._tools_free[(type(fast), True)] is True
    assert _episode(fast, tokenizer) == reference  # again, now from the memo


def test_a_builder_without_a_processor_is_left_alone(tiny_vl_processor):
    text_only = create_continuous_token_builder(tiny_vl_processor.tokenizer, hf_model_type="qwen3")
    assert fast_text_renders(text_only) is text_only and "FastText" not in type(text_only).__name__


def test_text_chars_counts_string_contents_and_text_parts():
    image = Image.new("RGB", (8, 8))
    messages = [
        {"role": "tool", "content": "abc"},
        {"role": "tool", "content": [{"type": "text", "text": "de"}, {"type": "image", "image": image}]},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    assert tokens.text_chars(messages) == 5
