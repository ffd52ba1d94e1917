"""OmegaConf resolver for files shipped inside the installed package.

verl config keys such as ``multi_turn.tool_config_path`` and ``agent_loop_config_path`` take real file paths; a
recipe cannot know where pip put them. ``${neos_path:tools/neos_tools.yaml}`` resolves a path relative to the
installed ``recipes`` package to an absolute one, and fails loudly if the file is not there.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "neos_path"


def packaged_path(relative: str) -> str:
    if not relative or Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ValueError(f"{RESOLVER}: expected a relative path inside the recipes package, got {relative!r}")
    path = Path(str(files("recipes").joinpath(relative)))
    if not path.exists():
        raise FileNotFoundError(f"{RESOLVER}: {relative!r} is not shipped in the recipes package ({path})")
    return str(path)


if not OmegaConf.has_resolver(RESOLVER):
    OmegaConf.register_new_resolver(RESOLVER, packaged_path)
