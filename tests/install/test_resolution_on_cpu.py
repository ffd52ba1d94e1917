"""Every extra resolves for every Python it claims, on Linux x86-64, without installing anything.

uv resolves ``neos-verl[EXTRA] @ file://<this checkout>`` against the package index, reading the same metadata pip
reads. The claims come from docs/install.md's "Extras" table (the install commands users copy, the Pythons and the
glibc each names), checked against pyproject.toml's extras and ``requires-python``: a command in the docs that does
not resolve, an extra the docs leave out, or a Python the docs leave out that resolves after all, fails here. Where
the index cannot be reached, or uv (the ``test`` extra) is missing, the tests skip and say so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# A row of the table: | `pip install '.[vllm]'` | 3.11, 3.12 | 2.28 | what it adds |
ROW = re.compile(r"^\| `pip install '?\.(?:\[(\w+)\])?'?` \| ([\d., ]+) \| (2\.\d+) \|", re.MULTILINE)
UNREACHABLE = ("dns error", "error sending request", "failed to lookup address", "tcp connect error",
               "connection refused", "network is unreachable", "operation timed out")
ALL_PYTHONS = [f"3.{minor}" for minor in range(8, 15)]
# The extra whose install needs a local clone of rLLM (docs/rllm.md); resolved by the rLLM test below.
RLLM = "rllm"


@dataclass(frozen=True)
class Claim:
    extra: str  # "" for the base package
    pythons: tuple[str, ...]
    glibc: str

    def spec(self) -> str:
        return f"neos-verl[{self.extra}]" if self.extra else "neos-verl"


def _claims() -> list[Claim]:
    text = (REPO / "docs" / "install.md").read_text()
    return [Claim(m.group(1) or "", tuple(p.strip() for p in m.group(2).split(",")), m.group(3))
            for m in ROW.finditer(text)]


CLAIMS = _claims()
ADMITTED = [p for p in ALL_PYTHONS if p in SpecifierSet(PYPROJECT["project"]["requires-python"])]


@dataclass(frozen=True)
class Resolution:
    ok: bool
    reason: str  # uv's explanation when it fails, one line


def resolve(requirements: list[str], python: str, glibc: str, tmp: Path) -> Resolution:
    """``uv pip compile`` of ``requirements`` for CPython ``python`` on manylinux ``glibc`` x86-64; installs nothing.
    Skips the calling test when the index cannot be reached."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")  # the locked one first
    if uv is None:
        pytest.skip("uv is not installed (the `test` extra brings it): the resolution tests need it")
    tmp.mkdir(parents=True, exist_ok=True)
    source = tmp / "requirements.in"
    source.write_text("\n".join(requirements) + "\n")
    done = subprocess.run(
        [uv, "pip", "compile", "--quiet", "--color", "never", "--python-version", python,
         "--python-platform", f"x86_64-manylinux_{glibc.replace('.', '_')}", str(source), "-o", str(tmp / "out.txt")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"}, cwd=tmp)
    if done.returncode == 0:
        return Resolution(True, "")
    err = done.stderr
    if any(s in err.lower() for s in UNREACHABLE):
        pytest.skip(f"the package index cannot be reached from here: {_one_line(err)[:200]}")
    return Resolution(False, _one_line(err))


def _one_line(err: str) -> str:
    """uv's error and causes, without its hints, on one line."""
    body = err.split("\nhint:")[0]
    return re.sub(r"\s+", " ", body).strip()[:900]


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory) -> dict[tuple[str, str], Resolution]:
    """Every claimed (extra, Python) and every admitted Python an extra does not claim, resolved concurrently (the
    base package first, alone, so that its metadata is built once)."""
    root = tmp_path_factory.mktemp("resolve")
    jobs = [(c, p) for c in CLAIMS for p in ADMITTED]

    def run(job: tuple[Claim, str]) -> Resolution:
        claim, python = job
        return resolve([f"{claim.spec()} @ file://{REPO}"], python, claim.glibc,
                       root / f"{claim.extra or 'base'}-{python}")

    first = run(jobs[0])
    with ThreadPoolExecutor(max_workers=6) as pool:
        rest = list(pool.map(run, jobs[1:]))
    return {(c.extra, p): r for (c, p), r in zip(jobs, [first, *rest])}


def test_the_docs_table_lists_every_extra_with_admitted_pythons():
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - {RLLM}
    assert {c.extra for c in CLAIMS} == extras | {""}, \
        "docs/install.md's Extras table must have one row per extra (and `pip install .`)"
    for claim in CLAIMS:
        assert claim.pythons and set(claim.pythons) <= set(ADMITTED), \
            f"{claim.spec()}: docs claim Python {claim.pythons}, requires-python admits {ADMITTED}"


@pytest.mark.parametrize("extra, python", [(c.extra, p) for c in CLAIMS for p in c.pythons],
                         ids=lambda v: v or "base")
def test_every_claimed_install_resolves(resolutions, extra, python):
    claim = next(c for c in CLAIMS if c.extra == extra)
    result = resolutions[(extra, python)]
    assert result.ok, f"{claim.spec()} on Python {python} (glibc {claim.glibc}) does not resolve: {result.reason}"


@pytest.mark.parametrize("extra, python", [(c.extra, p) for c in CLAIMS for p in ADMITTED if p not in c.pythons],
                         ids=lambda v: v or "base")
def test_an_unclaimed_python_really_fails(resolutions, extra, python):
    """The docs say this extra does not install on this Python: it must not resolve, or the docs understate it."""
    claim = next(c for c in CLAIMS if c.extra == extra)
    assert not resolutions[(extra, python)].ok, \
        f"{claim.spec()} now resolves on Python {python}: claim it in docs/install.md's Extras table"


def test_verl_own_sglang_extra_still_cannot_resolve(tmp_path):
    """Why our ``sglang`` extra does not use verl's: verl 0.9.1's pins sglang 0.5.12, which pins transformers 5.6.0,
    a version verl itself excludes. When this starts resolving, our extra can follow verl's pins again."""
    result = resolve(["verl[sglang]==0.9.1"], "3.12", "2.34", tmp_path)
    assert not result.ok and "transformers==5.6.0" in result.reason, result.reason


@pytest.mark.skipif(not os.environ.get("NEOS_RLLM_SRC"),
                    reason="NEOS_RLLM_SRC (a clone of rLLM, docs/rllm.md) is not set: rLLM is not on the package index")
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_rllm_route_resolves(tmp_path, python):
    """docs/rllm.md's install: rLLM's core, its gateway and ``neos-verl[rllm]`` in one environment."""
    src = Path(os.environ["NEOS_RLLM_SRC"]).resolve()
    result = resolve([f"rllm @ file://{src}", f"rllm-model-gateway @ file://{src}/rllm-model-gateway",
                      f"neos-verl[{RLLM},test] @ file://{REPO}"], python, "2.28", tmp_path)
    assert result.ok, f"the rLLM route on Python {python} does not resolve: {result.reason}"
