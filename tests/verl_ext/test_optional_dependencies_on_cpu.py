"""A missing optional dependency (the ``rllm`` and ``eval`` extras) prints one line with the install command, not a
traceback (issue 34: ``raise ... from e`` printed 26 chained lines above the hint).

Each case runs in a fresh interpreter where the dependency is absent: ``sys.modules[name] = None`` makes Python's
import raise ``ModuleNotFoundError`` for it, as when it is not installed. The expected lines are written out here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.rllm import INSTALL_HINT

REPO = Path(__file__).resolve().parents[2]
EVAL_HINT = "pip install '.[eval]' in a neos-verl clone"


def uncaught(absent: str, code: str) -> subprocess.CompletedProcess:
    script = f"import sys\nsys.modules[{absent!r}] = None\n{code}\n"
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(
    ("absent", "code", "line"),
    [
        ("rllm", "import verl_ext.rllm.env",
         f"MissingDependency: rllm.environments.base.base_env is needed here. {INSTALL_HINT}"),
        ("rllm", "import verl_ext.rllm.workflow",  # it imports env first
         f"MissingDependency: rllm.environments.base.base_env is needed here. {INSTALL_HINT}"),
        ("rllm", "import verl_ext.rllm.flow", f"MissingDependency: rllm.types is needed here. {INSTALL_HINT}"),
        ("scipy", "from verl_ext.eval.stats import mean_ci95\nmean_ci95([1.0, 0.0])",
         f"MissingDependency: confidence intervals need scipy, in the [eval] extra: {EVAL_HINT}"),
        ("sentence_transformers", "from verl_ext.eval.embed import minilm\nminilm(['q'])",
         "MissingDependency: the repeated-search analysis needs the [eval] extra (sentence_transformers is missing): "
         f"{EVAL_HINT}, or pass --no-embeddings"),
    ],
)
def test_a_missing_optional_dependency_prints_one_line_with_the_install_command(absent, code, line):
    run = uncaught(absent, code)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [line], run.stderr
    assert run.stdout == ""


def test_it_is_still_an_import_error_to_code_that_catches_one_and_other_errors_keep_their_traceback():
    """``pytest.importorskip`` and fallbacks catch ``ImportError``; the one-line printing covers only the missing
    dependency, so an unrelated uncaught error after one was caught prints its traceback as before."""
    code = ("try:\n    import verl_ext.rllm.env\nexcept ImportError as e:\n    print(isinstance(e, ImportError))\n"
            "raise RuntimeError('unrelated')")
    run = uncaught("rllm", code)
    assert run.stdout == "True\n"
    assert run.stderr.startswith("Traceback (most recent call last):\n")
    assert run.stderr.splitlines()[-1] == "RuntimeError: unrelated"
