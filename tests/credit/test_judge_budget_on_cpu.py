"""The credit judge's default output budget holds a v2 assessment of a 50-turn failure, measured with the real
Qwen3 tokenizer, and the old 256-token budget did not (the reply was cut off and turn credit became GRPO).

The assessments are ``bench/bench_judge_budget.py``'s (realistic rationales, three label densities). The chat server
is a real aiohttp server on 127.0.0.1 that stands in for an LLM server's budget only: it answers the prepared
assessment, cut at the request's ``max_tokens`` tokens of the same tokenizer with ``finish_reason: length``, as
vLLM and OpenAI-compatible servers do.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from verl_ext.credit.judge import CREDIT_MAX_TOKENS, CreditJudge, CreditJudgeConfig
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_judge_budget.py"
HEADROOM = 1.5


def _bench():
    spec = importlib.util.spec_from_file_location("bench_judge_budget", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from verl_ext.models.tiny_vl import _load_tokenizer

    return _load_tokenizer(None)[0]


def test_the_default_holds_the_largest_50_turn_assessment_with_headroom(qwen_tokenizer) -> None:
    bench = _bench()
    sizes = bench.measure(qwen_tokenizer, seeds=3)
    largest = max(indented for _, indented in sizes.values())
    assert sizes[("every", 50)][1] == largest  # the bound: every turn of the longest failure labelled
    assert largest * HEADROOM <= CREDIT_MAX_TOKENS == 8192
    assert sizes[("typical", 20)][0] > 256  # the previous default cut even a typical 20-turn assessment


def _candidate(turns: int) -> TrajectoryRecord:
    def turn(i: int) -> TurnRecord:
        if i == turns - 1:
            return TurnRecord(index=i, span=(i, i + 1), text="Answer: Cedar Falls", outcome="answer")
        call = CallRecord(tool_name="TextSearch", arguments={"query": f"q{i}"}, ok=True, observation=f"result {i}")
        return TurnRecord(index=i, span=(i, i + 1), text=f"step {i}", outcome="call_ok", calls=[call])

    return TrajectoryRecord(protocol="neos", question="q", session_id="s", group_id="g", mei_version=None,
                            termination_reason="answer", final_answer="Cedar Falls",
                            turns=[turn(i) for i in range(turns)])


def _judge_with_budget(reply: str, tokenizer, **config) -> tuple[object, list[int]]:
    ids = tokenizer.encode(reply)
    budgets: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        budget = int((await request.json())["max_tokens"])
        budgets.append(budget)
        cut = len(ids) > budget
        content = tokenizer.decode(ids[:budget]) if cut else reply
        choice = {"message": {"role": "assistant", "content": content}, "finish_reason": "length" if cut else "stop"}
        return web.json_response({"choices": [choice]})

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        async with TestServer(app, host="127.0.0.1") as server:
            judge = CreditJudge(CreditJudgeConfig(url=str(server.make_url("/v1")), model="m", **config))
            (labels,) = await judge.assess_group(_candidate(50), [_candidate(50)])
            return labels

    return asyncio.run(main()), budgets


def test_a_50_turn_assessment_comes_through_the_default_budget_and_not_through_256(qwen_tokenizer) -> None:
    reply = _bench().fenced(_bench().assessment(50, 1.0), indent=2)
    labels, budgets = _judge_with_budget(reply, qwen_tokenizer)
    assert labels.assessed and labels.num_turns == 50 and budgets == [CREDIT_MAX_TOKENS]
    assert len(labels.events) + len(labels.productive) == 50
    labels, budgets = _judge_with_budget(reply, qwen_tokenizer, max_tokens=256, max_retries=1)
    assert (labels.assessed, labels.fallback_reason, budgets) == (False, "truncated", [256, 256])
