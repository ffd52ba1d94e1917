"""Real-shape model directories: ``python -m verl_ext.models shape --like NAME`` writes the released architecture
(config through the transformers class, no weights), which builds on the meta device with the released parameter
count, and a processor whose image placeholder expansion follows the shape's patch and merge sizes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

from verl_ext.models import shapes
from verl_ext.models.__main__ import SHAPE_NAMES
from verl_ext.models.__main__ import main as cli_main

# name: (config class, processor class, parameters, of them in the vision tower, image side, its image tokens)
EXPECTED = {
    # Qwen2.5-VL-3B-Instruct ("3.75B"), by hand from its config: text = 151936 x 2048 embedding shared with the head
    # + 36 x 77,076,992 + 2048 = 3,085,938,688; vision = 1,505,280 + 32 x 19,702,200 + 1280 + 36,707,328 (a merger
    # ending at 2048 wide, 7,865,856 fewer than the 7B's). A 448x448 image: as the 7B's.
    "qwen2.5-vl-3b": ("Qwen2_5_VLConfig", "Qwen2_5_VLProcessor", 3_754_622_976, 668_684_288, 448, 256),
    # Qwen2.5-VL-7B-Instruct's model card / safetensors total. A 448x448 image: 32x32 patches of 14, merged 2x2.
    "qwen2.5-vl-7b": ("Qwen2_5_VLConfig", "Qwen2_5_VLProcessor", 8_292_166_656, 676_550_144, 448, 256),
    # Qwen3-VL-8B-Instruct ("8.77B"), by hand from its config: text = 2 x 151936 x 4096 (untied embeddings and head)
    # + 36 x 192,946,432 (q/o 4096^2 each, k/v 4096 x 1024 each, MLP 3 x 4096 x 12288, 4 norms) + 4096 = 8,190,735,360;
    # vision = patch conv 1,770,624 + position table 2304 x 1152 + 27 blocks x 15,239,504 + merger 40,119,040 + three
    # deepstack mergers x 40,125,952 = 576,388,336. A 512x512 image: 32x32 patches of 16, merged 2x2.
    "qwen3-vl-8b": ("Qwen3VLConfig", "Qwen3VLProcessor", 8_767_123_696, 576_388_336, 512, 256),
}
TIED = {"qwen2.5-vl-3b": True, "qwen2.5-vl-7b": False, "qwen3-vl-8b": False}  # the released config.json's flag


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def shape_dir(request, tmp_path_factory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("shapes") / request.param
    assert cli_main(["shape", "--like", request.param, "--out", str(out)]) == 0
    return request.param, out


def test_config_loads_through_auto_config_and_builds_the_released_parameter_count(shape_dir):
    name, out = shape_dir
    config_class, _, params, vision_params, _, _ = EXPECTED[name]
    config = AutoConfig.from_pretrained(out)
    assert type(config).__name__ == config_class and config.architectures == [shapes.SHAPES[name].architecture]
    assert shapes.count_params(config) == params
    assert shapes.count_params(config, lambda n: n.startswith("model.visual.")) == vision_params
    assert not (out / "model.safetensors").exists() and not list(out.glob("*.safetensors"))  # no weights travel
    # top level, where transformers 5 ties the head and vLLM copies it into the text config from
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is TIED[name]
    text = config.text_config
    # derived per-layer fields agree with the layer count (a hand-edited config.json once left 4 for 28: vLLM refused)
    assert len(getattr(text, "layer_types", None) or [None] * text.num_hidden_layers) == text.num_hidden_layers
    record = json.loads((out / shapes.SHAPE_FILE).read_text())
    assert record["shape"] == name and record["released_params"] == params and record["weights"] == "none"


def test_processor_and_tokenizer_load_and_expand_an_image_by_the_shapes_patch_and_merge(shape_dir):
    name, out = shape_dir
    _, processor_class, _, _, side, tokens = EXPECTED[name]
    processor = AutoProcessor.from_pretrained(out)
    assert type(processor).__name__ == processor_class
    config = AutoConfig.from_pretrained(out)
    tokenizer = processor.tokenizer
    assert len(tokenizer) == 151669 < config.text_config.vocab_size  # padded vocabulary, as released
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") == config.image_token_id == 151655
    assert config.text_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>") == 151645
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    batch = processor(text=[prompt], images=[Image.new("RGB", (side, side), (90, 120, 200))], return_tensors="pt")
    assert batch["image_grid_thw"].tolist() == [[1, 32, 32]]
    assert (batch["input_ids"][0] == 151655).sum().item() == tokens


def test_shape_names_in_the_cli_are_the_modules_shapes():
    assert SHAPE_NAMES == tuple(shapes.SHAPES)


def test_cli_refuses_to_replace_a_directory_it_did_not_write(tmp_path: Path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        cli_main(["shape", "--like", "qwen3-vl-8b", "--out", str(tmp_path)])
    assert "refusing to replace it" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# cut-down text and vision overrides per shape (2 text layers of 4 heads of 16, 1 vision block) so CPU memory suffices
SMALL_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}
SMALL_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
SMALL = {"qwen2.5-vl-3b": ({}, {}), "qwen3-vl-8b": ({"head_dim": 16}, {"deepstack_visual_indexes": [0]})}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_random_weights_are_written_loadable_in_the_requested_dtype(name: str, tmp_path: Path, monkeypatch):
    """The --weights random path on a cut-down shape; a tied head (the 3B's) comes back tied from disk."""
    real = shapes.SHAPES[name]
    text, vision = SMALL[name]
    rope = {**real.text["rope_parameters"], "mrope_section": [4, 2, 2]}  # sums to half the head dim, 16
    small = dataclasses.replace(real, text={**real.text, **SMALL_TEXT, **text, "rope_parameters": rope},
                                vision={**real.vision, **SMALL_VISION, **vision})
    monkeypatch.setitem(shapes.SHAPES, name, small)
    out = shapes.write_shape(name, tmp_path / "m", weights=True, device="cpu")
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert model.dtype.is_floating_point and str(model.dtype) == "torch.bfloat16"
    assert sum(p.numel() for p in model.parameters()) == shapes.count_params(model.config)
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) is TIED[name]
    assert json.loads((out / shapes.SHAPE_FILE).read_text())["weights"] == "random on cpu"


def test_a_shape_takes_the_tokenizer_of_a_model_built_before(tiny_vl_model_dir: Path, tmp_path: Path):
    """The GPU machine cannot fetch the tokenizer package: a real shape is written there from the staged tiny model's
    tokenizer (the CLI's exit 0 says it builds the released parameter count), its provenance naming that directory."""
    out = tmp_path / "qwen2.5-vl-3b"
    assert cli_main(["shape", "--like", "qwen2.5-vl-3b", "--out", str(out), "--tokenizer-from",
                     str(tiny_vl_model_dir)]) == 0
    for file in ("tokenizer.json", "chat_template.jinja"):
        assert (out / file).read_bytes() == (tiny_vl_model_dir / file).read_bytes(), file
    record = json.loads((out / shapes.SHAPE_FILE).read_text())["tokenizer"]
    assert record["from_model_dir"] == str(tiny_vl_model_dir)
