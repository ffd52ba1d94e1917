"""The fast text path gives the same token ids as verl's VL Continuous Token builder, turn by turn."""

from __future__ import annotations

import json

from PIL import Image
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

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


def test_fast_text_renders_match_verls_builder_at_every_turn(vl_builder, tiny_vl_processor):
    tokenizer = tiny_vl_processor.tokenizer
    reference = _episode(vl_builder(), tokenizer)
    fast = fast_text_renders(vl_builder())
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


OBSERVATIONS = [
    "1. Flag of Japan",
    "",
    "  leading and trailing blanks \n\n",
    '<tool_response>nested</tool_response> "quoted" & {{ braces }} {% raw %}',
    "Zürich — 東京 — 🇫🇷\r\n\tend",
]


def test_observations_from_the_template_skeleton_match_verls_builder(vl_builder, tiny_vl_processor):
    """Tool observations are tokenized from the template's skeleton (no render per turn): the same ids as verl's
    builder for contents a template could treat specially, alone and two at once."""
    reference, fast = vl_builder(), fast_text_renders(vl_builder())
    tokenizer = tiny_vl_processor.tokenizer
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "Which flag?"}]
    stream = reference.build_initial_tokens(messages, tools=TOOLS)
    stream = reference.merge_assistant_tokens(stream, tokenizer.encode("<tool_call>{}</tool_call><|im_end|>")).token_ids
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "x"}}]}
    groups = [[{"role": "tool", "content": text}] for text in OBSERVATIONS] + [
        [{"role": "tool", "content": OBSERVATIONS[2]}, {"role": "tool", "content": OBSERVATIONS[3]}]
    ]
    for group in groups:
        previous, updated = [*messages, call], [*messages, call, *group]
        expected = reference.merge_context_tokens(previous, updated, stream, tools=TOOLS).token_ids
        assert fast.merge_context_tokens(previous, updated, stream, tools=TOOLS).token_ids == expected
    skeletons = [parts for parts in tokens._skeletons.values() if parts is not None]
    assert ("<|im_start|>user\n<tool_response>\n", "\n</tool_response><|im_end|>\n<|im_start|>assistant\n") in skeletons


def _render_with(template):
    """A toy chat template: each message as ``<|im_start|>role:`` + template(content) + ``<|im_end|>``."""

    def render(messages, add_generation_prompt):
        text = "".join(f"<|im_start|>{m['role']}:{template(m['content'])}<|im_end|>" for m in messages)
        return text + ("<|im_start|>assistant:" if add_generation_prompt else "")

    return render


SPECIAL = ("<|im_start|>", "<|im_end|>")
PREFIX = [{"role": "user", "content": "q"}]


def test_template_skeleton_splits_around_each_content():
    tools = [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    parts = tokens.template_skeleton(_render_with(str), PREFIX, tools, True, SPECIAL)
    assert parts == ("<|im_start|>tool:", "<|im_end|><|im_start|>tool:", "<|im_end|><|im_start|>assistant:")
    filled = [{"role": "tool", "content": "x"}, {"role": "tool", "content": "y"}]
    prefix_text = "<|im_start|>user:q<|im_end|>"
    assert prefix_text + tokens.fill_skeleton(parts, ["x", "y"]) == _render_with(str)(PREFIX + filled, True)


def test_templates_that_change_or_branch_on_the_content_have_no_skeleton():
    tool = [{"role": "tool", "content": "a"}]
    assert tokens.template_skeleton(_render_with(str.strip), PREFIX, tool, False, SPECIAL) is None  # trims
    assert tokens.template_skeleton(_render_with(json.dumps), PREFIX, tool, False, SPECIAL) is None  # JSON
    assert tokens.template_skeleton(_render_with(lambda c: c + c), PREFIX, tool, False, SPECIAL) is None  # twice
    assert tokens.template_skeleton(_render_with(lambda c: ""), PREFIX, tool, False, SPECIAL) is None  # dropped
    # The added text must start at a special token: here it would start with plain text.
    assert tokens.template_skeleton(_render_with(str), PREFIX, tool, False, ("<|im_end|>",)) is None
