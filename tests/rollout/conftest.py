from __future__ import annotations

import pytest
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from verl_ext.models.tiny_vl import HF_MODEL_TYPE


@pytest.fixture
def vl_builder(tiny_vl_processor):
    """Makes verl's continuous-token builder for the tiny Qwen2.5-VL; a fresh one per call, since the fast render
    path wraps the builder it is given."""
    return lambda: create_continuous_token_builder(
        tiny_vl_processor.tokenizer, hf_model_type=HF_MODEL_TYPE, processor=tiny_vl_processor
    )
