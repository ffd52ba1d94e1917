"""Our agent, tools and reward as rLLM plugins (optional extra ``neos-verl[rllm]``).

``episode`` and ``messages`` import neither verl nor rLLM; ``env`` (a ``BaseEnv``), ``workflow`` (a ``Workflow``)
and ``flow`` (an ``AgentFlow`` and an ``Evaluator``, registered under rLLM's ``rllm.agents`` / ``rllm.evaluators``
entry points) import rLLM through :func:`require_rllm`, which says how to install it when it is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = (
    "rLLM is not installed, and it is not on the package index. Install it with this package in one environment "
    "(Python 3.11 or 3.12; docs/rllm.md says why uv): git clone https://github.com/rllm-org/rllm && "
    "git -C rllm checkout 9beb6e0f && uv pip install ./rllm ./rllm/rllm-model-gateway './neos-verl[rllm]'"
)


def require_rllm(module: str = "rllm") -> ModuleType:
    """``import module`` (an rLLM module), or an ImportError that says how to install rLLM."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (e.name == "rllm" or e.name.startswith("rllm.")):
            raise ImportError(f"{module} is needed here. {INSTALL_HINT}") from e
        raise
