"""Fresh-process checks that share one parent's imports: a fresh Python runs ``parent`` (the imports every check
needs: ``import verl`` alone is ~9 s of CPU on 2 cores), then forks one child per check, all at once, so each check
pays only for what it imports beyond the parent. The parent stays up for later checks of the same parent in this
pytest process (the recipe files' ``main_ppo`` runs, the registrations' and the vision freeze's probes): a test file
started no interpreter of its own for them."""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# The parent: its imports, then one request per line on stdin (the children's code, the directory for their output
# and the caller's environment, which each child takes as its own), answered by one line of exit statuses on the
# reply descriptor (what the parent or a child prints before its own redirection goes to stderr).
SERVER = """
import json, os, sys, traceback
reply = os.dup(1)
os.dup2(2, 1)
exec(compile(PARENT, "<parent>", "exec"), {"__name__": "__parent__"})
while line := sys.stdin.readline():
    request = json.loads(line)
    children = {}
    for name, code in request["children"].items():
        out, err = (os.open(os.path.join(request["dir"], f"{name}.{s}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    for s in ("out", "err"))
        sys.stdout.flush()  # nothing the parent printed may be printed again by a child
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(reply)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.environ.clear()
            os.environ.update(request["env"])
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
    os.write(reply, (json.dumps(status) + "\\n").encode())
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


@dataclass
class _Parent:
    proc: subprocess.Popen
    log: IO[bytes]  # its stderr

    def failure(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:].decode(errors="replace")


_parents: dict[tuple[str, str | None], _Parent] = {}


def _parent(parent: str, cwd: str | None) -> _Parent:
    """The running parent of this source and working directory, started on first use."""
    running = _parents.get((parent, cwd))
    if running is None or running.proc.poll() is not None:
        log = tempfile.NamedTemporaryFile(prefix="fork-parent-", suffix=".log")
        proc = subprocess.Popen([sys.executable, "-c", f"PARENT = {parent!r}\n{SERVER}"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=cwd)
        running = _parents[parent, cwd] = _Parent(proc, log)
    return running


@atexit.register
def _stop_parents() -> None:
    for running in _parents.values():
        running.proc.stdin.close()  # its loop ends at end of input
        try:
            running.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            running.proc.kill()


def run_forked(parent: str, children: dict[str, str], directory: Path, *, cwd: str | None = None,
               timeout: float = 600) -> dict[str, Child]:
    """``parent`` (Python source) in a fresh interpreter started in ``cwd`` (kept for later calls with the same two),
    then each of ``children`` (name -> Python source, run as ``__main__`` in this process's environment) in a fork of
    it; their output is kept in ``directory``. A child's exit status is 0 unless it raises (the traceback is on its
    stderr) or exits non-zero."""
    running = _parent(parent, cwd)
    request = {"children": children, "dir": str(directory), "env": dict(os.environ)}
    running.proc.stdin.write(json.dumps(request) + "\n")
    running.proc.stdin.flush()
    deadline = time.monotonic() + timeout
    while not select.select([running.proc.stdout], [], [], max(deadline - time.monotonic(), 0))[0]:
        if time.monotonic() >= deadline:
            running.proc.kill()
            raise TimeoutError(f"forked checks {sorted(children)} still running after {timeout:.0f} s")
    line = running.proc.stdout.readline()
    assert line, f"the fork parent exited with {running.proc.wait()}:\n{running.failure()}"
    status = json.loads(line)
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
