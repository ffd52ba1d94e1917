"""Real-shape model directories for GPU benchmarks: the released architecture of a Qwen VL model, no weights.

Performance at the papers' model sizes needs the real architecture, not the real weights: vLLM serves such a
directory with ``--load-format dummy`` and torch builds it with ``from_config`` on the GPU, so nothing large
travels. The config is built through the transformers config class (derived fields such as ``layer_types`` stay
consistent with the layer count); tokenizer, processor and chat template are the tiny model's (the real Qwen3
tokenizer: 151,669 tokens, fewer than the padded vocabulary of the released configs, as in the released models).
``weights=True`` (the CLI's ``--weights random``) builds random weights on a device and saves them, for trainers
that load weights from disk (verl's FSDP workers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForImageTextToText,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    ProcessorMixin,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from neos_core.world.sources import SourceCache
from verl_ext.models.tiny_vl import _load_tokenizer, _tokenizer_of, chat_template, write_model_dir

SHAPE_FILE = "neos_shape.json"  # which shape, its source and released parameter count: marks a directory built here


@dataclass(frozen=True)
class Shape:
    """A released model's architecture: config class and fields, processor family, and the parameter count the
    built model must have (the released checkpoint's)."""

    config_class: type[PretrainedConfig]
    processor_class: type[ProcessorMixin]
    video_processor_class: type
    hf_model_type: str
    architecture: str  # config.json's "architectures": vLLM picks its model class by it
    text: dict[str, Any]
    vision: dict[str, Any]
    tie_word_embeddings: bool  # config.json's top-level flag: the LM head shares the embedding (transformers 5 and
    # vLLM read it there, not from text_config)
    pixels: tuple[int, int]  # the released image processor's (shortest_edge, longest_edge), in pixels
    image_norm: tuple[float, float] | None  # (mean, std) of every channel; None: the processor's default (CLIP's)
    released_params: int
    source: str


# Qwen/Qwen2.5-VL-7B-Instruct. Source: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/
# test_modeling_qwen2_5vl.py (QWEN2_5_VL_7B_CONFIG, the released config.json with the layer counts cut for the
# test; its comments give the full model's 28 text layers and 32 vision blocks). fullatt_block_indexes
# [7, 15, 23, 31] and hidden_act silu: the same file's vision block and transformers' Qwen2_5_VLVisionConfig
# defaults. Released image processor: min_pixels 3136 = 4 x 28^2, max_pixels 12845056 = 16384 x 28^2.
_QWEN2_5_VL_7B = Shape(
    config_class=Qwen2_5_VLConfig,
    processor_class=Qwen2_5_VLProcessor,
    video_processor_class=Qwen2VLVideoProcessor,
    hf_model_type="qwen2_5_vl",
    architecture="Qwen2_5_VLForConditionalGeneration",
    text={"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
          "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 128000,
          "rms_norm_eps": 1e-6, "hidden_act": "silu",
          "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}},
    vision={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "hidden_act": "silu"},
    tie_word_embeddings=False,
    pixels=(3136, 12845056),
    image_norm=None,
    released_params=8_292_166_656,
    source="NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_qwen2_5vl.py",
)

# Qwen/Qwen2.5-VL-3B-Instruct. Source: whaler404/Hf-Learn transfomers_learn/api/models/multimodal_models/qwen2.5_vl/
# qwen2.5_vl.md (the released config.json in full, and a torchinfo table of the model's modules): the 7B's layout at
# 2048 wide, with vocab 151936 (the 7B pads to 152064), 36 layers, 16 heads, 2 KV heads, intermediate 11008 and
# tie_word_embeddings true (the 7B is untied); the rest as the 7B's, which it states: max_position_embeddings 128000,
# rms_norm_eps 1e-6, silu, rope_theta 1e6, mrope_section [16, 24, 24], sliding window off; the 7B's vision tower
# (depth 32, 1280 wide, intermediate 3420, 16 heads, window 112, fullatt [7, 15, 23, 31]) but for out_hidden_size
# 2048. Pixel bounds: the 7B's (the 3B's preprocessor_config.json is in no stored source; the family shares the
# processor). released_params by hand from this config, each module equal to the source's torchinfo row: text =
# embedding 151936 x 2048 = 311,164,928 (the head shares it) + 36 layers x 77,076,992 (q 2048^2 + 2048 bias, k and v
# 2048 x 256 + 256, o 2048^2, MLP 3 x 2048 x 11008, 2 norms) + norm 2048 = 3,085,938,688; vision = patch conv
# 1,505,280 + 32 blocks x 19,702,200 + merger 1280 + 36,707,328 = 668,684,288; total 3,754,622,976, the model
# card's "3.75B" (7,509,245,952 bytes of bf16 safetensors).
_QWEN2_5_VL_3B = replace(
    _QWEN2_5_VL_7B,
    text={**_QWEN2_5_VL_7B.text, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
          "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2},
    vision={**_QWEN2_5_VL_7B.vision, "out_hidden_size": 2048},
    tie_word_embeddings=True,
    released_params=3_754_622_976,
    source="whaler404/Hf-Learn transfomers_learn/api/models/multimodal_models/qwen2.5_vl/qwen2.5_vl.md",
)

SHAPES: dict[str, Shape] = {
    "qwen2.5-vl-3b": _QWEN2_5_VL_3B,
    "qwen2.5-vl-7b": _QWEN2_5_VL_7B,
    # Qwen/Qwen3-VL-8B-Instruct. Source: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/
    # test_modeling_qwen3vl.py (QWEN3_VL_8B_CONFIG, the released config.json with 4 text layers "for testing, 36
    # layers for full model"). Released image processor (Qwen2VLImageProcessorFast): shortest_edge 65536 = 64 x 32^2,
    # longest_edge 16777216 = 16384 x 32^2, mean = std = 0.5.
    "qwen3-vl-8b": Shape(
        config_class=Qwen3VLConfig,
        processor_class=Qwen3VLProcessor,
        video_processor_class=Qwen3VLVideoProcessor,
        hf_model_type="qwen3_vl",
        architecture="Qwen3VLForConditionalGeneration",
        text={"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "hidden_act": "silu",
              "tie_word_embeddings": False,
              "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
                                  "mrope_interleaved": True}},
        vision={"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "out_hidden_size": 4096,
                "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                "deepstack_visual_indexes": [8, 16, 24], "num_position_embeddings": 2304,
                "hidden_act": "gelu_pytorch_tanh"},
        tie_word_embeddings=False,
        pixels=(65536, 16777216),
        image_norm=(0.5, 0.5),
        released_params=8_767_123_696,
        source="NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_qwen3vl.py",
    ),
}


def shape_config(name: str, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    """The config of shape ``name`` through its transformers class, with the tokenizer's end and pad ids (the
    released ones: <|im_end|> 151645, <|endoftext|> 151643) and the released bfloat16 dtype (what vLLM's
    ``--dtype auto`` serves)."""
    shape = SHAPES[name]
    ids = {"eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": tokenizer.pad_token_id}
    return shape.config_class(text_config={**shape.text, **ids}, vision_config=dict(shape.vision),
                              tie_word_embeddings=shape.tie_word_embeddings, architectures=[shape.architecture],
                              dtype="bfloat16")


def shape_processor(name: str, tokenizer: PreTrainedTokenizerBase) -> ProcessorMixin:
    """The shape's processor family around the tiny model's tokenizer and chat template, with the released image
    processor's patch, merge and pixel bounds."""
    shape = SHAPES[name]
    vision = shape.vision
    size = {"shortest_edge": shape.pixels[0], "longest_edge": shape.pixels[1]}
    geometry = {"patch_size": vision["patch_size"], "merge_size": vision["spatial_merge_size"],
                "temporal_patch_size": vision["temporal_patch_size"], "size": size}
    if shape.image_norm is not None:
        mean, std = shape.image_norm
        geometry |= {"image_mean": [mean] * 3, "image_std": [std] * 3}
    return shape.processor_class(image_processor=Qwen2VLImageProcessor(**geometry), tokenizer=tokenizer,
                                 video_processor=shape.video_processor_class(**geometry),
                                 chat_template=chat_template())


def build_on(config: PretrainedConfig, device: torch.device | str, dtype: torch.dtype = torch.bfloat16):
    """The model of ``config`` with random weights on ``device`` (``"meta"``: shapes only, no memory)."""
    with torch.device(device):
        return AutoModelForImageTextToText.from_config(config, dtype=dtype)


def write_shape(name: str, out_dir: Path, *, cache: SourceCache | None = None, weights: bool = False,
                device: str = "cpu", dtype: torch.dtype = torch.bfloat16, tokenizer_from: Path | None = None) -> Path:
    """Write shape ``name`` as a HF model directory: config, generation config, tokenizer, processor, chat template
    and ``neos_shape.json``; with ``weights``, random weights built on ``device`` too. Without weights, load it with
    vLLM's ``--load-format dummy`` or ``from_config``. ``tokenizer_from``: a model directory built here to take the
    tokenizer from instead of the source cache (the GPU machine cannot fetch the package)."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join(SHAPES)}")
    shape = SHAPES[name]
    if tokenizer_from is None:
        tokenizer, source = _load_tokenizer(cache)
        tokenizer_record = source.manifest_record()
    else:
        tokenizer, tokenizer_record = _tokenizer_of(tokenizer_from)
    config = shape_config(name, tokenizer)
    stop_ids = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    generation = GenerationConfig(eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id)

    def write(tmp: Path) -> None:
        if weights:
            model = build_on(config, device, dtype)
            model.generation_config = generation
            model.save_pretrained(tmp)
            del model
        else:
            config.save_pretrained(tmp)
            generation.save_pretrained(tmp)
        shape_processor(name, tokenizer).save_pretrained(tmp)
        record = {"shape": name, "source": shape.source, "released_params": shape.released_params,
                  "hf_model_type": shape.hf_model_type, "weights": f"random on {device}" if weights else "none",
                  "tokenizer": tokenizer_record}
        (tmp / SHAPE_FILE).write_text(json.dumps(record, indent=1) + "\n")

    return write_model_dir(Path(out_dir), write)


def count_params(config: PretrainedConfig, predicate: Callable[[str], bool] = lambda _: True) -> int:
    """Parameters of the model ``config`` describes (built on the meta device: no memory), those whose name
    ``predicate`` accepts."""
    model = build_on(config, "meta")
    return sum(p.numel() for n, p in model.named_parameters() if predicate(n))
