"""Paper-scale rehearsal on CPU: one update's rollout of the composed ``+recipe=neos`` as the recipe sets it for the
paper's 35B variant, B = 32, G = 8 (window 64, admission limit 512), with injected faults, through the real sampler,
agent-loop worker, tool server, credit judge client, advantage step and MEI schedule (``tests/trainer/rehearsal.py``
says what is real and what stands in). The 9B model's B = 64 (window 128, 1,024 admitted) runs the same round in
``bench/bench_rehearsal.py`` (~1.7x this test's time on 2 cores, for the same checks).

Faults: tool calls answered 503 or stalled past the call timeout; a judge that stalls past its timeout or answers
text that is no JSON; one agent loop raising. Each must end in a counted, bounded outcome: the batch is still exactly
B x G trajectories, every fault is in its metric or in the trajectory records, and ``sample()`` returns (the
``asyncio.wait_for`` is a hang guard, not a performance budget).
"""

from __future__ import annotations

import logging
import math

import pytest
import transfer_queue as tq
from aiohttp.test_utils import TestServer

from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.trainer.mixed_groups import mixed_group_settings

from .rehearsal import (
    QUESTION_RE,
    TOOL_503,
    TOOL_TIMEOUT,
    _ExactMatchScored,
    StandInCreditJudgeServer,
    StandInGenerateServer,
    ToolFaults,
    dataset,
    judge_fault,
    recipe_overrides,
    rehearse,
    tool_fault,
)

HANG_GUARD_S = 600
B, G = 32, 8
# The tool call timeout holds the real server's answers under 1,024 concurrent sessions on 2 busy cores (the bench's
# B = 64; 512 here): the stalls (the injected timeouts) last it plus a second. The judge's likewise holds a valid reply
# while the same event loop runs the whole rollout.
TOOL_TIMEOUT_S, JUDGE_TIMEOUT_S = 15.0, 3.0
QUESTIONS = 80  # > the window (64): the dataloader never wraps around within the update


@pytest.fixture
async def judge_server():
    judge = StandInCreditJudgeServer(stall_s=JUDGE_TIMEOUT_S + 1.0)
    server = TestServer(judge.app(), host="127.0.0.1")
    await server.start_server()
    yield judge, str(server.make_url("/v1"))
    await server.close()


async def test_one_paper_scale_update_with_faults_selects_b_times_g_and_counts_every_fault(
    transfer_queue, tool_server_with, judge_server, compose_ppo_config, tiny_vl_model_dir, tiny_vl_processor,
    tmp_path, monkeypatch, caplog,
):
    caplog.set_level(logging.WARNING)
    faults = ToolFaults(stall_s=TOOL_TIMEOUT_S + 1.0)
    server = await tool_server_with(middlewares=[faults.middleware])
    judge, judge_url = judge_server
    monkeypatch.setenv("NEOS_TOOL_SERVER_URL", str(server.make_url("")).rstrip("/"))
    monkeypatch.setenv("NEOS_JUDGE_URL", judge_url)
    monkeypatch.setenv("NEOS_MEI_LOG", str(tmp_path / "mei.jsonl"))  # the tool_server fixture's MEI log
    config = compose_ppo_config(
        tiny_vl_model_dir,
        *recipe_overrides(tool_timeout_s=TOOL_TIMEOUT_S, judge_timeout_s=JUDGE_TIMEOUT_S),
        f"data.train_batch_size={B}",  # the recipe's switch for the 35B variant
    )
    # The recipe's paper values at work (composed as a user would, device keys aside).
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (B, G)
    sampler, _, _ = mixed_group_settings(config, groups=B)
    assert (sampler.window, sampler.admission_limit) == (2 * B, 2 * B * G) == (64, 512)
    replica = StandInGenerateServer(tiny_vl_processor.tokenizer, per_token_s=1e-4)
    worker = _ExactMatchScored(config, replica)
    assert worker.llm_judge is not None  # the recipe's kind: llm

    result = await rehearse(config, worker, dataset(QUESTIONS), mei_dir=tmp_path / "mei", hang_guard_s=HANG_GUARD_S)
    m = result.metrics

    # Exactly B x G selected trajectories, B mixed groups of G.
    records = [TrajectoryRecord.model_validate(r[RECORD_KEY]) for r in result.rows]
    assert len(result.keys) == len(records) == B * G
    by_question: dict[int, list[tuple[TrajectoryRecord, float, dict]]] = {}
    for record, score, extra in zip(records, result.scores, result.rows):
        by_question.setdefault(int(QUESTION_RE.search(record.question).group(1)), []).append((record, score, extra))
    assert len(by_question) == B and all(len(g) == G for g in by_question.values())
    assert all(0 < sum(s for _, s, _ in g) < G for g in by_question.values())  # mixed
    assert not any(q % 8 == 7 for q in by_question)  # never-solved questions are never selected
    assert m["neos_sampler/selected"] == B * G and m["neos_sampler/homogeneous_at_g"] >= 1

    # The raising agent loop: its session ended as a failure with no rows, counted.
    assert replica.raised == 1
    assert m["neos_sampler/aborted"] == 1.0 and m["neos_rollout/failed_sessions"] == 1.0

    # Tool faults: every selected failure of a faulty question carries one tool error of that kind in its record.
    tool_errors = {(q, c.error_type) for q, g in by_question.items() for r, _, _ in g for t in r.turns
                   for c in t.calls if not c.ok}
    expected_errors = {(q, {TOOL_503: "bad_response", TOOL_TIMEOUT: "timeout"}[tool_fault(q)])
                       for q in by_question if tool_fault(q)}
    assert tool_errors == expected_errors and expected_errors
    for q, group in by_question.items():
        for record, score, _ in group:
            errors = [t for t in record.turns if t.error_class == "tool"]
            assert len(errors) == (1 if tool_fault(q) and score < 0.5 else 0)
            assert record.final_answer == ("Paris" if score >= 0.5 else "Lyon")  # the episode went on after it
    assert faults.injected["503"] >= 1 and faults.injected["timeout"] >= 1

    # Judge faults: every selected failure is labelled; the faulty questions' fall back with their reason, counted.
    reasons: dict[str, int] = {}
    failures = 0
    for q, group in by_question.items():
        for _, score, extra in group:
            if score >= 0.5:
                assert CREDIT_KEY not in extra
                continue
            failures += 1
            labels = CreditLabels.model_validate(extra[CREDIT_KEY])
            fault = judge_fault(q)
            assert labels.assessed == (fault is None), (q, labels)
            if fault:
                assert labels.fallback_reason == fault
                reasons[fault] = reasons.get(fault, 0) + 1
    assert set(reasons) == {"invalid", "timeout"}
    assert m["neos_credit/judged_failures"] == failures
    for reason, n in reasons.items():
        assert m[f"neos_credit/fallback/{reason}"] == pytest.approx(n / failures)
    assert m["neos_credit/fallback_share"] == pytest.approx(sum(reasons.values()) / failures)
    assert "turn credit fell back to plain GRPO" in caplog.text  # ~20% > the 10% threshold
    for reason, n in reasons.items():  # every attempt (1 + max_retries = 3) was spent before falling back
        assert judge.requests[reason] >= 3 * n

    # The surplus was cancelled at the policy boundary; nothing but the batch is left in TransferQueue.
    assert result.cancelled == m["neos_sampler/cancelled"] > 0
    assert sorted(tq.kv_list("train")["train"]) == sorted(result.keys)
    assert not worker._sessions and worker.assessor._groups == {}
    assert all(math.isfinite(v) for v in m.values())

    # MEI schedule (K = 10 from the recipe): one policy update is not yet due.
    assert m["mei/due"] == 0.0 and "mei/retained_calls" in m
    tq.kv_clear(keys=result.keys, partition_id="train")
