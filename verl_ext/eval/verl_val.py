"""A verl checkpoint evaluated through verl's own validation loop (``python -m verl_ext.eval verl``).

verl 0.9.1's v1 trainer validates once and returns with ``trainer.val_only=True`` (inside ``val_before_train``):
``_validate`` sends every row of ``data.val_files`` to the agent loop manager with the validation sampling
(``actor_rollout_ref.rollout.val_kwargs``: ``n`` sessions per row, ``temperature``, ``top_p``, ``top_k``), scores each
session with the recipe's reward manager, and with ``trainer.validation_data_dir`` writes ``{global_steps}.jsonl``, one
line per session: ``input``, ``output``, ``gts``, ``score``, the session's ``reward_extra_info`` fields and ``uid``
(``{row uid}_{session}_{output index}``). So this path runs the recipe's own agent loops, tool client, turn limits and
model code, on the checkpoint, with the paper's evaluation sampling; it:

1. writes the benchmark items as verl RL rows, the layout ``python -m data_gen`` exports (the question after one
   ``<image>`` line per image as the user turn, images as ``{"bytes", "path"}`` cells, ``reward_model.ground_truth``
   as ``{"target", "aliases"}``, the protocol's ``agent_name``) plus ``extra_info.neos_eval_key`` (``benchmark/item``);
2. composes ``main_ppo +recipe=NAME`` with the validation keys (:func:`validation_overrides`) and runs it;
3. converts the dump into ``results.jsonl`` records: the reward managers' ``dump_trajectories`` put each session's
   ``TrajectoryRecord`` and eval key into its ``reward_extra_info``; the final answer is judged by the harness's judge
   (cached, pinned, optionally twice), so statistics, report and viewer are those of an endpoint run.

Resumable as the endpoint path: each launch is an ``attempt-N`` directory (``val.parquet``, ``dump/``,
``main_ppo.log``); its dump is converted once (``converted.json``); only items with a missing run go into the next
attempt. A session the dump lacks (its row filtered as overlong, or its agent loop failed) is an ``error``
record, counted and redone by the next invocation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd

from neos_core.results import ResultLog
from verl_ext.eval.benchmarks import AGENT_PROTOCOLS, EvalItem, json_lines
from verl_ext.eval.episode import image_bytes, save_image
from verl_ext.eval.judging import CachedJudge, judge_pin
from verl_ext.eval.run import ERROR_RATE_WARNING, EvalRecord, check_pin, judged_record, load_items, result_key, \
    sampling_for
from verl_ext.eval.specs import BenchmarkSpec
from verl_ext.reward.judge import JudgeConfig
from verl_ext.rollout.prompts import user_prompt
from verl_ext.rollout.protocols import Protocol
from verl_ext.rollout.record import EVAL_KEY, TRAJECTORY_JSON, TrajectoryRecord

logger = logging.getLogger(__name__)
PROTOCOL_AGENTS = {protocol: agent for agent, protocol in AGENT_PROTOCOLS.items()}
VAL_KWARGS = ("temperature", "top_p", "top_k")  # the sampling keys verl's validation passes to the rollout
_GLOBAL_STEP = re.compile(r"global_step_\d+")


@dataclass
class VerlValConfig:
    out: Path
    benches: list[BenchmarkSpec]
    recipe: str
    checkpoint: Path  # an HF model directory, or a verl checkpoint (global_step_N, or its actor/)
    tool_url: str
    base_model: Path | None = None  # the HF model a sharded verl checkpoint's run started from
    runs: int = 5
    limit: int | None = None
    max_turns: int | None = None  # None: the recipe's
    sampling_override: dict[str, Any] = field(default_factory=dict)  # temperature / top_p over the paper's
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    judge_passes: int = 1
    overrides: list[str] = field(default_factory=list)  # the user's, last (device keys: GPUs, rollout engine)


def _has_weights(directory: Path) -> bool:
    return any(directory.glob("*.safetensors")) or any(directory.glob("*.bin"))


def checkpoint_overrides(checkpoint: Path, base_model: Path | None) -> list[str]:
    """The model keys for ``checkpoint``: an HF directory is the model; a verl checkpoint is loaded by verl's own
    resume (``trainer.resume_mode=resume_path``) into the model it was trained from (``base_model``, else the
    checkpoint's ``actor/huggingface`` when it holds weights), model weights only."""
    checkpoint = checkpoint.resolve()
    if (checkpoint / "config.json").is_file():
        if not _has_weights(checkpoint):
            raise ValueError(f"--checkpoint {checkpoint}: an HF config without weights (*.safetensors); merge a verl "
                             "checkpoint with `python -m verl.model_merger merge`, or pass the global_step_N directory")
        return [f"actor_rollout_ref.model.path={checkpoint}", "trainer.resume_mode=disable"]
    step = checkpoint.parent if checkpoint.name == "actor" else checkpoint
    if not (_GLOBAL_STEP.fullmatch(step.name) and (step / "actor").is_dir()):
        raise ValueError(f"--checkpoint {checkpoint}: neither an HF model directory (config.json and weights) nor a "
                         "verl checkpoint (global_step_N holding actor/)")
    hf = step / "actor" / "huggingface"
    model = base_model.resolve() if base_model else hf if _has_weights(hf) else None
    if model is None:
        raise ValueError(f"--checkpoint {checkpoint}: a sharded verl checkpoint whose actor/huggingface holds no "
                         "weights: pass --base-model, the HF model the run started from")
    return [f"actor_rollout_ref.model.path={model}", "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={step}", "actor_rollout_ref.actor.checkpoint.load_contents=[model]"]


def _value(value: Any) -> str:
    return "null" if value is None else json.dumps(value) if isinstance(value, str) else str(value)


def val_sampling(protocol: Protocol, override: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what verl's ``val_kwargs`` applies, what it cannot): the protocol's paper sampling with the overrides;
    verl's validation sends temperature, top-p and top-k (``-1``: off) and repetition penalty 1.0, nothing else."""
    wanted = sampling_for(protocol, override)
    applied = {"top_k": -1, **{k: v for k, v in wanted.items() if k in VAL_KWARGS}}
    dropped = {k: v for k, v in wanted.items() if k not in VAL_KWARGS and not (k == "repetition_penalty" and v == 1.0)}
    return applied, dropped


def compose_recipe(recipe: str, overrides: list[str]):
    """The recipe as ``main_ppo`` composes it (verl's config module, our recipes' search path), in this process."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return compose(config_name="ppo_trainer", overrides=[f"+recipe={recipe}", *overrides])
    except (HydraException, OmegaConfBaseException) as exc:
        raise ValueError(f"--recipe {recipe} with overrides {overrides}: {str(exc).splitlines()[0]}") from None


@dataclass(frozen=True)
class RecipeFacts:
    protocol: Protocol
    max_turns: int
    neos_trainer: bool  # trainer.v1.trainer_mode=neos: MEI co-evolution to switch off


def recipe_facts(recipe: str, overrides: list[str]) -> RecipeFacts:
    config = compose_recipe(recipe, overrides)
    rollout = config.actor_rollout_ref.rollout
    agent = rollout.agent.default_agent_loop
    if agent not in AGENT_PROTOCOLS:
        raise ValueError(f"--recipe {recipe}: its agent loop {agent!r} is none of ours ({sorted(AGENT_PROTOCOLS)})")
    return RecipeFacts(AGENT_PROTOCOLS[agent], int(rollout.multi_turn.max_assistant_turns),
                       config.trainer.v1.get("trainer_mode") == "neos")


def validation_overrides(config: VerlValConfig, facts: RecipeFacts, val_file: Path, dump_dir: Path) -> list[str]:
    """``main_ppo`` keys for one validation pass over ``val_file``, before the user's own overrides."""
    applied, _ = val_sampling(facts.protocol, config.sampling_override)
    judge = config.judge
    keys = [
        *checkpoint_overrides(config.checkpoint, config.base_model),
        f"data.val_files={val_file}",
        f"data.train_files={val_file}",  # verl builds a train dataloader even for val_only; it is never iterated
        "trainer.val_before_train=true",
        "trainer.val_only=true",  # fit(): validate once, dump, return (no training step, no checkpoint)
        f"trainer.validation_data_dir={dump_dir}",
        "trainer.log_val_generations=0",
        "trainer.logger=[console]",
        "trainer.total_training_steps=1",
        f"actor_rollout_ref.rollout.val_kwargs.n={config.runs}",
        *(f"actor_rollout_ref.rollout.val_kwargs.{k}={_value(v)}" for k, v in applied.items()),
        f"actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url={config.tool_url}",
        f"reward.reward_kwargs.judge.url={_value(judge.url)}",
        f"reward.reward_kwargs.judge.model={_value(judge.model if judge.url else None)}",
        "+reward.reward_kwargs.dump_trajectories=true",
        f"hydra.run.dir={dump_dir.parent / 'hydra'}",
    ]
    if config.max_turns is not None:
        keys.append(f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={config.max_turns}")
    if facts.neos_trainer:
        keys.append("trainer.v1.neos.mei.enable=false")  # no co-evolution in an evaluation (and no MEI admin calls)
    return keys


def eval_key(item: EvalItem) -> str:
    return f"{item.benchmark}/{item.item_id}"


def run_pin(config: VerlValConfig, facts: RecipeFacts) -> dict[str, Any]:
    """``run.json`` of a verl run: the keys of an endpoint run's pin (the report reads them), the checkpoint as the
    policy, what verl's validation applies of the paper's sampling and what it cannot."""
    applied, dropped = val_sampling(facts.protocol, config.sampling_override)
    return {
        "policy": {"model": str(config.checkpoint.resolve()), "base_model": str(config.base_model or ""),
                   "recipe": config.recipe, "max_turns": config.max_turns or facts.max_turns,
                   "overrides": config.overrides},
        "sampling": {facts.protocol: applied},
        "sampling_not_applied": dropped,
        "judge": judge_pin(config.judge),
        "endpoints": {"policy": f"verl validation (main_ppo +recipe={config.recipe})", "judge": config.judge.url,
                      "tool_server": config.tool_url},
        "judge_passes": config.judge_passes, "runs": config.runs,
        "benchmarks": {spec.name: spec.pin() for spec in config.benches},  # each loader and the layouts it found
    }


async def write_val_rows(items: list[EvalItem], protocol: Protocol, path: Path) -> None:
    """The items as verl RL rows (see the module docstring), written atomically."""
    rows = []
    async with aiohttp.ClientSession() as http:  # question images given as URLs are fetched once, here
        for index, item in enumerate(items):
            images = [{"bytes": await image_bytes(ref, http), "path": ref.path or ""} for ref in item.images]
            rows.append({
                "data_source": item.benchmark, "prompt": user_prompt(item.question, len(images)), "images": images,
                "reward_model": {"style": "rule", "ground_truth": item.ground_truth},
                "agent_name": PROTOCOL_AGENTS[item.protocol or protocol],
                "extra_info": {EVAL_KEY: eval_key(item), "question": item.question, "index": index},
            })
    tmp = path.with_suffix(".tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    tmp.replace(path)


def main_ppo_command(config: VerlValConfig, facts: RecipeFacts, attempt: Path) -> list[str]:
    keys = validation_overrides(config, facts, attempt / "val.parquet", attempt / "dump")
    return [sys.executable, "-m", "verl.trainer.main_ppo", f"+recipe={config.recipe}", *keys, *config.overrides]


def launch(command: list[str], log_path: Path) -> int:
    """Runs ``main_ppo`` (its own process group: Ctrl-C or an error here stops it and the Ray processes it started)
    with its output in ``log_path``; returns its exit code."""
    with log_path.open("w") as log:
        log.write(shlex.join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            raise


def dump_sessions(dump_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """``(eval key, run) -> dump line`` of the final output of every session in verl's validation dump."""
    latest: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
    for path in sorted(dump_dir.glob("*.jsonl")):
        for number, row in json_lines(path):
            for name in (EVAL_KEY, TRAJECTORY_JSON, "uid"):
                if name not in row:
                    raise ValueError(f"{path}:{number}: field {name!r}: missing (the recipe's reward manager must be "
                                     "neos_answer_judge or modalsearch_reward with reward_kwargs.dump_trajectories)")
            parts = str(row["uid"]).rsplit("_", 2)
            if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
                raise ValueError(f"{path}:{number}: field 'uid': {row['uid']!r} is not verl's "
                                 "{uid}_{session}_{index}")
            key, index = (str(row[EVAL_KEY]), int(parts[1])), int(parts[2])
            if key not in latest or index >= latest[key][0]:
                latest[key] = (index, row)
    return {key: row for key, (_, row) in latest.items()}


def _turn_stats(record: TrajectoryRecord) -> list[dict[str, Any]]:
    """Generated tokens per turn from the record's spans; verl's dump has no prompt sizes or reply times."""
    return [{"prompt_tokens": None, "completion_tokens": t.span[1] - t.span[0], "latency_s": None}
            for t in record.turns]


async def convert_attempt(attempt: Path, items: dict[str, EvalItem], config: VerlValConfig,
                          protocol: Protocol) -> Counter[str]:
    """Appends the records of one finished attempt that ``results.jsonl`` lacks; marks the attempt converted."""
    sessions = dump_sessions(attempt / "dump")
    rows = pd.read_parquet(attempt / "val.parquet", columns=["images", "extra_info"]).to_dict("records")
    images_dir = config.out / "images"
    images_dir.mkdir(exist_ok=True)
    log = ResultLog(config.out / "results.jsonl", EvalRecord)
    judge = CachedJudge(config.judge, config.out / "judge_cache.jsonl")
    counts: Counter[str] = Counter()
    semaphore = asyncio.Semaphore(16)  # judge requests in flight

    async def one(item: EvalItem, run: int, images: list[bytes]) -> None:
        base = {"key": result_key(item, run), "benchmark": item.benchmark, "item_id": item.item_id, "run": run,
                "protocol": item.protocol or protocol, "question": item.question, "ground_truth": item.ground_truth}
        row = sessions.get((eval_key(item), run))
        if row is None or not row[TRAJECTORY_JSON]:
            why = f"its row filtered as overlong, or its agent loop failed: {attempt}/main_ppo.log"
            record = EvalRecord(**base, status="error",
                                error=f"NoSession: verl's validation dump has no trajectory of this run ({why})")
        else:
            trajectory = TrajectoryRecord.model_validate_json(row[TRAJECTORY_JSON])
            questions = [e.ref for e in trajectory.images if e.source == "question"]
            files = {ref: await asyncio.to_thread(save_image, images_dir, data) for ref, data in zip(questions, images)}
            async with semaphore:
                record = await judged_record(base, judge, config.judge_passes, trajectory,
                                             trajectory.final_answer or "", files, _turn_stats(trajectory), 0.0)
        log.append(record)
        counts[record.status] += 1

    try:
        jobs = []
        for row in rows:
            item = items.get(row["extra_info"][EVAL_KEY])
            if item is None:  # the benchmark file changed since this attempt: its item is no longer asked for
                continue
            images = [bytes(cell["bytes"]) for cell in (row["images"] if row["images"] is not None else [])]
            jobs += [one(item, run, images) for run in range(config.runs) if result_key(item, run) not in log.done]
        await asyncio.gather(*jobs)
    finally:
        judge.close()
        log.close()
    (attempt / "converted.json").write_text(json.dumps(dict(counts)))
    return counts


def _attempts(root: Path) -> list[Path]:
    return sorted((p for p in root.glob("attempt-*") if p.name.split("-")[1].isdigit()),
                  key=lambda p: int(p.name.split("-")[1]))


class LaunchFailed(RuntimeError):
    """``main_ppo`` exited non-zero: nothing of that attempt is recorded."""


def _missing(config: VerlValConfig, items: list[EvalItem]) -> list[EvalItem]:
    """Items with a run that ``results.jsonl`` has no result for (an error is redone)."""
    log = ResultLog(config.out / "results.jsonl", EvalRecord)
    log.close()
    return [item for item in items if any(result_key(item, r) not in log.done for r in range(config.runs))]


def evaluate_verl(config: VerlValConfig, *, dry_run: bool = False) -> dict[str, Any]:
    """Converts finished attempts, launches ``main_ppo`` for what is still missing and converts its dump; returns
    this invocation's counts. ``dry_run``: prepares the attempt and returns its command instead of running it (run it
    yourself, e.g. on a cluster's head node, then invoke again to convert)."""
    checkpoint_overrides(config.checkpoint, config.base_model)  # a bad checkpoint fails before anything is written
    items = load_items(config.benches, config.limit)
    facts = recipe_facts(config.recipe, config.overrides)
    foreign = sorted({eval_key(i) for i in items if (i.protocol or facts.protocol) != facts.protocol})
    if foreign:
        raise ValueError(f"--recipe {config.recipe} runs the {facts.protocol} protocol (one sampling per validation "
                         f"pass); {len(foreign)} items are of the other one, e.g. {foreign[0]}: evaluate them with "
                         "the other paper's recipe")
    config.out.mkdir(parents=True, exist_ok=True)
    check_pin(config.out, run_pin(config, facts))
    root, by_key = config.out / "verl", {eval_key(item): item for item in items}
    counts: Counter[str] = Counter()

    def convert(attempt: Path) -> None:
        counts.update(asyncio.run(convert_attempt(attempt, by_key, config, facts.protocol)))

    attempts = _attempts(root)
    for attempt in attempts:
        if (attempt / "dump").is_dir() and not (attempt / "converted.json").exists():
            convert(attempt)
    result: dict[str, Any] = {}
    missing = _missing(config, items)
    if missing:
        attempt = root / f"attempt-{int(attempts[-1].name.split('-')[1]) + 1 if attempts else 1}"
        attempt.mkdir(parents=True)
        asyncio.run(write_val_rows(missing, facts.protocol, attempt / "val.parquet"))
        command = main_ppo_command(config, facts, attempt)
        if dry_run:
            result["command"] = shlex.join(command)
        else:
            print(f"main_ppo validation of {len(missing)} items x {config.runs} runs; its log: "
                  f"{attempt / 'main_ppo.log'}", file=sys.stderr)
            code = launch(command, attempt / "main_ppo.log")
            if code != 0:
                raise LaunchFailed(f"main_ppo exited with {code}; see {attempt / 'main_ppo.log'} (nothing of this "
                                   "attempt is recorded; rerun to try again)")
            convert(attempt)
    done = sum(counts.values())
    if done and counts["error"] / done > ERROR_RATE_WARNING:
        logger.warning("%d of %d runs have no trajectory in verl's dump (see the error field in %s); rerun to redo "
                       "them", counts["error"], done, config.out / "results.jsonl")
    return {"episodes_total": len(items) * config.runs, "ran_now": done, "ok": counts["ok"],
            "errors": counts["error"], **result}
