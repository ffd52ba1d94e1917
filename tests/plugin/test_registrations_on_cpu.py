"""After a plain ``import verl`` every registration of ours exists, in a fresh process and in a Ray worker.

verl swallows plugin import errors, so this is the only place a broken plugin shows before a training run does.
"""

import json

import pytest

from verl_ext.registrations import REGISTRATIONS, Registration, is_registered

from ..forks import FRESH_PARENT, Child, run_forked

# ``import verl`` after the first module: verl loads our plugin then, whatever that module already imported.
CHECK = (
    "import verl\nimport json\nfrom verl_ext.registrations import missing\n"
    "print(json.dumps([r.name for r in missing()]))\n"
)


# Modules a process may import before verl: ``python -m verl_ext.mei.server``, and Ray workers that unpickle their
# actor class (the agent-loop worker, the MEI SFT worker, the rollout server). verl's plugin load then runs while that
# module is half-initialised and must not need it: circular imports of this kind stopped the MEI server and the
# agent-loop workers on the GPU machine.
FIRST_IMPORTS = ("verl", "verl_ext.rollout.hf_generate", "verl_ext.mei.server", "verl_ext.rollout.tq_worker",
                 "verl_ext.mei.worker", "verl_ext.rollout.hf_replica", "verl_ext.trainer.neos_trainer")


# Without verl's loader (policy "none", nothing else in the environment) nothing of ours may appear: the first-module
# checks therefore prove the entry point works, not some import side effect of verl_ext itself.
WITHOUT_LOADER = ("import os\nos.environ.clear()\nos.environ.update(VERL_USE_EXTERNAL_PLUGINS='none', PATH='')\n"
                  "import verl\nfrom verl_ext.registrations import missing\nprint(len(missing()))")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, Child]:
    """Each first module's check, and the one without verl's loader, in forks of a parent that imported only verl's
    third-party dependencies (``tests/forks.py``)."""
    checks = {first: f"import {first}\n{CHECK}" for first in FIRST_IMPORTS}
    return run_forked(FRESH_PARENT, {**checks, "without_loader": WITHOUT_LOADER}, tmp_path_factory.mktemp("fresh"))


def test_every_registration_present_whichever_module_a_fresh_process_imports_first(fresh):
    for first in FIRST_IMPORTS:
        assert fresh[first].returncode == 0, f"import {first} first:\n{fresh[first].stderr[-3000:]}"
        assert json.loads(fresh[first].stdout.strip().splitlines()[-1]) == [], first


def test_plugin_is_loaded_through_verls_entry_point_not_by_us(fresh):
    assert fresh["without_loader"].returncode == 0, fresh["without_loader"].stderr[-3000:]
    assert int(fresh["without_loader"].stdout.strip().splitlines()[-1]) == len(REGISTRATIONS)


def test_every_registration_present_inside_a_ray_worker(ray_cluster):
    @ray_cluster.remote
    def missing_in_worker() -> list[str]:
        import verl  # noqa: F401  (the worker's own plugin load)

        from verl_ext.registrations import missing

        return [r.name for r in missing()]

    assert ray_cluster.get(missing_in_worker.remote(), timeout=300) == []


def test_unknown_kind_is_an_error_not_a_false():
    with pytest.raises(ValueError, match="unknown registration kind"):
        is_registered(Registration("nonsense", "x", "verl_ext.config"))  # type: ignore[arg-type]
