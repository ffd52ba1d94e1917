"""Fresh-process checks that share one parent's imports: a fresh Python runs ``parent`` (the imports every check
needs: ``import verl`` alone is ~9 s of CPU on 2 cores), then forks one child per check, all at once, so each check
pays only for what it imports beyond the parent."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = """
import json, os, sys, traceback
exec(compile(PARENT, "<parent>", "exec"), {"__name__": "__parent__"})
children = {}
for name, code in CHILDREN.items():
    out, err = (os.open(os.path.join(DIR, f"{name}.{s}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                for s in ("out", "err"))
    sys.stdout.flush()  # nothing the parent printed may be printed again by a child
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.dup2(out, 1)
        os.dup2(err, 2)
        code_ = 1
        try:
            exec(compile(code, f"<{name}>", "exec"), {"__name__": "__main__"})
            code_ = 0
        except SystemExit as e:
            code_ = e.code if isinstance(e.code, int) else int(e.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code_)
    os.close(out)
    os.close(err)
    children[pid] = name
status = {}
while children:
    pid, code_ = os.wait()
    status[children.pop(pid)] = os.waitstatus_to_exitcode(code_)
print(json.dumps(status))
"""


# The third-party libraries verl imports, ~7 s of a fresh process's ~9 s of ``import verl`` on 2 cores. A parent that
# imports only them (checked there) leaves each child to import verl and every package of ours afresh, in its own
# order and under its own environment variables, as a new process would.
VERL_DEPENDENCIES = ("torch", "torch._dynamo", "tensordict", "transformers", "transformers.models.auto.auto_factory",
                     "sklearn.metrics", "numpy", "pandas", "pyarrow", "omegaconf", "hydra")
OURS = ("verl", "verl_ext", "tool_server", "neos_core", "data_gen")
FRESH_PARENT = f"""
import importlib, sys
for name in {VERL_DEPENDENCIES!r}:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {OURS!r})
assert not loaded, f"the parent imported {{loaded[:5]}}"
"""


@dataclass
class Child:
    returncode: int
    stdout: str
    stderr: str


def run_forked(parent: str, children: dict[str, str], directory: Path, *, cwd: str | None = None,
               timeout: float = 600) -> dict[str, Child]:
    """``parent`` (Python source) in a fresh interpreter started in ``cwd``, then each of ``children`` (name -> Python
    source, run as ``__main__``) in a fork of it; their output is kept in ``directory``. A child's exit status is 0
    unless it raises (the traceback is on its stderr) or exits non-zero."""
    script = f"PARENT, CHILDREN, DIR = {parent!r}, {children!r}, {str(directory)!r}\n{SCRIPT}"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    status = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(status) == sorted(children)
    return {name: Child(code, *((directory / f"{name}.{s}").read_text() for s in ("out", "err")))
            for name, code in status.items()}


MAIN_PPO = "import sys\nfrom verl.trainer import main_ppo\n"


def main_ppo_jobs(jobs: dict[str, tuple[str, ...]], directory: Path) -> dict[str, dict]:
    """``python -m verl.trainer.main_ppo ARGS`` (e.g. ``+recipe=neos --cfg job``) for each of ``jobs`` (name -> ARGS),
    in "/" (nothing of a source checkout on the path: only what pip installed), each printing a YAML document: forks
    of one process that imported ``main_ppo``. Returns name -> the parsed document."""
    import yaml

    runs = {name: f"{MAIN_PPO}sys.argv = [main_ppo.__file__, *{list(args)!r}]\nmain_ppo.main()"
            for name, args in jobs.items()}
    children = run_forked(MAIN_PPO, runs, directory, cwd="/")
    for name, child in children.items():
        assert child.returncode == 0, f"{name}: {child.stderr[-3000:]}"
    return {name: yaml.safe_load(child.stdout) for name, child in children.items()}
