"""Our agent, tools and reward as rLLM plugins (optional extra ``neos-verl[rllm]``).

``episode`` and ``messages`` import neither verl nor rLLM; ``env`` (a ``BaseEnv``), ``workflow`` (a ``Workflow``)
and ``flow`` (an ``AgentFlow`` and an ``Evaluator``, registered under rLLM's ``rllm.agents`` / ``rllm.evaluators``
entry points) import rLLM through :func:`require_rllm`, which says in one line how to install it when it is
missing. ``engines`` imports neither either.
"""

from __future__ import annotations

from types import ModuleType

from verl_ext.optional import optional_import

INSTALL_HINT = (
    "rLLM is not installed, and it is not on the package index. Install it with this package in one environment "
    "(Python 3.11 or 3.12; docs/rllm.md says why uv): git clone https://github.com/rllm-org/rllm && "
    "git -C rllm checkout 9beb6e0f && uv pip install ./rllm ./rllm/rllm-model-gateway './neos-verl[rllm]'"
)


def require_rllm(module: str = "rllm") -> ModuleType:
    """``import module`` (an rLLM module), or a one-line ``MissingDependency`` (an ImportError) that says how to
    install rLLM."""
    return optional_import(module, f"{module} is needed here. {INSTALL_HINT}")
