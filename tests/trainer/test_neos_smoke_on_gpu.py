"""``python -m verl.trainer.main_ppo +recipe=neos_smoke`` on one GPU: the neos trainer, our agent loop against a real
tool server whose model MEI is a real MEI server, 3 policy updates and an MEI update after the second (K=2).

For the H200 machine (verl and Ray from ``/work/shared/gpu/verl_wheels.sh`` in ``/tmp/site``). Carry (``.gpu/``, git
ignored): the tiny Qwen2.5-VL (``python -m verl_ext.models build --out .gpu/tiny-vl``; policy and first MEI), the
small world (``python -m data_gen.world build --size small --out .gpu/world``) and its tasks
(``python -m data_gen neos --world .gpu/world --out .gpu/tasks --limit 16``). Run::

    PYTHONPATH=/tmp/site:$PWD NEOS_TINY_VL_DIR=.gpu/tiny-vl NEOS_SMOKE_WORLD=.gpu/world NEOS_SMOKE_DATA=.gpu/tasks \\
      python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu tests/trainer/test_neos_smoke_on_gpu.py

It starts ``python -m verl_ext.mei.server`` (the tiny model as MEI v0) and ``python -m tool_server --mei-endpoint``
on loopback, then the recipe with ``NEOS_TOOL_SERVER_URL``, ``NEOS_MEI_*`` and ``NEOS_SMOKE_*`` pointing at them.
A random policy rarely answers right, so groups may all fail: then no credit labels are made (the offline judge
needs a success as reference) and the run still has to complete its updates; with a policy warm-started by verl's
SFT trainer on the tasks' cold-start data (``NEOS_SMOKE_POLICY``) mixed groups appear.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise TimeoutError(url)


def test_three_policy_updates_and_one_mei_update(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = Path(os.environ["NEOS_TINY_VL_DIR"]).resolve()
    policy = Path(os.environ.get("NEOS_SMOKE_POLICY", model)).resolve()
    world = Path(os.environ["NEOS_SMOKE_WORLD"]).resolve()
    data = Path(os.environ["NEOS_SMOKE_DATA"]).resolve()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p),
        "VERL_USE_EXTERNAL_MODULES": "verl_ext.plugin",  # our package is on PYTHONPATH, not pip-installed
    }
    mei_port, tool_port = _free_port(), _free_port()
    mei_log = tmp_path / "mei" / "mei.jsonl"
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("mei", "tools")}  # noqa: SIM115
    mei = subprocess.Popen([sys.executable, "-m", "verl_ext.mei.server", "--model", str(model), "--version", "v0",
                            "--port", str(mei_port), "--max-new-tokens", "256"],
                           env=env, stdout=logs["mei"], stderr=subprocess.STDOUT)
    tools = subprocess.Popen([sys.executable, "-m", "tool_server", "--world", str(world), "--port", str(tool_port),
                              "--mei-endpoint", f"http://127.0.0.1:{mei_port}/v1", "--mei-log", str(mei_log),
                              "--no-ocr"], env=env, stdout=logs["tools"], stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{mei_port}/admin/version", mei)
        _wait_ready(f"http://127.0.0.1:{tool_port}/healthz", tools)
        env.update(NEOS_SMOKE_DATA=str(data), NEOS_SMOKE_MODEL=str(policy), NEOS_MEI_MODEL=str(model),
                   NEOS_MEI_LOG=str(mei_log), NEOS_MEI_SERVER_URL=f"http://127.0.0.1:{mei_port}",
                   NEOS_TOOL_SERVER_URL=f"http://127.0.0.1:{tool_port}")
        command = [sys.executable, "-m", "verl.trainer.main_ppo", "+recipe=neos_smoke",
                   f"trainer.default_local_dir={tmp_path}/checkpoints"]
        run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=560)
    finally:
        for proc in (tools, mei):
            proc.terminate()
            proc.wait(timeout=30)
    log = run.stdout + run.stderr
    print(log[-6000:])
    assert run.returncode == 0, log[-8000:]
    assert re.search(r"step:3 - ", log), log[-8000:]
    assert "neos_credit/assessed_share" in log  # the estimator saw the rows' labels (or their absence)
    assert re.search(r"mei/version_index:1\b", log), "no MEI update after K=2 policy updates"
