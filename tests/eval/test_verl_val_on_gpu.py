"""``python -m verl_ext.eval verl`` on one GPU: a checkpoint through verl's own validation loop (``main_ppo
+recipe=neos_smoke trainer.val_only=True``: FSDP, the ``hf`` rollout backend, our ``neos_search_agent`` against our
tool server on the small world), verl's validation dump converted into judged results, the report and the viewer.

For the H200 machine (verl and Ray from ``../shared/gpu/verl_wheels.sh`` in ``/tmp/site``; the tool server's extra
packages in ``/tmp/extra``). Reads ``NEOS_TINY_VL_DIR`` (the checkpoint: an HF directory, e.g. ``.gpu/smoke-vl`` from
``python -m verl_ext.models build --out .gpu/smoke-vl --hidden-size 128 --layers 4 --dtype bfloat16``, or a warm-started
policy's ``global_step_N/huggingface``), ``NEOS_EVAL_WORLD`` (the small world, default ``worlds/small``) and
``NEOS_EVAL_BENCH`` (our split, ``benchmark.parquet`` of ``python -m data_gen neos --world worlds/small --out DIR``).
One plain command, no pytest-asyncio needed::

    PYTHONPATH=/tmp/site:$PWD:/tmp/extra NEOS_TINY_VL_DIR=/tmp/smoke-vl NEOS_EVAL_WORLD=/tmp/world \\
      NEOS_EVAL_BENCH=/tmp/data/benchmark.parquet python3 -m pytest -s -q -p no:cacheprovider \\
      -o python_files='test_*_on_gpu.py' -m gpu tests/eval/test_verl_val_on_gpu.py

Two items, two runs each, at most 4 turns: a random tiny policy writes text the Neos protocol reads as its (wrong)
final answer, so this checks the plumbing (every session dumped with its trajectory, converted, judged, reported), not
accuracy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_a_checkpoint_through_verls_validation_becomes_a_report(tmp_path, tiny_vl_model_dir, verl_subprocess_env):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not os.environ.get("NEOS_EVAL_BENCH"):
        pytest.skip("set NEOS_EVAL_BENCH to our split's benchmark.parquet (see the module docstring)")
    world = Path(os.environ.get("NEOS_EVAL_WORLD", REPO / "worlds" / "small")).resolve()
    out = tmp_path / "eval"
    command = [sys.executable, "-m", "verl_ext.eval", "verl", "--bench", f"neos=verl:{os.environ['NEOS_EVAL_BENCH']}",
               "--limit", "2", "--runs", "2", "--max-turns", "4", "--recipe", "neos_smoke",
               "--checkpoint", str(tiny_vl_model_dir), "--world", str(world), "--out", str(out), "--no-embeddings",
               "trainer.n_gpus_per_node=1"]
    print("command:", " ".join(command))
    run = subprocess.run(command, cwd=tmp_path, env=verl_subprocess_env, capture_output=True, text=True,
                         timeout=float(os.environ.get("NEOS_EVAL_TIMEOUT", 560)))
    print(run.stdout[-3000:], run.stderr[-3000:])
    logs = sorted(out.glob("verl/attempt-*/main_ppo.log"))
    if logs:
        log = logs[-1].read_text(errors="replace")
        print("--- main_ppo.log: validation lines and tail")
        print("\n".join(line[:2000] for line in log.splitlines() if "val-core" in line or "Traceback" in line))
        print(log[-5000:])
    assert run.returncode == 0, f"exit {run.returncode}"
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r["status"] for r in records} == {"ok"}
    assert {(r["item_id"], r["run"]) for r in records} == {(i, k) for i in {r["item_id"] for r in records}
                                                          for k in (0, 1)}
    for r in records:  # each session's TrajectoryRecord came through verl's dump
        assert r["trajectory"]["protocol"] == "neos" and 1 <= len(r["trajectory"]["turns"]) <= 4
        assert r["verdict"]["source"] == "rule" and r["question_images"]
    dumps = list(out.glob("verl/attempt-1/dump/*.jsonl"))
    assert len(dumps) == 1 and len(dumps[0].read_text().splitlines()) == 4
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["accuracy"]["neos"]["k"] == 2 and summary["behaviour"]["trajectories"] == 4
    assert (out / "report" / "viewer.html").is_file()
