"""``python -m verl.trainer.main_ppo +recipe=neos_smoke`` on one GPU: the neos trainer (mixed groups judged, turn
credit, MEI co-evolution), our agent loop against a real tool server whose MEI is a real MEI server, 3 policy updates
and an MEI update after the second (K=2).

For the H200 machine (verl and Ray from ``../shared/gpu/verl_wheels.sh`` in ``/tmp/site``). Carry (git ignored):
the smoke model (``python -m verl_ext.models build --out .gpu/smoke-vl --hidden-size 128 --layers 4 --dtype
bfloat16``, ~50 MB), the Neos data of the small world (``python -m data_gen neos --world worlds/small --out
.gpu/neos-data --limit 24``; its ``train.parquet``, ``rl.parquet``, ``sft.parquet`` and ``mei_sft.jsonl`` with
``mei_sft.blobs``), ``.gpu/extra`` (json_repair, bm25s) and, in another call (one call's carry limit is 64 MiB;
carried paths stay on a warm machine), ``worlds/small``. A randomly initialised policy never answers right and a
random MEI never writes valid JSON, so both are warm-started first, as in the paper (cold-start SFT)::

    # the policy: verl's SFT trainer on the cold-start trajectories (tests/data_gen/test_verl_sft_on_gpu.py)
    NEOS_TINY_VL_DIR=.gpu/smoke-vl NEOS_SFT_STEPS=170 NEOS_SFT_LR=2e-3 NEOS_SFT_DATA=.gpu/neos-data \
      NEOS_SFT_OUT=/tmp/neos-sft python -m pytest ... test_verl_sft_on_gpu.py
    # the first MEI version, on the MEI pairs (39 for --limit 24)
    # (ends with "MEI v0 warm start: valid answers k/8": greedy answers read by the tool server's checks)
    python -m verl_ext.mei.warm_start --model .gpu/smoke-vl --pairs .gpu/neos-data/mei_sft.jsonl --out /tmp/neos-mei \
      --epochs 120 --lr 5e-3 --global-batch-size 13 --micro-batch-size 13 --attn-implementation sdpa --no-remove-padding \
      --check-calls 8 --check-max-new-tokens 768 --min-valid-share 0.75 --extra-rounds 1
    PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/extra NEOS_TINY_VL_DIR=$PWD/.gpu/smoke-vl NEOS_SMOKE_DATA=$PWD/.gpu/neos-data \
      NEOS_SMOKE_POLICY=/tmp/neos-sft/global_step_170/huggingface NEOS_SMOKE_MEI=/tmp/neos-mei/v0/huggingface \
      python -m pytest -s -o python_files='test_*_on_gpu.py' -m gpu tests/trainer/test_neos_smoke_on_gpu.py

It starts ``python -m verl_ext.mei.server`` (``NEOS_SMOKE_MEI`` as version v0) and ``python -m tool_server
--mei-endpoint`` on the small world (``NEOS_SMOKE_WORLD``, default ``worlds/small``) on loopback, then the recipe with
``NEOS_TOOL_SERVER_URL``, ``NEOS_MEI_*`` and ``NEOS_SMOKE_*`` pointing at them. ``NEOS_SMOKE_MEI_ENGINE=vllm``
serves the MEI with vLLM (``python -m verl_ext.mei.vllm_server``, checkpoints reloaded in place) instead. Extra
Hydra overrides for the run can be given in ``NEOS_SMOKE_OVERRIDES`` (space-separated), e.g.
``trainer.v1.neos.sampler.enable=true``. It prints the MEI warm start's check (``warm_start.json`` beside ``NEOS_SMOKE_MEI``), each step's ``mei/*`` metrics (retained
calls by source, selection counts, the update's loss and version) and the tool server's MEI outcomes (valid,
repaired, fallback; invalid answers, timeouts), which say why calls fell back.

Passed on the H200 on 2026-12-03 (511 s; overrides ``trainer.v1.neos.sampler.enable=false`` (now the recipe's
value) and ``trainer.v1.neos.mei.train.micro_batch_size_per_gpu=1``; policy and MEI warm-started on CPU on the same
data, policy loss 0.007, MEI 0.31): steps 1-3 in 132, 113 and 73 s, rewards 0.625 / 0.125 / 0.0,
``neos_credit/assessed_share`` 0.375 at steps 1 and 2, 5 MEI calls retained (2 from successes, 3 from productive
turns of judged failures), the MEI update after step 2 served as v1 (``mei/version_index:1.0``, loss 0.035).
With the sampler on (``trainer.v1.neos.sampler.enable=true trainer.total_training_steps=1``, so the step-3 and MEI
assertions fail by design) main_ppo exited 0 after one update: 42 trajectories admitted, 13 cancelled, 2 mixed groups
selected, generation 344 s (docs/benchmarks.md, "Mixed-group sampler").

Added since, not yet run on the GPU (docs/mei_coevolution.md): the MEI SFT group's weights and Adam state are
offloaded between updates (``pool: shared``), each step logs the rollout round's MEI version mix (asserted: never more
than one version), the update logs ``mei/update/*`` and the tool server logs the v1 activation the trainer announced.
Run again on an H100 on 2026-12-06 (main 5347c49, docs/training.md "Status"): main_ppo exited 0 after 3 updates, but
with a policy at SFT loss 0.52 (malformed calls, reward 0) and an MEI whose warm start was stopped for device time,
so no MEI update: these additions are still not exercised on a GPU.
"""

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
