"""Our agent as an rLLM ``AgentFlow`` and our reward as an rLLM ``Evaluator``, for ``rllm eval``.

Registered through rLLM's entry-point groups (``pyproject.toml``): agents ``neos_search`` / ``modalsearch_react``,
evaluators ``neos_answer_judge`` / ``modalsearch_reward``. The flow talks OpenAI chat completions to
``AgentConfig.base_url`` (the model gateway ``rllm eval`` starts, which records every call as a trace), greedy
(temperature 0; the gateway's sampling parameters override it when ``rllm eval`` is given some), question and tool
images as ``image_url`` data URIs; the tool server is ``NEOS_TOOL_SERVER_URL`` (default ``http://127.0.0.1:8080``).
The evaluator scores what the flow recorded in the trajectory's metadata with our reward managers' rule
(``reward.outcome.score_turns``); ``NEOS_JUDGE_URL`` / ``NEOS_JUDGE_MODEL`` select an LLM judge, else the offline
matcher decides.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp

from verl_ext.reward.judge import AnswerJudge, JudgeConfig, chat_message
from verl_ext.reward.outcome import score_turns
from verl_ext.rllm import require_rllm
from verl_ext.rllm.episode import (
    RLLM_TERMINATION,
    SearchEpisode,
    SearchSettings,
    SearchTask,
    assistant_text,
    ground_truth_of,
)
from verl_ext.rllm.messages import answer_native_calls, instruction, openai_observations, openai_prompt
from verl_ext.tools.client import ToolServerClient

_types = require_rllm("rllm.types")
_eval_types = require_rllm("rllm.eval.types")
TerminationReason = require_rllm("rllm.workflows.workflow").TerminationReason
Episode, Step, Trajectory = _types.Episode, _types.Step, _types.Trajectory
EvalOutput, Signal = _eval_types.EvalOutput, _eval_types.Signal

RECORD_KEY = "neos_episode"  # trajectory metadata the evaluator reads
JUDGE_URL_ENV, JUDGE_MODEL_ENV = "NEOS_JUDGE_URL", "NEOS_JUDGE_MODEL"


class SearchAgentFlow:
    """One episode of our protocol per task; ``max_turn_tokens`` caps each generation (default 2048)."""

    protocol: str | None = None  # None: the task row's agent_name decides (default neos)
    name = "neos_search"

    def __init__(self, max_turn_tokens: int = 2048, model_timeout_s: float = 600.0, **settings: Any) -> None:
        self.max_turn_tokens = max_turn_tokens
        self.model_timeout_s = model_timeout_s
        self.settings_overrides = settings

    def run(self, task: Any, config: Any) -> Any:
        """The synchronous entry rLLM's loader checks for; its engines call ``arun`` in their event loop."""
        return asyncio.run(self.arun(task, config))

    async def arun(self, task: Any, config: Any) -> Any:
        row = getattr(task, "metadata", task)
        search_task = SearchTask.from_row(row, base_dir=getattr(task, "dataset_dir", None))
        protocol = self.protocol or search_task.protocol or "neos"
        settings = SearchSettings.for_protocol(protocol, **self.settings_overrides)
        model = JudgeConfig(
            url=config.base_url, model=config.model, max_tokens=self.max_turn_tokens, timeout_s=self.model_timeout_s
        )
        # Pools of the episode's own, closed with it: rLLM's engines have no shutdown hook for a shared one.
        async with (
            ToolServerClient(settings.tool_server_url, timeout_s=settings.call_timeout_s) as tools,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.model_timeout_s)) as http,
        ):
            ep = SearchEpisode(search_task, settings, client=tools)
            try:
                steps = await self._turns(ep, http, model)
            finally:
                await ep.close()
        record = {**ep.summary(), "turn_texts": list(ep.turn_texts), "question": search_task.question}
        trajectory = Trajectory(name=protocol, steps=steps, output=ep.answer or "", metadata={RECORD_KEY: record})
        # rLLM's flow engine records ENV_DONE for an episode without a reason: one that ran out of turns did not end
        reason = TerminationReason[RLLM_TERMINATION.get(ep.termination_reason, "UNKNOWN")]
        return Episode(trajectories=[trajectory], termination_reason=reason,
                       metadata={"termination_reason": ep.termination_reason})


    @staticmethod
    async def _turns(ep: SearchEpisode, http: aiohttp.ClientSession, model: JudgeConfig) -> list[Any]:
        await ep.open()
        messages = openai_prompt(ep)
        if ep.final_turn:
            messages.append(instruction(ep.final_instruction))
        steps = []
        while True:
            reply = await chat_message(http, model, messages, tools=ep.native_tools)
            calls = reply.get("tool_calls") or []
            text = assistant_text(reply.get("content"), calls)
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            steps.append(Step(output=text, action=text, model_response=text))
            observations = await ep.act(text)
            if observations is None:
                return steps
            messages += openai_observations(answer_native_calls(observations, [c.get("id") for c in calls]))
            if ep.final_turn:
                messages.append(instruction(ep.final_instruction))


class NeosSearchFlow(SearchAgentFlow):
    protocol = "neos"
    name = "neos_search"


class ModalSearchFlow(SearchAgentFlow):
    protocol = "modalsearch"
    name = "modalsearch_react"


class SearchEvaluator:
    """Our reward of an episode ``SearchAgentFlow`` ran: ``reward`` as our verl reward manager gives it, correct when
    the judge accepts the answer; signals ``accuracy`` (and ``format`` for ModalSearcher)."""

    protocol: str | None = None

    def __init__(self, judge: dict[str, Any] | None = None) -> None:
        values = dict(judge or {})
        if os.environ.get(JUDGE_URL_ENV) and "url" not in values:
            values["url"] = os.environ[JUDGE_URL_ENV]
            values.setdefault("model", os.environ.get(JUDGE_MODEL_ENV, "judge"))
        self.judge_config = JudgeConfig.from_mapping(values)

    def evaluate(self, task: Any, episode: Any) -> Any:
        """Called in rLLM's executor threads (no running event loop there)."""
        row = getattr(task, "metadata", task)
        record = _record(episode)
        if record is None:
            return EvalOutput(reward=0.0, is_correct=False, metadata={"neos_eval_error": "no episode record"})
        protocol = self.protocol or record["protocol"]
        reward, info = asyncio.run(
            score_turns(
                AnswerJudge(self.judge_config),
                protocol,
                [t for t in record["turn_texts"] if t.strip()],
                question=record["question"],
                ground_truth=ground_truth_of(row),
                termination_reason=record["termination_reason"],
            )
        )
        signals = [Signal("accuracy", info["acc"])]
        if "fmt" in info:
            signals.append(Signal("format", info["fmt"]))
        metadata = {  # numbers only: rLLM averages them into the run's metrics
            "answered": float(record["termination_reason"] == "answer"),
            "turns": float(record["turns"]),
            "judge_fallback": info["judge_fallback"],
        }
        return EvalOutput(reward=reward, is_correct=bool(info["acc"]), signals=signals, metadata=metadata)


class NeosAnswerEvaluator(SearchEvaluator):
    protocol = "neos"


class ModalSearchRewardEvaluator(SearchEvaluator):
    protocol = "modalsearch"


def _record(episode: Any) -> dict[str, Any] | None:
    for trajectory in reversed(episode.trajectories):
        record = (trajectory.metadata or {}).get(RECORD_KEY)
        if record is not None:
            return record
    return None
