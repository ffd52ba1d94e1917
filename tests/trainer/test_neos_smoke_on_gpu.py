"""``python -m verl.trainer.main_ppo +recipe=neos_smoke`` on one GPU: the neos trainer (mixed groups judged, turn
credit, MEI co-evolution), our agent loop against a real tool server whose MEI is a real MEI server, 3 policy updates
and an MEI update after the second (K=2).

On the GPU machine (verl, Ray and vLLM staged by ``../shared/gpu/gpu_wheels.sh`` in ``/tmp/site``; docs/training.md
"GPU smoke run"). Carry (git ignored, one call's carry limit is 64 MiB and carried paths must be named in every
call): the Neos data of the small world (``python -m data_gen neos --world worlds/small --out .gpu/neos-data
--limit 24``; only its ``train.parquet``, ``rl.parquet``, ``sft.parquet``, ``mei_sft.jsonl`` and ``mei_sft.blobs``)
and ``worlds/small``. A randomly initialised policy never answers right and a random MEI never writes valid JSON, so
both are warm-started first, as in the paper (cold-start SFT), at the same time::

    # the policy: verl's SFT trainer on the cold-start trajectories (tests/data_gen/test_verl_sft_on_gpu.py)
    NEOS_SFT_STEPS=170 NEOS_SFT_LR=2e-3 NEOS_SFT_DATA=.gpu/neos-data NEOS_SFT_OUT=/tmp/neos-sft \
      python -m pytest ... tests/data_gen/test_verl_sft_on_gpu.py
    # the first MEI version on the MEI pairs (ends with "MEI v0 warm start: valid answers k/8")
    python -m verl_ext.mei.warm_start --model $NEOS_TINY_VL_DIR --pairs .gpu/neos-data/mei_sft.jsonl \
      --out /tmp/neos-mei --epochs 45 --lr 5e-3 --global-batch-size 8 --micro-batch-size 8 \
      --attn-implementation sdpa --no-remove-padding --check-calls 8 --check-max-new-tokens 768
    NEOS_SMOKE_DATA=.gpu/neos-data NEOS_SMOKE_POLICY=/tmp/neos-sft/global_step_170/huggingface \
      NEOS_SMOKE_MEI=/tmp/neos-mei/v0/huggingface NEOS_SMOKE_MEI_ENGINE=vllm NEOS_SMOKE_OVERRIDES="\
      actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
      actor_rollout_ref.rollout.enforce_eager=True" python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu \
      tests/trainer/test_neos_smoke_on_gpu.py

It starts the MEI server (``python -m verl_ext.mei.server``, or with ``NEOS_SMOKE_MEI_ENGINE=vllm`` ``python -m
verl_ext.mei.vllm_server``, checkpoints reloaded in place; ``NEOS_SMOKE_MEI`` as version v0) and ``python -m
tool_server --mei-endpoint`` on the small world (``NEOS_SMOKE_WORLD``, default ``worlds/small``) on loopback, then
the recipe with ``NEOS_TOOL_SERVER_URL``, ``NEOS_MEI_*`` and ``NEOS_SMOKE_*`` pointing at them; extra Hydra
overrides go in ``NEOS_SMOKE_OVERRIDES`` (space-separated). It prints the MEI warm start's check, each step's
``mei/*`` metrics and what the policy's turns did (tool calls, format errors, how episodes ended: why a round made
no MEI call), and the tool server's MEI outcomes (valid, repaired, fallback; invalid answers, timeouts).

Last runs and their figures: docs/training.md, "Status"."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_three_policy_updates_and_one_mei_update(tmp_path, tiny_vl_model_dir, verl_subprocess_env, free_port,
                                                 wait_ready, run_main_ppo):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not os.environ.get("NEOS_SMOKE_DATA"):
        pytest.skip("set NEOS_SMOKE_DATA to the `python -m data_gen neos` export (see the module docstring)")
    policy = Path(os.environ.get("NEOS_SMOKE_POLICY", tiny_vl_model_dir)).resolve()
    mei_model = Path(os.environ.get("NEOS_SMOKE_MEI", tiny_vl_model_dir)).resolve()
    world = Path(os.environ.get("NEOS_SMOKE_WORLD", REPO / "worlds" / "small")).resolve()
    data = Path(os.environ["NEOS_SMOKE_DATA"]).resolve()
    warm_start = mei_model.parent / "warm_start.json"  # python -m verl_ext.mei.warm_start's record of its check
    if warm_start.is_file():
        check = json.loads(warm_start.read_text()).get("check", {})
        print(f"MEI warm start check: valid answers {check.get('valid_answers')}/{check.get('checked')}")
    env = dict(verl_subprocess_env)
    mei_port, tool_port = free_port(), free_port()
    mei_log = tmp_path / "mei" / "mei.jsonl"
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("mei", "tools")}  # noqa: SIM115
    if os.environ.get("NEOS_SMOKE_MEI_ENGINE", "hf") == "vllm":  # the paper-scale engine, reloaded in place
        mei_command = ["verl_ext.mei.vllm_server", "--model", str(mei_model), "--version", "v0", "--port",
                       str(mei_port), "--max-new-tokens", "768", "--", "--gpu-memory-utilization", "0.12",
                       "--max-model-len", "16384", "--enforce-eager", "--generation-config", "vllm"]
    else:
        mei_command = ["verl_ext.mei.server", "--model", str(mei_model), "--version", "v0", "--port", str(mei_port),
                       "--max-new-tokens", "768"]
    mei = subprocess.Popen([sys.executable, "-m", *mei_command], env=env, stdout=logs["mei"], stderr=subprocess.STDOUT)
    tools = subprocess.Popen([sys.executable, "-m", "tool_server", "--world", str(world), "--port", str(tool_port),
                              "--mei-endpoint", f"http://127.0.0.1:{mei_port}/v1", "--mei-log", str(mei_log),
                              "--no-ocr"], env=env, stdout=logs["tools"], stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{mei_port}/admin/version", mei, timeout_s=600)
        wait_ready(f"http://127.0.0.1:{tool_port}/healthz", tools)
        env.update(NEOS_SMOKE_DATA=str(data), NEOS_SMOKE_MODEL=str(policy), NEOS_MEI_MODEL=str(mei_model),
                   NEOS_MEI_LOG=str(mei_log), NEOS_MEI_SERVER_URL=f"http://127.0.0.1:{mei_port}",
                   NEOS_TOOL_SERVER_URL=f"http://127.0.0.1:{tool_port}")
        returncode, log = run_main_ppo("neos_smoke", tmp_path, env)
        # the tool server's MEI outcomes: valid/repaired answers vs fallbacks, and why attempts failed
        # (invalid answers, timeouts, HTTP errors); a fallback is never retained for MEI SFT
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{tool_port}/metrics", timeout=30) as resp:
                events = [line for line in resp.read().decode().splitlines() if line.startswith("mei_events_total")]
            print("tool server MEI outcomes:", ", ".join(f"{line.split(chr(34))[1]}={line.split()[-1]}"
                                                         for line in events))
        except OSError as e:
            print(f"tool server MEI outcomes: /metrics unavailable ({e})")
    finally:
        for proc in (tools, mei):
            proc.terminate()
            proc.wait(timeout=30)
    for line in log.splitlines():  # the key lines: each step's metrics, MEI updates, sampler give-ups
        if re.search(r"step:\d+ - |MEI v\d+ trained|MEI co-evolution on|MEI calls span|questions deferred|"
                     r"MEI update due|Error|Traceback", line):
            print(line[:4000])
        step = re.search(r"step:(\d+) - ", line)
        if step:  # each step's MEI metrics in full: retained calls by source, selection, update loss and version
            mei_metrics = re.findall(r"(mei/[\w/]+):(\S+)", line)
            print(f"step {step.group(1)} MEI:", " ".join(f"{k}={v}" for k, v in mei_metrics))
            # what the policy's turns did: tool calls, format errors and how episodes ended (no MEI call: why)
            turns = re.findall(r"((?:neos_tools|neos_rollout)/[\w/]+):(\S+)", line)
            print(f"step {step.group(1)} turns:", " ".join(f"{k}={v}" for k, v in turns))
    if returncode != 0:
        for name in ("tools", "mei"):
            print(f"--- {name}.log tail\n" + (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:])
    print("--- main_ppo.log tail\n" + log[-6000:])
    assert returncode == 0, f"main_ppo exited with {returncode}"
    assert re.search(r"step:3 - ", log)
    assert "neos_credit/assessed_share" in log  # the estimator saw the rows' labels (or their absence)
    assert re.search(r"mei/version_index:1\b", log), "no MEI update after K=2 policy updates"
    # one MEI version per round: v0 for steps 1-2, v1 (announced to the tool server) for step 3
    mix = [float(v) for v in re.findall(r"mei/round_versions:([0-9.]+)", log)]
    assert len(mix) == 3 and max(mix) == 1.0, mix  # 0.0: a round whose trajectories made no MEI call
    assert not re.search(r"mei/round_unexpected_version_calls:[1-9]", log)
    assert re.search(r"mei/update/version:1\b", log)
    tools_log = (tmp_path / "tools.log").read_text(errors="replace")
    assert re.search(r"MEI version v1-\w+ activated \(was v0\)", tools_log)  # v<n>-<run id>: unique across runs
