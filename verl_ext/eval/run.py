"""The evaluation run: every (item, run) episode once, judged, appended to ``results.jsonl`` as it finishes.

Resumable: ``results.jsonl`` is the append-only, fsynced log of ``neos_core.results.ResultLog`` keyed by
``benchmark/item/run``; a restart skips what is recorded and redoes the rest, a line cut mid-write is dropped with a
warning naming file and line, a damaged complete line stops the run naming them. Infrastructure failures (the
policy endpoint or the tool server unreachable) are recorded as ``error`` lines, counted, and redone on restart;
they are never scored as wrong answers. ``run.json`` pins the policy, the sampling, the judge, the turn limit and
the protocol of rows that name none; a restart with different ones is refused (one results file, one
configuration).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, Field
from tqdm import tqdm

from neos_core.results import ResultLog
from verl_ext.eval.benchmarks import EvalItem
from verl_ext.eval.episode import Episode, PolicySettings, PolicyUnavailable
from verl_ext.eval.judging import CachedJudge, judge_pin
from verl_ext.eval.specs import BenchmarkSpec
from verl_ext.reward.judge import JudgeConfig
from verl_ext.rollout.protocols import Protocol
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.tools.client import ToolServerError, close_shared_clients

logger = logging.getLogger(__name__)
ERROR_RATE_WARNING = 0.05  # infrastructure errors above this share of episodes are logged as a warning

# Sampling per protocol, from its paper: ModalSearcher's inference configuration (App. C.4, Table 11); Neos states
# none for evaluation, so its rollout sampling (Table 12: temperature 1.0, top-p 1.0, top-k disabled).
PAPER_SAMPLING: dict[str, dict[str, Any]] = {
    "modalsearch": {"temperature": 0.0, "top_p": 0.8, "top_k": 20, "presence_penalty": 1.5,
                    "repetition_penalty": 1.0},
    "neos": {"temperature": 1.0, "top_p": 1.0},
}


class EvalRecord(BaseModel):
    key: str  # benchmark/item/run
    status: Literal["ok", "error"]
    benchmark: str
    item_id: str
    run: int
    protocol: str
    question: str
    ground_truth: dict[str, Any]
    question_images: list[str] = Field(default_factory=list)  # files under images/
    response: str = ""
    correct: bool | None = None
    verdict: dict[str, Any] | None = None
    verdict_pass2: dict[str, Any] | None = None
    trajectory: dict[str, Any] | None = None  # TrajectoryRecord
    turn_stats: list[dict[str, Any]] = Field(default_factory=list)
    image_files: dict[str, str] = Field(default_factory=dict)  # register ref -> file under images/
    error: str = ""
    wall_s: float = 0.0


@dataclass
class RunConfig:
    out: Path
    benches: list[BenchmarkSpec]
    policy: PolicySettings
    tool_url: str
    runs: int = 5
    concurrency: int = 8
    default_protocol: Protocol = "neos"  # items whose row names no protocol ...
    bench_protocols: dict[str, Protocol] = field(default_factory=dict)  # ... unless their benchmark has one here
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    judge_passes: int = 1
    limit: int | None = None  # items per benchmark
    sampling_override: dict[str, Any] = field(default_factory=dict)  # merged into the paper's
    sampling_replace: dict[str, Any] | None = None  # instead of the paper's (an API that refuses top_k, ...)
    progress: bool = True

    def pin(self) -> dict[str, Any]:
        """What decides the results; ``PINNED`` keys must match on a restart (endpoints, runs and judge passes may
        change: a moved server, more runs, a second judge pass)."""
        return {
            "policy": {"model": self.policy.chat.model, "max_tokens_per_turn": self.policy.chat.max_tokens,
                       "max_turns": self.policy.max_turns},
            "sampling": {p: self.sampling(p) for p in PAPER_SAMPLING},
            "judge": judge_pin(self.judge),
            "endpoints": {"policy": self.policy.chat.url, "judge": self.judge.url, "tool_server": self.tool_url},
            "protocols": {"default": self.default_protocol, "by_benchmark": self.bench_protocols},
            "judge_passes": self.judge_passes, "runs": self.runs,
            "benchmarks": {spec.name: spec.pin() for spec in self.benches},  # each loader and the layouts it found
        }

    def protocol(self, item: EvalItem) -> Protocol:
        """The row's protocol (its agent or protocol field), else its benchmark's, else the default."""
        return item.protocol or self.bench_protocols.get(item.benchmark) or self.default_protocol

    def sampling(self, protocol: str) -> dict[str, Any]:
        return sampling_for(protocol, self.sampling_override, self.sampling_replace)


def sampling_for(protocol: str, override: dict[str, Any], replace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The paper's sampling of ``protocol`` (or ``replace``), with ``override`` on top."""
    return {**(PAPER_SAMPLING[protocol] if replace is None else replace), **override}


PINNED = ("policy", "sampling", "judge", "protocols")


def load_items(benches: list[BenchmarkSpec], limit: int | None) -> list[EvalItem]:
    items: list[EvalItem] = []
    for spec in benches:
        loaded = spec.load()
        items += loaded[:limit] if limit else loaded
    return items


def check_pin(out: Path, pin: dict[str, Any]) -> None:
    """Writes ``run.json``, or refuses a restart whose pinned settings differ from the recorded ones."""
    path = out / "run.json"
    pin = json.loads(json.dumps(pin))
    if path.exists():
        recorded = json.loads(path.read_text())
        # a key the recorded pin lacks was added to PINNED after that run: not a change of settings
        changed = [k for k in PINNED if k in recorded and recorded[k] != pin.get(k)]
        if changed:
            raise ValueError(f"{path}: this output directory was run with other settings ({', '.join(changed)}); "
                             "use a new --out or the recorded settings")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pin, indent=2))
    tmp.replace(path)


async def evaluate(config: RunConfig) -> dict[str, Any]:
    """Runs what ``results.jsonl`` is missing; returns counts of this invocation."""
    items = load_items(config.benches, config.limit)  # a malformed row stops the run before anything is written
    config.out.mkdir(parents=True, exist_ok=True)
    images_dir = config.out / "images"
    images_dir.mkdir(exist_ok=True)
    check_pin(config.out, config.pin())
    log = ResultLog(config.out / "results.jsonl", EvalRecord)
    judge = CachedJudge(config.judge, config.out / "judge_cache.jsonl")
    todo = [(item, run) for item in items for run in range(config.runs)
            if result_key(item, run) not in log.done]
    total = len(items) * config.runs
    counts: Counter[str] = Counter()
    semaphore = asyncio.Semaphore(config.concurrency)
    bar = tqdm(total=total, initial=total - len(todo), desc="episodes", unit="ep", disable=not config.progress)
    timeout = aiohttp.ClientTimeout(total=config.policy.chat.timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async def one(item: EvalItem, run: int) -> None:
                async with semaphore:
                    record = await _episode(config, item, run, http, judge, images_dir)
                log.append(record)
                counts[record.status] += 1
                bar.update()
                bar.set_postfix(errors=counts["error"])

            tasks = [asyncio.ensure_future(one(item, run)) for item, run in todo]
            try:
                await asyncio.gather(*tasks)
            except BaseException:  # a bug or Ctrl-C: stop the other episodes before the log closes
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
    finally:
        bar.close()
        judge.close()
        log.close()
        await close_shared_clients()
    done = sum(counts.values())
    if done and counts["error"] / done > ERROR_RATE_WARNING:
        logger.warning("%d of %d episodes failed on infrastructure (see the error field in %s); rerun to redo them",
                       counts["error"], done, config.out / "results.jsonl")
    return {"episodes_total": total, "ran_now": done, "ok": counts["ok"], "errors": counts["error"],
            "skipped_done": total - len(todo)}


def result_key(item: EvalItem, run: int) -> str:
    return f"{item.benchmark}/{item.item_id}/{run}"


async def _episode(config: RunConfig, item: EvalItem, run: int, http: aiohttp.ClientSession, judge: CachedJudge,
                   images_dir: Path) -> EvalRecord:
    protocol = config.protocol(item)
    policy = replace(config.policy, sampling=config.sampling(protocol))
    base = {"key": result_key(item, run), "benchmark": item.benchmark, "item_id": item.item_id, "run": run,
            "protocol": protocol, "question": item.question, "ground_truth": item.ground_truth}
    start = time.perf_counter()
    try:
        result = await Episode(item, protocol, policy, config.tool_url, http, images_dir, run).run_episode()
    except (PolicyUnavailable, ToolServerError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return EvalRecord(**base, status="error", error=f"{type(exc).__name__}: {exc}"[:500],
                          wall_s=time.perf_counter() - start)
    return await judged_record(
        base, judge, config.judge_passes, result.record, result.response, result.image_files,
        [asdict(s) for s in result.turn_stats], time.perf_counter() - start)


async def judged_record(base: dict[str, Any], judge: CachedJudge, judge_passes: int, record: TrajectoryRecord,
                        response: str, image_files: dict[str, str], turn_stats: list[dict[str, Any]],
                        wall_s: float) -> EvalRecord:
    """The ``ok`` record of a finished episode, its final answer judged (``judge_passes`` times): the one way both
    policy paths (an endpoint, verl's validation) turn a trajectory into a result."""
    question, ground_truth = base["question"], base["ground_truth"]
    verdict = await judge.verdict(question, ground_truth, response)
    second = await judge.verdict(question, ground_truth, response, 1) if judge_passes > 1 else None
    question_files = [image_files[e.ref] for e in record.images if e.source == "question" and e.ref in image_files]
    return EvalRecord(
        **base, status="ok", question_images=question_files, response=response, correct=verdict.correct,
        verdict=asdict(verdict), verdict_pass2=asdict(second) if second else None,
        trajectory=record.model_dump(mode="json"), turn_stats=turn_stats, image_files=image_files, wall_s=wall_s)


def read_results(out: Path) -> list[EvalRecord]:
    """The latest record per key of ``out/results.jsonl``."""
    path = out / "results.jsonl"
    if not path.exists():
        raise ValueError(f"{path}: no results (run `python -m verl_ext.eval run --out {out} ...` first)")
    log = ResultLog(path, EvalRecord)
    try:
        return log.outcomes()
    finally:
        log.close()

