"""Learning curves on one GPU: ``+recipe=neos_curve`` for each estimator x seed from one warm-start checkpoint
(docs/training.md, "Learning curve").

Each run gets its own MEI server (``python -m verl_ext.mei.vllm_server`` on the warm-started MEI, reloaded in place
by the run's MEI updates), its own tool server (``python -m tool_server --mei-endpoint``, its MEI log in the run's
directory), its own Ray instance and its own share of the GPU, then ``python -m verl.trainer.main_ppo
+recipe=neos_curve algorithm.adv_estimator=E trainer.seed=S``. ``--parallel`` runs share the GPU at once. With
``--mei none`` there is no MEI server: the tool server answers with the extractive interface and co-evolution is off.

Runs start in waves of ``--parallel``, the next when the whole wave has ended. Every engine gets a fixed KV cache
(``--policy-kv-gib``, ``--mei-kv-gib``: vLLM's ``kv_cache_memory_bytes``) instead of sizing one from the free memory
it measures while it starts: that measurement fails when another process frees memory meanwhile (2026-12-07: a
run's engine died with vLLM's "Error in memory profiling" as the wave's first run trained beside it; earlier two
replicas started together and one computed a KV cache of -16.5 GiB). Within a wave the runs still start one at a
time (a run's MEI server and ``main_ppo`` side by side, until the MEI answers and verl reports the rollout engine
started), which keeps the start-up peaks apart; ``--start-gap-s`` starts the next one a fixed time after instead
(untried on the GPU: a wave of four seeds' runs otherwise waits ~4 engine start-ups before its last begins).

``OUT/<estimator>/seed<S>/`` holds a run's metrics (verl's file logger, ``metrics-<attempt>.jsonl``: verl truncates
its file on open, so each attempt writes its own), logs (``main_ppo-<attempt>.log``, ``tools.log``, ``mei.log``) and
``done.json`` once main_ppo exited 0 having logged the last step. A second invocation skips finished runs and
restarts the others, which resume from their last checkpoint under ``--checkpoints`` (verl's ``resume_mode: auto``);
one with a larger ``--steps`` extends the finished runs the same way.
Then ``python -m verl_ext.eval training OUT/*/seed* --out OUT/plots`` overlays them, grouped by estimator.

Why a Python driver rather than a shell loop: ports, per-run services and their teardown (a run's process group
killed at its time limit, with the Ray processes it started), resumability and input checks are one-line errors
before anything starts, and ``--dry-run`` prints every command without a GPU (tests/bench/).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from neos_core.polling import poll_delays
from neos_core.ports import free_local_port
from neos_core.usage import OneLineParser, positive_float, positive_int, share, whole_number
from tool_server.launch import start as start_tools
from tool_server.mei.jsonl import write_atomic

REPO = Path(__file__).resolve().parents[1]
ESTIMATORS = ("neos_turn_credit", "grpo")
RECIPE = "neos_curve"
STEPS = 20  # the recipe's trainer.total_training_steps
MEI_MAX_NEW_TOKENS = 768  # the smoke's: an MEI answer of the small world fits with room
# What a checkout needs to run verl with our plugin; JAX kept off the GPU (the GPU image's JAX takes ~75% of it if
# anything initialises it).
SERVICE_ENV = {"VERL_USE_EXTERNAL_MODULES": "verl_ext.plugin", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               "JAX_PLATFORMS": "cpu"}


@dataclass(frozen=True)
class Settings:
    data: Path
    policy: Path
    mei: Path | None  # None: no MEI (the extractive interface answers, co-evolution off)
    world: Path
    out: Path
    checkpoints: Path
    steps: int
    policy_gpu_share: float
    mei_gpu_share: float
    timeout_s: float
    policy_kv_gib: float = 2.0
    mei_kv_gib: float = 1.0
    start_gap_s: float | None = None  # None: the next run of a wave starts once this one's engine is up
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    estimator: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.estimator}/seed{self.seed}"

    def directory(self, settings: Settings) -> Path:
        return settings.out / self.estimator / f"seed{self.seed}"


def plan(estimators: list[str], seeds: list[int]) -> list[Run]:
    """Seeds outermost: with ``--parallel`` = number of estimators, each wave compares the estimators at one seed."""
    return [Run(e, s) for s in seeds for e in estimators]


def finished(run: Run, settings: Settings) -> bool:
    """Done with at least ``settings.steps`` updates: a larger ``--steps`` extends a finished run from its last
    checkpoint (verl resumes it), the warm start untouched."""
    done = run.directory(settings) / "done.json"
    return done.is_file() and json.loads(done.read_text())["steps"] >= settings.steps


def attempt(run: Run, settings: Settings) -> int:
    """1 + the attempts already logged in the run's directory."""
    return 1 + len(list(run.directory(settings).glob("main_ppo-*.log")))


def gib(size: float) -> int:
    return int(size * 2**30)


def main_ppo_command(run: Run, settings: Settings) -> list[str]:
    """The run's ``main_ppo`` command: the recipe, the estimator and seed, the run's GPU share, checkpoint directory
    and Ray instance of its own (``address=local``: a second run on the machine would otherwise join the first's)."""
    return [sys.executable, "-m", "verl.trainer.main_ppo", f"+recipe={RECIPE}",
            f"algorithm.adv_estimator={run.estimator}", f"trainer.seed={run.seed}",
            f"trainer.total_training_steps={settings.steps}",
            f"trainer.default_local_dir={settings.checkpoints / run.estimator / f'seed{run.seed}'}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={settings.policy_gpu_share}",
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={gib(settings.policy_kv_gib)}",
            "+ray_kwargs.ray_init.address=local", "+ray_kwargs.ray_init.include_dashboard=false",
            *(["trainer.v1.neos.mei.enable=false"] if settings.mei is None else []), *settings.overrides]


def mei_command(settings: Settings, port: int) -> list[str]:
    """The run's MEI server: vLLM on its share of the GPU (the smoke's engine flags), the warm start as v0; at most 64
    requests at once (a run's 32 trajectories make one MEI call at a time each), which also bounds the sampler's
    memory vLLM reserves at start (its default on an H100 is 1,024 sequences of 151,669 logits)."""
    from verl_ext.mei.serving import ServeSettings, server_command

    serve = ServeSettings(engine="vllm", max_new_tokens=MEI_MAX_NEW_TOKENS,
                          args=["--gpu-memory-utilization", str(settings.mei_gpu_share),
                                "--kv-cache-memory-bytes", str(gib(settings.mei_kv_gib)), "--max-model-len", "16384",
                                "--max-num-seqs", "64", "--enforce-eager", "--generation-config", "vllm"])
    return server_command(serve, str(settings.mei), "v0", port)


def tool_server_argv(run: Run, settings: Settings, mei_port: int) -> list[str]:
    """``python -m tool_server`` for the run: a free port, its MEI at the run's MEI server (none with ``--mei none``:
    the extractive interface answers), its MEI log in the run's directory (what the trainer's co-evolution reads)."""
    endpoint = [] if settings.mei is None else ["--mei-endpoint", f"http://127.0.0.1:{mei_port}/v1"]
    return ["--world", str(settings.world), "--port", "0", *endpoint,
            "--mei-log", str(run.directory(settings) / "mei" / "mei.jsonl"), "--no-ocr"]


def service_env() -> dict[str, str]:
    """Every process of a run: this checkout importable wherever the driver was started from, ``SERVICE_ENV``."""
    return {**os.environ, **SERVICE_ENV,
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)}


def run_env(run: Run, settings: Settings, mei_port: int, tool_url: str, number: int) -> dict[str, str]:
    """What the recipe and the neos trainer read from the environment, for this run and attempt."""
    directory = run.directory(settings)
    return {
        **service_env(),
        "NEOS_CURVE_DATA": str(settings.data), "NEOS_CURVE_POLICY": str(settings.policy),
        "NEOS_MEI_LOG": str(directory / "mei" / "mei.jsonl"), "NEOS_TOOL_SERVER_URL": tool_url,
        "VERL_FILE_LOGGER_PATH": str(directory / f"metrics-{number}.jsonl"),
        **({} if settings.mei is None else {"NEOS_MEI_MODEL": str(settings.mei),
                                             "NEOS_MEI_SERVER_URL": f"http://127.0.0.1:{mei_port}"}),
    }


def _stop(proc: subprocess.Popen) -> None:
    """The process, and its group where it leads one (the MEI server's engine, main_ppo's Ray processes); the tool
    server stops its own workers on SIGTERM."""
    if proc.poll() is not None:
        return
    group = os.getpgid(proc.pid) == proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            continue


ENGINE_STARTED = "LLMServerManager: "  # verl prints it once a run's rollout engines have started (llm_server.py)
START_GATE = threading.Lock()  # one run of a wave starting its vLLM engines at a time


def wait_engine_started(log_path: Path, trainer: subprocess.Popen, timeout_s: float) -> None:
    """Until the trainer's log says its rollout engine started, it exits, or ``timeout_s`` passes."""
    deadline, delays = time.monotonic() + timeout_s, poll_delays()
    while time.monotonic() < deadline and trainer.poll() is None:
        if ENGINE_STARTED in log_path.read_text(errors="replace"):
            return
        time.sleep(next(delays))


# What a progress line shows of a step besides held-out success: the reward, and whether the warm start writes calls
# (the agent loop's turn outcomes) and gives mixed groups, without which neither estimator has a signal.
PROGRESS_FIGURES = (("reward", "critic/score/mean"), ("call_ok", "neos_rollout/turn_outcome_share/call_ok"),
                    ("no_action", "neos_rollout/turn_outcome_share/no_action"), ("mixed", "neos_groups/mixed_share"),
                    ("step_s", "timing_s/step"), ("gen_s", "timing_s/gen"), ("update_s", "timing_s/update_actor"))
PROGRESS_EVERY_S = 30.0  # how often a running run's metrics file is read for newly logged steps


def logged_steps(metrics: Path) -> list[tuple[int, dict]]:
    """Every complete line verl's file logger wrote, in order: (step, data). A line being written is skipped, not an
    error: the trainer is still writing the file."""
    if not metrics.is_file():
        return []
    steps = []
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        steps.append((int(record["step"]), record.get("data", {})))
    return steps


def step_split(metrics: Path) -> dict[str, float]:
    """Median seconds of each phase verl times (``timing_s/<phase>``: gen, old_log_prob, adv, update_actor, ...,
    step) and of an MEI update (``mei/update/seconds``) over the training steps after the first (its engine's first
    batch warms caches), or the first alone; empty before any."""
    steps = [data for step, data in logged_steps(metrics) if step >= 1 and "timing_s/step" in data]
    steps = steps[1:] or steps
    keys = sorted({k for data in steps for k in data if k.startswith("timing_s/") or k == "mei/update/seconds"})
    return {k.removeprefix("timing_s/"): round(statistics.median(d[k] for d in steps if k in d), 2) for k in keys}


def split_lines(results: list[dict]) -> list[str]:
    """A line per run with its step's split, then each estimator's median step time against verl's ``grpo`` (the
    baseline: the same recipe, data, seeds and shape)."""
    lines, steps = [], defaultdict(list)
    for r in results:
        split = dict(r.get("split_s") or {})
        if "step" not in split:
            continue
        steps[r["estimator"]].append(split.pop("step"))
        lines.append(f"{r['run']}: a step {steps[r['estimator']][-1]:.1f} s ("
                     + ", ".join(f"{k} {v:.1f}" for k, v in split.items()) + ")")
    if "grpo" in steps:
        base = statistics.median(steps["grpo"])
        lines += [f"{e} / grpo step time: {statistics.median(t) / base:.2f}x ({statistics.median(t):.1f} s vs "
                  f"{base:.1f} s)" for e, t in steps.items() if e != "grpo"]
    return lines


def newest_step(metrics: Path) -> tuple[int, dict]:
    """The newest complete line's step and data ((0, {}): none yet)."""
    return (logged_steps(metrics) or [(0, {})])[-1]


def follow(run: Run, trainer: subprocess.Popen, metrics: Path, steps: int, deadline: float) -> int | None:
    """Wait for the trainer, printing every newly logged step (``PROGRESS_FIGURES``, held-out success when
    validated; step 0 is the validation before the first update): a run lasts minutes and the driver would otherwise
    say nothing until it ends. Its exit code; None at the deadline."""
    shown = -1
    while True:
        try:
            code = trainer.wait(timeout=max(min(PROGRESS_EVERY_S, deadline - time.monotonic()), 0.01))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None
            code = None
        for step, data in logged_steps(metrics):
            if step <= shown:
                continue
            shown = step
            figures = [f"{label} {data[key]:.3f}" for label, key in PROGRESS_FIGURES if key in data]
            figures += [f"{key} {value:.3f}" for key, value in data.items()  # verl's held-out success, mean@n
                        if key.startswith("val-core/") and "/acc/mean@" in key]
            print(f"{run.name}: step {step} of {steps}" + "".join(f", {f}" for f in figures), flush=True)
        if code is not None:
            return code


def run_one(run: Run, settings: Settings) -> dict:
    """Services up, ``main_ppo`` to its end or ``--timeout-s``, services down; ``done.json`` when it finished."""
    import asyncio

    from verl_ext.mei.vllm_server import wait_healthy

    directory, number = run.directory(settings), attempt(run, settings)
    (directory / "mei").mkdir(parents=True, exist_ok=True)
    start, mei_port = time.monotonic(), free_local_port()
    env = service_env()
    procs: list[subprocess.Popen] = []
    try:
        log_path = directory / f"main_ppo-{number}.log"
        with (open(directory / "mei.log", "a") as mei_log, open(directory / "tools.log", "a") as tools_log,
              open(log_path, "w") as log):
            with START_GATE:  # the next run of the wave starts its engines once this one's have started
                # The MEI server and main_ppo start side by side (each took minutes on 2026-12-07: a run's engine
                # was up 379 s after its MEI server was launched); the first MEI call comes after the trainer's
                # engine is up, and the MEI must be healthy before the gate opens.
                mei = None if settings.mei is None else subprocess.Popen(
                    mei_command(settings, mei_port), env=env, stdout=mei_log, stderr=subprocess.STDOUT,
                    start_new_session=True)
                procs.extend([mei] if mei else [])
                tools, tool_url = start_tools(tool_server_argv(run, settings, mei_port), stderr=tools_log.fileno(),
                                              env=env)
                procs.append(tools)
                trainer = subprocess.Popen(main_ppo_command(run, settings), cwd=directory, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           env=run_env(run, settings, mei_port, tool_url, number))
                procs.append(trainer)
                if mei:
                    asyncio.run(wait_healthy(f"http://127.0.0.1:{mei_port}", mei, timeout_s=600))
                wait_engine_started(log_path, trainer, timeout_s=settings.start_gap_s or settings.timeout_s)
            wait_engine_started(log_path, trainer, timeout_s=max(settings.timeout_s - (time.monotonic() - start), 0))
            print(f"{run.name} (attempt {number}): engine up after {time.monotonic() - start:.0f} s", flush=True)
            code = follow(run, trainer, directory / f"metrics-{number}.jsonl", settings.steps,
                          deadline=start + settings.timeout_s)
    except RuntimeError as err:
        return {"run": run.name, "status": "failed", "why": str(err), "attempt": number}
    finally:
        for proc in reversed(procs):
            _stop(proc)
    step, _ = newest_step(directory / f"metrics-{number}.jsonl")
    result = {"run": run.name, "estimator": run.estimator, "seed": run.seed, "attempt": number, "exit": code,
              "last_step": step, "steps": settings.steps, "wall_s": round(time.monotonic() - start, 1),
              "split_s": step_split(directory / f"metrics-{number}.jsonl")}
    if code == 0 and step >= settings.steps:
        # through a rename: a driver killed mid-write must not leave a done.json the next invocation cannot read
        write_atomic(directory / "done.json", (json.dumps(result, indent=2) + "\n").encode(), durable=True)
        return {**result, "status": "done"}
    why = "timed out" if code is None else f"exit {code}"
    return {**result, "status": "failed", "why": f"{why} at step {step} of {settings.steps}: {log_path}"}


def mei_dir(value: str) -> Path | None:
    """``--mei``: an HF directory, or ``none``."""
    return None if value == "none" else Path(value)


def parser() -> OneLineParser:
    p = OneLineParser(prog="python bench/learning_curve.py", description="Learning curves on one GPU: the neos_curve "
                      "recipe for each estimator and seed from one warm-start policy and MEI, several runs sharing "
                      "the GPU, each with its own MEI server, tool server and log directory; finished runs are "
                      "skipped. Arguments after -- are Hydra overrides for every run.")
    p.add_argument("--data", type=Path, required=True, metavar="DIR",
                   help="export of python -m data_gen neos --max-hops 2 --keep-closed-book (rl.parquet: RL "
                   "questions, benchmark.parquet: the held-out set)")
    p.add_argument("--policy", type=Path, required=True, metavar="DIR",
                   help="the warm-started policy, an HF directory (the SFT checkpoint's huggingface/)")
    p.add_argument("--mei", type=mei_dir, required=True, metavar="DIR",
                   help="the warm-started MEI, an HF directory (python -m verl_ext.mei.warm_start's v0/huggingface), "
                   "or none: no MEI server, the extractive interface answers every call and co-evolution is off "
                   "(trainer.v1.neos.mei.enable=false): the policy's curve alone")
    p.add_argument("--world", type=Path, required=True, metavar="DIR", help="the world the data was generated on")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="runs' metrics and logs, OUT/<estimator>/seed<S>/ (small: bring it back from the GPU machine)")
    p.add_argument("--checkpoints", type=Path, default=Path("/tmp/neos-curve-ckpt"), metavar="DIR",
                   help="runs' checkpoints, resumed from by a restarted run (default: /tmp/neos-curve-ckpt)")
    p.add_argument("--estimators", nargs="+", choices=ESTIMATORS, default=list(ESTIMATORS), metavar="NAME",
                   help=f"algorithm.adv_estimator values (default: {' '.join(ESTIMATORS)})")
    p.add_argument("--seeds", nargs="+", type=whole_number(0), default=[1, 2, 3], metavar="S",
                   help="trainer.seed values (default: 1 2 3)")
    p.add_argument("--steps", type=positive_int, default=STEPS, help=f"policy updates per run (default: {STEPS})")
    p.add_argument("--parallel", type=positive_int, default=3, metavar="N",
                   help="runs sharing the GPU at once, started together as a wave; the next wave starts when the "
                   "whole wave has ended (default: 3, an H100's worth: docs/appendix/learning_curve.md)")
    p.add_argument("--policy-gpu-share", type=share, default=0.08, metavar="F",
                   help="each run's vLLM policy engine, rollout.gpu_memory_utilization (default: 0.08)")
    p.add_argument("--mei-gpu-share", type=share, default=0.05, metavar="F",
                   help="each run's vLLM MEI server, --gpu-memory-utilization (default: 0.05)")
    p.add_argument("--policy-kv-gib", type=positive_float, default=2.0, metavar="GIB",
                   help="each run's policy KV cache, fixed (vLLM's kv_cache_memory_bytes; default: 2, 2M tokens of the "
                   "tiny policy): vLLM then skips the start-up memory profile that fails when another run's trainer "
                   "frees memory meanwhile")
    p.add_argument("--mei-kv-gib", type=positive_float, default=1.0, metavar="GIB",
                   help="each run's MEI KV cache, fixed likewise (default: 1, 64 sequences of 16,384 tokens)")
    p.add_argument("--start-gap-s", type=positive_float, default=None, metavar="SECONDS",
                   help="start the next run of a wave this long after the one before it (its MEI answering first, "
                   "if any) instead of once that run's rollout engine is up, 211-362 s on an H100 (2026-12-07); the "
                   "fixed KV caches keep the engines' start-up from depending on the others' memory (default: once "
                   "the engine is up)")
    p.add_argument("--timeout-s", type=positive_float, default=1200.0, metavar="SECONDS",
                   help="one run's main_ppo limit, after which it is stopped and left to resume (default: 1200)")
    p.add_argument("--dry-run", action="store_true", help="print each run's commands (or that it is done) and exit")
    return p


def _input_error(args: argparse.Namespace) -> str | None:
    required = {"--data": [args.data / "rl.parquet", args.data / "benchmark.parquet"],
                "--policy": [args.policy / "config.json"],
                "--mei": [] if args.mei is None else [args.mei / "config.json"],
                "--world": [args.world / "manifest.json"]}
    for flag, files in required.items():
        missing = [f for f in files if not f.is_file()]
        if missing:
            return f"{flag}: {missing[0]} not found"
    if args.out.exists() and not args.out.is_dir():
        return f"--out: {args.out} is not a directory"
    if args.parallel * (args.policy_gpu_share + (args.mei_gpu_share if args.mei else 0)) > 0.9:
        return (f"--parallel {args.parallel} x (--policy-gpu-share {args.policy_gpu_share} + --mei-gpu-share "
                f"{args.mei_gpu_share}) leaves the trainers under 10% of the GPU")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    p = parser()
    args = p.parse_args(argv[:split])
    problem = _input_error(args)
    if problem:
        p.error(problem)
    settings = Settings(data=args.data.resolve(), policy=args.policy.resolve(), mei=args.mei and args.mei.resolve(),
                        world=args.world.resolve(), out=args.out.resolve(), checkpoints=args.checkpoints.resolve(),
                        steps=args.steps, policy_gpu_share=args.policy_gpu_share, mei_gpu_share=args.mei_gpu_share,
                        timeout_s=args.timeout_s, policy_kv_gib=args.policy_kv_gib, mei_kv_gib=args.mei_kv_gib,
                        start_gap_s=args.start_gap_s, overrides=tuple(argv[split + 1:]))
    runs = plan(args.estimators, args.seeds)
    pending = [r for r in runs if not finished(r, settings)]
    for run in runs:
        if run not in pending:
            print(f"{run.name}: done, skipped ({run.directory(settings)}/done.json)")
    if args.dry_run:
        for run in pending:
            mei = "none (the extractive interface)" if settings.mei is None else shlex.join(mei_command(settings, 0))
            print(f"{run.name} (attempt {attempt(run, settings)}):\n  mei: {mei}\n"
                  f"  tools: python -m tool_server {shlex.join(tool_server_argv(run, settings, 0))}\n"
                  f"  main_ppo: {shlex.join(main_ppo_command(run, settings))}")
        return 0
    results = []
    for first in range(0, len(pending), args.parallel):  # waves; within one, engines start one run at a time
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            for result in pool.map(lambda run: run_one(run, settings), pending[first:first + args.parallel]):
                results.append(result)
                print(json.dumps(result), flush=True)
    for line in split_lines(results):
        print(line)
    print(f"plot: python -m verl_ext.eval training {settings.out}/*/seed* --out {settings.out}/plots")
    return 0 if all(r["status"] == "done" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
