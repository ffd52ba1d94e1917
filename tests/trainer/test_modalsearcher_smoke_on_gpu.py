"""``python -m verl.trainer.main_ppo +recipe=modalsearcher_smoke`` on one GPU: the ModalSearcher recipe (RLOO, the
ReAct agent loop with the 3-error rule and the in-group tool cache, ``modalsearch_reward``) through verl's vLLM
rollout against a real tool server on the small world, 3 policy updates.

Carry (git ignored): the ModalSearch data of the small world (``python -m data_gen modalsearch --world worlds/small
--out .gpu/ms-data --limit 24``) and ``worlds/small``; vLLM, verl and Ray from ``../shared/gpu/gpu_wheels.sh``.
``NEOS_SMOKE_POLICY`` names a warm-started policy (default: the tiny random model, which writes no valid call: the
run then checks the plumbing, not learning). Run::

    NEOS_TINY_VL_DIR=... NEOS_SMOKE_DATA=$PWD/.gpu/ms-data python -m pytest -s -o python_files='test_*_on_gpu.py' \\
      -m gpu tests/trainer/test_modalsearcher_smoke_on_gpu.py

It prints each step's key metrics and asserts that main_ppo finished its steps, that verl's rollout-vs-actor check
(``training/rollout_probs_diff_max``) stayed small, and that the ReAct agent loop's metrics were logged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_three_rloo_updates_on_vllm(tmp_path, tiny_vl_model_dir, verl_subprocess_env, free_port, wait_ready,
                                    run_main_ppo):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not os.environ.get("NEOS_SMOKE_DATA"):
        pytest.skip("set NEOS_SMOKE_DATA to the `python -m data_gen modalsearch` export (see the module docstring)")
    policy = Path(os.environ.get("NEOS_SMOKE_POLICY", tiny_vl_model_dir)).resolve()
    world = Path(os.environ.get("NEOS_SMOKE_WORLD", REPO / "worlds" / "small")).resolve()
    env = dict(verl_subprocess_env)
    port = free_port()
    with open(tmp_path / "tools.log", "w") as tools_log:
        tools = subprocess.Popen([sys.executable, "-m", "tool_server", "--world", str(world), "--port", str(port),
                                  "--no-ocr"], env=env, stdout=tools_log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}/healthz", tools)
            env.update(NEOS_SMOKE_DATA=str(Path(os.environ["NEOS_SMOKE_DATA"]).resolve()),
                       NEOS_SMOKE_MODEL=str(policy), NEOS_TOOL_SERVER_URL=f"http://127.0.0.1:{port}")
            returncode, log = run_main_ppo("modalsearcher_smoke", tmp_path, env)
        finally:
            tools.terminate()
            tools.wait(timeout=30)
    steps = re.findall(r"step:(\d+) - .*", log)
    for line in re.findall(r"step:\d+ - .*", log):
        keys = ("critic/score/mean", "training/rollout_probs_diff_max", "response_length/mean", "timing_s/gen",
                "timing_s/step", "num_turns/mean")
        print(" ".join(f"{k}={v}" for k, v in re.findall(r"([\w/]+):(\S+)", line) if k in keys or
                       k.startswith("modalsearch")))
    assert returncode == 0, log[-4000:]
    assert len(steps) == int(os.environ.get("NEOS_SMOKE_STEPS", 3)), steps
    diffs = [float(v) for v in re.findall(r"training/rollout_probs_diff_max:([0-9.eE+-]+)", log)]
    assert diffs and max(diffs) < 0.05, diffs  # rollout and actor agree on the sampled tokens' probabilities
