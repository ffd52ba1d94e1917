"""``bench/learning_curve.py`` with stand-ins for the three processes of a run (an MEI server answering ``/health``, a
tool server announcing its URL, a ``main_ppo`` writing file-logger lines): every estimator x seed runs once with its
own ports, log file and seed; a finished run is skipped on the next invocation; a run that stopped short is not
marked done and its next attempt writes a metrics file of its own. The real commands are checked as printed by
``--dry-run``; the GPU runs them (docs/training.md, "Learning curve")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the bench scripts, as they run
import learning_curve as driver  # noqa: E402

HEALTH = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
TOOLS = "import time; time.sleep(600)"
# main_ppo: a file-logger line per step up to STOP (default: trainer.total_training_steps), then the exit code; what
# it was given goes beside its log.
MAIN_PPO = """
import json, os, sys, time
began = time.time()
time.sleep(float(os.environ.get("STAND_IN_ENGINE_S", 0.5)))  # the rollout engine starting
print("LLMServerManager: ['stand-in']", flush=True)  # what verl prints once it has
ready = time.time()
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
steps = int(args["trainer.total_training_steps"])
stop = int(os.environ.get("STAND_IN_STOP", steps))
with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as f:
    for step in range(1, stop + 1):
        time.sleep(float(os.environ.get("STAND_IN_STEP_S", 0)))
        data = {"critic/score/mean": step / 10, "neos_rollout/turn_outcome_share/call_ok": 0.5,
                "neos_groups/mixed_share": step / 4}
        data.update({"val-core/neos_synth/acc/mean@2": step / 20} if step % 2 else {})
        # verl's phase timers: the first step's engine warms up (slower); turn credit's advantage 0.2 s longer
        adv = 0.3 if args["algorithm.adv_estimator"] == "neos_turn_credit" else 0.1
        gen = 5.0 if step == 1 else 1.0 + step / 10
        data.update({"timing_s/gen": gen, "timing_s/adv": adv, "timing_s/update_actor": 2.0,
                     "timing_s/step": gen + adv + 2.0})
        f.write(json.dumps({"step": step, "data": data}) + "\\n")
        f.flush()
seen = {k: os.environ[k] for k in ("NEOS_CURVE_DATA", "NEOS_CURVE_POLICY", "NEOS_MEI_MODEL", "NEOS_MEI_LOG",
                                   "NEOS_MEI_SERVER_URL", "NEOS_TOOL_SERVER_URL", "VERL_FILE_LOGGER_PATH",
                                   "PYTHONPATH", "VERL_USE_EXTERNAL_MODULES") if k in os.environ}
json.dump({"args": args, "env": seen, "began": began, "ready": ready, "ended": time.time()}, open("seen.json", "w"))
sys.exit(0 if stop == steps else 1)
"""


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    for name, files in {"data": ["rl.parquet", "benchmark.parquet"], "policy": ["config.json"],
                        "mei": ["config.json"], "world": ["manifest.json"]}.items():
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("")
    monkeypatch.setattr(driver, "mei_command", lambda settings, port: [sys.executable, "-c", HEALTH, str(port)])
    monkeypatch.setattr(driver, "start_tools", lambda argv, **kw: (subprocess.Popen([sys.executable, "-c", TOOLS],
                                                                                  **kw), "http://127.0.0.1:9"))
    real = driver.main_ppo_command
    monkeypatch.setattr(driver, "main_ppo_command",
                        lambda run, settings: [sys.executable, "-c", MAIN_PPO, *real(run, settings)[3:]])
    return ["--data", str(tmp_path / "data"), "--policy", str(tmp_path / "policy"), "--mei", str(tmp_path / "mei"),
            "--world", str(tmp_path / "world"), "--out", str(tmp_path / "out"), "--checkpoints",
            str(tmp_path / "ckpt"), "--seeds", "1", "2", "--steps", "4", "--parallel", "2"]


def test_each_estimator_and_seed_runs_once_then_is_skipped(inputs, tmp_path, capsys):
    assert driver.main([*inputs, "--", "trainer.test_freq=2"]) == 0
    out = tmp_path / "out"
    seen = {}
    for estimator in driver.ESTIMATORS:
        for seed in (1, 2):
            run = out / estimator / f"seed{seed}"
            done = json.loads((run / "done.json").read_text())
            assert (done["estimator"], done["seed"], done["last_step"], done["attempt"]) == (estimator, seed, 4, 1)
            seen[estimator, seed] = json.loads((run / "seen.json").read_text())
            args, env = seen[estimator, seed]["args"], seen[estimator, seed]["env"]
            assert (args["algorithm.adv_estimator"], args["trainer.seed"]) == (estimator, str(seed))
            assert args["trainer.default_local_dir"] == str(tmp_path / "ckpt" / estimator / f"seed{seed}")
            assert args["trainer.test_freq"] == "2"  # the overrides after --
            assert env["VERL_FILE_LOGGER_PATH"] == str(run / "metrics-1.jsonl")
            assert env["NEOS_MEI_LOG"] == str(run / "mei" / "mei.jsonl")
            assert env["NEOS_CURVE_DATA"] == str(tmp_path / "data")
            assert env["NEOS_TOOL_SERVER_URL"] == "http://127.0.0.1:9"
            assert str(driver.REPO) in env["PYTHONPATH"].split(":")  # our plugin, wherever the driver started
            assert env["VERL_USE_EXTERNAL_MODULES"] == "verl_ext.plugin"
    assert len({s["env"]["NEOS_MEI_SERVER_URL"] for s in seen.values()}) == 4  # an MEI server per run
    # two waves of --parallel 2, seed by seed: the second starts once the first has ended (an order, not a speed)
    assert max(seen[e, 1]["ended"] for e in driver.ESTIMATORS) <= min(seen[e, 2]["began"] for e in driver.ESTIMATORS)
    # within a wave, one run starts its engines at a time: the second once the first's have started
    for seed in (1, 2):
        first, second = sorted((seen[e, seed] for e in driver.ESTIMATORS), key=lambda s: s["began"])
        assert first["ready"] <= second["began"]
    capsys.readouterr()
    assert driver.main(inputs) == 0  # all finished: nothing runs again
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 4 and '"status"' not in printed
    assert not list(out.glob("*/seed*/main_ppo-2.log"))
    # more steps asked: every run is extended by a second attempt (verl resumes it from its last checkpoint)
    more = [*inputs[:inputs.index("--steps")], "--steps", "6", "--parallel", "2"]
    assert driver.main(more) == 0
    assert {json.loads(p.read_text())["last_step"] for p in out.glob("*/seed*/done.json")} == {6}
    assert len(list(out.glob("*/seed*/main_ppo-2.log"))) == 4


def test_each_runs_step_split_and_turn_credit_against_grpo(inputs, tmp_path, capsys):
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--steps", "4", "--parallel", "2"]
    assert driver.main(one) == 0
    printed = capsys.readouterr().out
    done = json.loads((tmp_path / "out" / "neos_turn_credit" / "seed1" / "done.json").read_text())
    # steps 2-4 (the first, 5 s of generation, warms up): gen 1.2, 1.3, 1.4 -> median 1.3; step 1.3 + 0.3 + 2.0
    assert done["split_s"] == {"adv": 0.3, "gen": 1.3, "step": 3.6, "update_actor": 2.0}
    assert "neos_turn_credit/seed1: a step 3.6 s (adv 0.3, gen 1.3, update_actor 2.0)" in printed
    assert "neos_turn_credit / grpo step time: 1.06x (3.6 s vs 3.4 s)" in printed
    assert "neos_turn_credit/seed1: step 4 of 4, reward 0.400, call_ok 0.500, mixed 1.000, step_s 3.700" in printed


def test_the_split_of_a_real_verl_file_logger():
    """verl 0.9.1's file logger on an H100 (2026-12-07, ``neos_curve`` with grpo, as written): step 0 the validation
    (no timers), step 1 the only update, so its split is the first step's alone."""
    metrics = Path(__file__).parent / "fixtures" / "verl_file_logger_grpo_h100.jsonl"
    assert driver.step_split(metrics) == {"adv": 0.07, "gen": 8.04, "old_log_prob": 10.27, "step": 42.28,
                                          "update_actor": 23.27, "update_weights": 0.26}


def test_a_start_gap_starts_the_next_run_before_the_first_ones_engine_is_up(inputs, tmp_path, monkeypatch):
    # the stand-in's engine is up 3 s after its launch; the gap lets the second run begin 0.1 s after the first's
    # MEI answered, long before that
    monkeypatch.setenv("STAND_IN_ENGINE_S", "3")
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--steps", "2", "--parallel", "2"]
    assert driver.main([*one, "--start-gap-s", "0.1"]) == 0
    first, second = sorted((json.loads((tmp_path / "out" / e / "seed1" / "seen.json").read_text())
                            for e in driver.ESTIMATORS), key=lambda s: s["began"])
    assert second["began"] < first["ready"]


def test_the_trainer_starts_while_the_mei_server_is_still_starting(inputs, tmp_path, monkeypatch):
    # an MEI server that answers /health only after 1.5 s (a real one took about two minutes), noting when
    slow = "import sys, time; time.sleep(1.5); open(sys.argv[2], 'w').write(repr(time.time()))\n" + HEALTH
    monkeypatch.setattr(driver, "mei_command",
                        lambda settings, port: [sys.executable, "-c", slow, str(port), str(tmp_path / "mei-up")])
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--estimators", "grpo", "--steps", "2"]
    assert driver.main(one) == 0
    seen = json.loads((tmp_path / "out" / "grpo" / "seed1" / "seen.json").read_text())
    assert seen["began"] < float((tmp_path / "mei-up").read_text())


def test_without_an_mei_no_server_starts_the_tools_answer_extractively_and_co_evolution_is_off(inputs, tmp_path,
                                                                                              monkeypatch, capsys):
    def no_mei(settings, port):
        raise AssertionError("no MEI server with --mei none")

    monkeypatch.setattr(driver, "mei_command", no_mei)
    argv = []
    monkeypatch.setattr(driver, "start_tools", lambda a, **kw: (argv.append(a) or subprocess.Popen(
        [sys.executable, "-c", TOOLS], **kw), "http://127.0.0.1:9"))
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--estimators", "grpo", "--steps", "2"]
    one[one.index("--mei") + 1] = "none"
    assert driver.main([*one, "--", "trainer.test_freq=1"]) == 0
    seen = json.loads((tmp_path / "out" / "grpo" / "seed1" / "seen.json").read_text())
    assert seen["args"]["trainer.v1.neos.mei.enable"] == "false" and seen["args"]["trainer.test_freq"] == "1"
    assert "NEOS_MEI_SERVER_URL" not in seen["env"] and "--mei-endpoint" not in argv[0]
    capsys.readouterr()
    assert driver.main([*one, "--steps", "3", "--dry-run"]) == 0
    assert "  mei: none (the extractive interface)" in capsys.readouterr().out


def test_a_run_cut_short_is_not_done_and_its_next_attempt_logs_apart(inputs, tmp_path, monkeypatch):
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--estimators", "grpo", "--steps", "4"]
    monkeypatch.setenv("STAND_IN_STOP", "3")
    assert driver.main(one) == 1
    run = tmp_path / "out" / "grpo" / "seed1"
    assert not (run / "done.json").exists() and driver.newest_step(run / "metrics-1.jsonl")[0] == 3
    monkeypatch.delenv("STAND_IN_STOP")
    assert driver.main(one) == 0
    assert json.loads((run / "done.json").read_text())["attempt"] == 2
    assert driver.newest_step(run / "metrics-1.jsonl")[0] == 3  # the first attempt's lines are kept
    assert json.loads((run / "seen.json").read_text())["env"]["VERL_FILE_LOGGER_PATH"] == str(run / "metrics-2.jsonl")


def test_dry_run_prints_the_real_commands(tmp_path, inputs, capsys, monkeypatch):
    monkeypatch.undo()  # the real command builders
    assert driver.main([*inputs, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    main_ppo = [line for line in printed.splitlines() if "main_ppo:" in line]
    assert len(main_ppo) == 4 and all("+recipe=neos_curve" in line for line in main_ppo)
    assert "+ray_kwargs.ray_init.address=local" in main_ppo[0]  # a Ray instance per run
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.08" in main_ppo[0]
    assert printed.count("verl_ext.mei.vllm_server") == 4 and "--gpu-memory-utilization 0.05" in printed
    # fixed KV caches (2 and 1 GiB): no engine's start-up memory profile, which another run's trainer can break
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=2147483648" in main_ppo[0]
    assert printed.count("--kv-cache-memory-bytes 1073741824") == 4
    assert printed.count("python -m tool_server --world") == 4 and "--mei-log" in printed
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("flags, message", [
    (["--parallel", "8"], "leaves the trainers under 10% of the GPU"),
    (["--seeds", "-1"], "argument --seeds"),
])
def test_bad_values_are_one_line_naming_the_flag(inputs, flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        driver.main([*inputs, *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err


def test_a_missing_input_names_its_flag(inputs, tmp_path, capsys):
    (tmp_path / "data" / "benchmark.parquet").unlink()
    with pytest.raises(SystemExit):
        driver.main(inputs)
    assert "--data:" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_running_run_prints_each_new_step_with_its_reward_and_held_out_success(inputs, capsys, monkeypatch):
    monkeypatch.setattr(driver, "PROGRESS_EVERY_S", 0.05)
    one = [*inputs[:inputs.index("--seeds")], "--seeds", "1", "--estimators", "grpo", "--steps", "3"]
    assert driver.main(one) == 0
    printed = capsys.readouterr().out
    assert "grpo/seed1 (attempt 1): engine up after" in printed
    assert ("grpo/seed1: step 1 of 3, reward 0.100, call_ok 0.500, mixed 0.250, step_s 7.100, gen_s 5.000, "
            "update_s 2.000, val-core/neos_synth/acc/mean@2 0.050" in printed)
    assert "grpo/seed1: step 2 of 3, reward 0.200, call_ok 0.500, mixed 0.500, step_s 3.300, gen_s 1.200, " \
        "update_s 2.000\n" in printed  # not validated at 2
    assert "grpo/seed1: step 3 of 3, reward 0.300" in printed  # every step, though all came between two polls


def test_newest_step_skips_a_line_still_being_written(tmp_path):
    metrics = tmp_path / "metrics-1.jsonl"
    assert driver.newest_step(metrics) == (0, {})
    metrics.write_text('{"step": 1, "data": {"x": 1}}\n{"step": 2, "da')
    assert driver.newest_step(metrics) == (1, {"x": 1})


def test_device_script_copies_data_splits_a_directory_back_and_prints_its_usage(tmp_path):
    """``bench/curve_device.sh``'s steps that need no GPU: ``data``, ``peek`` with nothing started, ``back``."""
    script = driver.REPO / "bench" / "curve_device.sh"
    data = tmp_path / "carried"
    (data / "world").mkdir(parents=True)
    (data / "rl.parquet").write_bytes(b"x" * 10)
    (data / "world" / "manifest.json").write_text("{}")
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "HOME": str(tmp_path),
           "CURVE_DATA": str(tmp_path / "data"), "BACK": str(tmp_path / "back"), "PART_SIZE": "6M"}

    def run(*args):
        return subprocess.run(["bash", str(script), *args], cwd=driver.REPO, env=env, capture_output=True, text=True)

    usage = run()
    assert usage.returncode == 2 and "curve_device.sh warm [STEPS]" in usage.stdout
    assert run("data", str(data)).returncode == 0
    assert (tmp_path / "data" / "world" / "manifest.json").read_text() == "{}"
    assert (tmp_path / "data" / "rl.parquet").read_bytes() == b"x" * 10
    peek = run("peek")  # nothing started yet: nothing to show, no error; the host's memory (runs share it)
    assert peek.returncode == 0 and re.search(r"^host memory: \d+ of \d+ GiB used$", peek.stdout, re.M), peek.stdout
    lost = run("spy", "no-such-process-xyz")  # the script's own command line holds the pattern: not a match
    assert lost.returncode == 1 and "no process matches no-such-process-xyz" in lost.stdout
    blob = tmp_path / "ckpt" / "huggingface"
    blob.mkdir(parents=True)
    (blob / "model.safetensors").write_bytes(bytes(range(256)) * 100_000)  # 25.6 MB: five 6-MiB parts
    first = run("back", str(blob), "policy")  # four parts a call, the rest on the next
    assert first.returncode == 0 and "4 of 5 parts sent" in first.stdout
    assert len(list((tmp_path / "out").glob("policy.tar.*"))) == 4
    assert "5 of 5 parts sent" in run("back", str(blob), "policy").stdout
    parts = sorted((tmp_path / "out").glob("policy.tar.*"))
    assert [p.name for p in parts] == [f"policy.tar.a{c}" for c in "abcde"]
    joined = tmp_path / "joined"
    joined.mkdir()
    subprocess.run(f"cat {' '.join(map(str, parts))} | tar xf - -C {joined}", shell=True, check=True)
    assert (joined / "huggingface" / "model.safetensors").read_bytes() == (blob / "model.safetensors").read_bytes()
