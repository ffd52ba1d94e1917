"""Paper-scale rehearsal of one Neos update's rollout on CPU: the parts shared by
``tests/trainer/test_rehearsal_on_cpu.py`` and ``bench/bench_rehearsal.py`` (and the in-process worker helpers other
trainer and rollout tests use: ``InProcessRolloutControl``, ``_ExactMatchScored``).

Real: the composed ``+recipe=neos`` (B = 64, G = 8, window 128, admission limit 1,024, the LLM credit judge);
``NeosTrainer``'s replay buffer (``MixedGroupReplayBuffer`` over verl's ``_next_train_batch`` and
``StatefulDataLoader``); our ``NeosAgentLoopWorker`` (verl's ``AgentLoopWorkerTQ`` underneath) running the registered
``neos_search_agent`` with the tiny Qwen2.5-VL's real tokenizer and processor; a real TransferQueue; the real tool
server on the small world; our ``CreditJudge`` over HTTP; verl's ``_compute_advantage`` with ``neos_turn_credit``;
the MEI schedule (``MEIBuffer``) and call selection.

Stand-ins, where the real thing cannot run here (no GPU, no vLLM, no judge model):
- :class:`StandInGenerateServer` for the vLLM replicas: scripted policy turns, tokenized by the real tokenizer, after a
  latency of ``base_s + per_token_s`` per generated token.
- :class:`StandInCreditJudgeServer` for the judge model: an OpenAI-compatible chat endpoint on loopback.
- The reward: ``_ExactMatchScored`` (exact match on the final answer; verl's reward loop runs as Ray actors built
  from the whole reward config and calls the answer judge).
- :class:`InProcessRolloutControl`: ``RayRolloutControl``'s calls on this event loop instead of through Ray actors.

Faults, each chosen by the question's number ``q`` (every question is "(q<n>) What is the capital of France?", answer
Paris) so every run injects the same ones: the tool server answers one call of some failures with a 503 or stalls past
the call timeout (an aiohttp middleware in front of the real app, keyed on a marker the scripted policy writes into
its query); the judge times out or replies with non-JSON text for some questions' failures; one agent loop raises
(its replica call fails). Questions with ``q % 8 == 7`` are never solved (homogeneous groups: extra samples, then
deferral or cancellation at the boundary); every other question's episodes alternate right and wrong in the order they first reach the replica.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from verl.workers.rollout.replica import TokenOutput

from verl_ext.credit import SCHEMA_VERSION
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.rollout.tq_worker import NeosAgentLoopWorker

QUESTION_RE = re.compile(r"\(q(\d+)\)")
SEARCH = '<tool_call>\n{{"name": "TextSearch", "arguments": {{"query": ["{query}"]}}}}\n</tool_call>'
TOOL_503, TOOL_TIMEOUT = "fault:503", "fault:timeout"  # markers in a query the fault middleware answers
RAISING = (0, 1)  # (question, episode) whose replica call raises: its agent loop raises


def question_text(q: int) -> str:
    return f"(q{q}) What is the capital of France?"


def dataset(n: int, agent: str = "neos_search_agent") -> list[dict[str, Any]]:
    """Dataset rows as verl's ``RLHFDataset`` yields them (collated by verl's ``collate_fn``)."""
    return [
        {
            "raw_prompt": [{"role": "user", "content": question_text(q)}],
            "agent_name": agent,
            "index": q,
            "extra_info": {"index": q},
            "reward_model": {"ground_truth": "Paris"},
        }
        for q in range(n)
    ]


def solves(q: int, episode: int) -> bool:
    return q % 8 != 7 and episode % 2 == 0


def tool_fault(q: int) -> str | None:
    """The tool fault a failure of question ``q`` meets on its second search."""
    return {3: TOOL_503, 6: TOOL_TIMEOUT}.get(q % 10)


def judge_fault(q: int) -> str | None:
    """How the judge answers for the failures of question ``q``: ``invalid`` (text that is no JSON) or ``timeout``."""
    return {1: "invalid", 4: "timeout"}.get(q % 10)


def plan(q: int, episode: int, faults: bool = True) -> list[str]:
    """The policy's turns: a success searches once and answers Paris; a failure searches twice (the second one on the
    wrong entity, carrying the question's tool-fault marker when ``faults``) and answers Lyon."""
    if solves(q, episode):
        return [SEARCH.format(query="capital of France"), "Paris"]
    second = " ".join(filter(None, (tool_fault(q) if faults else None, "Lyon")))
    return [SEARCH.format(query="capital of France"), SEARCH.format(query=second), "Lyon"]


class _ExactMatchScored(NeosAgentLoopWorker):
    """Our v1 worker with verl's reward step replaced by exact match on the final answer (a test device: verl's reward
    loop workers are Ray actors built from the whole reward config); everything else is the real worker."""

    async def _compute_score(self, outputs, kwargs):
        final = outputs[-1]
        if final.reward_score is None:
            final.reward_score = float(
                TrajectoryRecord.model_validate(final.extra_fields[RECORD_KEY]).final_answer == "Paris"
            )


class InjectedReplicaError(RuntimeError):
    pass


class StandInGenerateServer:
    """Stand-in for the rollout replicas (``server_manager.generate``): no model runs. The first call of an episode
    (its ``request_id``) reads the question number from the prompt and takes the next episode index of that question;
    each call returns the episode's next scripted turn, tokenized with the real tokenizer, after ``base_s`` plus
    ``per_token_s`` per token. Log-probs are a constant (nothing here trains). ``faults=False``: the same policy
    without the raising call and the tool-fault markers (a baseline)."""

    def __init__(self, tokenizer, *, base_s: float = 0.0, per_token_s: float = 0.0, faults: bool = True) -> None:
        self.tokenizer, self.faults = tokenizer, faults
        self.base_s, self.per_token_s = base_s, per_token_s
        self.turns: dict[str, list[list[int]]] = {}
        self.episodes: Counter[int] = Counter()
        self.raised = 0
        self.calls = 0
        self.tokens = 0
        self._im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **_: Any) -> TokenOutput:
        if request_id not in self.turns:
            q = int(QUESTION_RE.search(self.tokenizer.decode(prompt_ids)).group(1))
            episode = self.episodes[q]
            self.episodes[q] += 1
            if self.faults and (q, episode) == RAISING:
                self.raised += 1
                raise InjectedReplicaError(f"injected replica failure for q{q}, episode {episode}")
            turns = plan(q, episode, self.faults)
            self.turns[request_id] = [self.tokenizer.encode(t) + [self._im_end] for t in turns]
        ids = self.turns[request_id].pop(0)
        self.calls += 1
        self.tokens += len(ids)
        await asyncio.sleep(self.base_s + self.per_token_s * len(ids))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed",
                           extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0})


@dataclass
class ToolFaults:
    """aiohttp middleware for the real tool server: a tool call whose body carries a fault marker gets a 503 (a
    proxy's text page) or stalls ``stall_s`` (past the agent loop's call timeout) before it is served."""

    stall_s: float
    injected: Counter[str] = field(default_factory=Counter)

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        if request.method == "POST" and request.path.endswith("/call"):
            body = await request.text()  # cached: the handler reads it again
            if TOOL_503 in body:
                self.injected["503"] += 1
                return web.Response(status=503, text="<html>503 Service Unavailable</html>")
            if TOOL_TIMEOUT in body:
                self.injected["timeout"] += 1
                await asyncio.sleep(self.stall_s)
        return await handler(request)


def valid_assessment() -> str:
    """A v2 assessment every scripted failure can carry: t0 (the search) productive, t1 (the wrong entity) causal."""
    event = {"span_id": "t1", "type": "causal_error", "severity": 0.9, "confidence": 0.8,
             "error_category": "wrong_entity", "rationale": "searched Lyon", "reference_support": [1]}
    return json.dumps({
        "schema_version": SCHEMA_VERSION,
        "candidate_overall_summary": "answered Lyon",
        "events": [event],
        "productive_turns": [{"span_id": "t0", "confidence": 0.7, "rationale": "found the capital"}],
        "confidence": 0.8,
    })


@dataclass
class StandInCreditJudgeServer:
    """Stand-in for the credit judge model behind an OpenAI-compatible endpoint: the fault of the candidate's
    question (:func:`judge_fault`) decides the reply: a stall of ``stall_s`` (past the judge's timeout), a text that
    is no JSON, or a valid assessment after ``latency_s`` (always, when ``faults`` is false)."""

    stall_s: float
    latency_s: float = 0.0
    faults: bool = True
    requests: Counter[str] = field(default_factory=Counter)

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.text()
        fault = judge_fault(int(QUESTION_RE.search(body).group(1))) if self.faults else None
        self.requests[fault or "valid"] += 1
        if fault == "timeout":
            await asyncio.sleep(self.stall_s)
        await asyncio.sleep(self.latency_s)
        content = "The candidate went wrong when it searched Lyon." if fault == "invalid" else valid_assessment()
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": content},
                                               "finish_reason": "stop"}]})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


class InProcessRolloutControl:
    """``RayRolloutControl``'s four calls against one worker on ``loop`` (the buffer polls from a thread, as the
    trainer does; the worker is not a Ray actor here)."""

    def __init__(self, worker, loop: asyncio.AbstractEventLoop) -> None:
        self.worker, self.loop = worker, loop
        self.cancelled: list[str] = []

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def dispatch(self, batch) -> None:
        self._call(self.worker.generate_sequences(batch)).result()  # spawns the sessions, does not wait for them

    def cancel(self, keys: Sequence[str]) -> None:
        self.cancelled.extend(keys)
        self._call(self.worker.cancel_sessions(list(keys))).result()

    def assess(self, reference_key, failure_keys, task):
        return self._call(self.worker.assess_failures(reference_key, list(failure_keys), task))

    def wait(self, pending) -> None:
        for future in pending:
            future.result()


def recipe_overrides(*, tool_timeout_s: float, judge_timeout_s: float) -> list[str]:
    """``+recipe=neos`` with the device keys of this machine (the model path comes with the composer), and the two
    timeouts the faults are measured against (the recipe's are minutes: a stalled call would take that long here).
    The tool server and judge are where the recipe's environment variables say (``NEOS_TOOL_SERVER_URL``,
    ``NEOS_JUDGE_URL``)."""
    return [
        "+recipe=neos",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"+actor_rollout_ref.rollout.custom.neos_rollout.call_timeout_s={tool_timeout_s}",
        f"+actor_rollout_ref.rollout.custom.neos_credit_judge.timeout_s={judge_timeout_s}",
        "+actor_rollout_ref.rollout.custom.neos_credit_judge.retry_backoff_s=0.05",
        # nothing here trains: old log-probs are the rollout's, as verl's bypass mode takes them
        "algorithm.rollout_correction.bypass_mode=true",
    ]


@dataclass
class Rehearsal:
    """What one update's rollout left: the selected batch's keys, the metrics, the selected rows' extra_fields and
    outcome rewards, and the wall time of ``sample()``."""

    keys: list[str]
    metrics: dict[str, float]
    rows: list[dict[str, Any]]
    scores: list[float]
    wall_s: float
    cancelled: int


def make_trainer(config, rows: list[dict[str, Any]]):
    """``NeosTrainer`` without its GPU workers (``object.__new__``): its replay buffer, dataloader and advantage
    step are real."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    from verl_ext.trainer.neos_trainer import NeosTrainer

    trainer = object.__new__(NeosTrainer)
    trainer.config = config
    trainer.trainer_mode, trainer.parameter_sync_step, trainer.global_steps = "sync", 1, 1
    trainer._one_question_per_fetch()
    trainer.train_dataloader = StatefulDataLoader(rows, batch_size=1, shuffle=False, collate_fn=collate_fn)
    trainer.train_dataloader_it = None
    trainer.replay_buffer = trainer._build_replay_buffer()
    trainer.replay_buffer.max_deferred = len(rows)  # what _init_dataloader sets
    return trainer


async def rehearse(config, worker, rows: list[dict[str, Any]], *, mei_dir, hang_guard_s: float) -> Rehearsal:
    """One update: ``sample()`` of B mixed groups (its polls in a thread), then verl's old-log-prob (bypass) and
    advantage steps over the selected batch, and the MEI step after a policy update (the selected batch's MEI calls
    retained from the tool server's MEI log, the schedule advanced by one update); ``asyncio.wait_for`` is the hang
    guard."""
    from verl_ext.mei.buffer import MEIBuffer
    from verl_ext.trainer.rows import selected_rows

    trainer = make_trainer(config, rows)
    control = InProcessRolloutControl(worker, asyncio.get_running_loop())
    trainer.replay_buffer.bind(control)
    groups = int(config.data.train_batch_size)
    start = time.perf_counter()
    batch, metrics = await asyncio.wait_for(
        asyncio.to_thread(trainer.replay_buffer.sample, 1, "train", groups), timeout=hang_guard_s
    )
    wall = time.perf_counter() - start
    metrics = dict(metrics)
    trainer._compute_old_log_prob(batch, metrics)
    trainer._compute_advantage(batch, metrics)
    trainer.mei_buffer, trainer.mei_every = MEIBuffer(mei_dir), int(trainer._mei_config().update_every)
    trainer._retain_mei_calls(batch, metrics)  # what MEICoEvolutionMixin._update_actor does after verl's update
    trainer.mei_buffer.record_policy_update()
    metrics["mei/due"] = float(trainer.mei_buffer.due(trainer.mei_every))
    extra, scores = selected_rows(batch)
    return Rehearsal(list(batch.keys), metrics, extra, scores, wall, len(control.cancelled))
