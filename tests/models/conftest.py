"""Session fixtures for model tests (the model itself: ``tiny_vl_*`` in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def verl_model_config(tiny_vl_model_dir: Path):
    """The model directory as verl's trainer and rollout workers load it."""
    from verl.workers.config import HFModelConfig

    return HFModelConfig(path=str(tiny_vl_model_dir))
