"""The credit judges: the LLM client against a real aiohttp server on 127.0.0.1, the prompt, the offline heuristic."""

from __future__ import annotations

import asyncio

import pytest

from verl_ext.credit import CreditParams
from verl_ext.credit.judge import CREDIT_MAX_TOKENS, CreditJudge, CreditJudgeConfig
from verl_ext.credit.labels import CreditLabels, LabelEvent
from verl_ext.credit.offline_judge import OfflinePathJudge
from verl_ext.credit.prompt import SYSTEM_PROMPT, credit_messages

from .conftest import PATH, candidate, credit_server, reference

EXPECTED_VALID = CreditLabels(
    assessed=True,
    judge="llm:{model}",
    num_turns=8,
    events=[LabelEvent(turn=3, type="causal_error", severity=0.9, confidence=0.8)],
    productive={0: 0.7},
)


def _assess(model: str, n: int = 1, latency_s: float = 0.0, **cfg: object):
    async def main():
        async with credit_server(latency_s) as (url, calls, bodies):
            judge = CreditJudge(CreditJudgeConfig(url=url, model=model, retry_backoff_s=0.0, **cfg))
            labels = await judge.assess_group(reference(), [candidate()] * n)
            return labels, judge.counters, calls, bodies

    return asyncio.run(main())


@pytest.mark.parametrize("model", ["valid", "fenced"])
def test_valid_reply_becomes_labels(model: str) -> None:
    labels, counters, calls, _ = _assess(model)
    assert labels == [EXPECTED_VALID.model_copy(update={"judge": f"llm:{model}"})]
    assert (counters["ok"], calls[model]) == (1, 1)


def test_invalid_then_valid_is_repaired_with_the_error_sent_back() -> None:
    labels, counters, calls, bodies = _assess("repair", max_retries=2)
    assert labels == [EXPECTED_VALID.model_copy(update={"judge": "llm:repair"})]
    assert (counters["repaired"], counters["ok"], calls["repair"]) == (1, 0, 2)
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "t99" in second[-1]["content"] and "does not list" in second[-1]["content"]


@pytest.mark.parametrize(
    ("model", "reason"), [("invalid", "invalid"), ("schema", "invalid"), ("truncated", "truncated")]
)
def test_every_malformed_reply_is_a_repair_attempt_then_grpo(model: str, reason: str) -> None:
    """Not JSON, schema-invalid and cut-off replies each cost one attempt of 1 + max_retries, each attempt sending
    the reply back with what was wrong; after the last the failure falls back with the reason."""
    labels, counters, calls, bodies = _assess(model, max_retries=2)
    assert labels == [CreditLabels(assessed=False, judge=f"llm:{model}", num_turns=8, fallback_reason=reason)]
    assert (counters[f"fallback_{reason}"], calls[model]) == (1, 3)
    last = bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    expected = {
        "invalid": "Invalid JSON",
        "schema": "less than or equal to 1",
        "truncated": f"cut off at the output limit of {CREDIT_MAX_TOKENS} tokens",
    }[model]
    assert expected in last[-1]["content"]


def test_a_200_body_that_is_not_json_is_a_failed_attempt_not_an_exception() -> None:
    labels, counters, calls, bodies = _assess("html", max_retries=1)
    assert labels[0].fallback_reason == "bad_body" and (counters["fallback_bad_body"], calls["html"]) == (1, 2)
    labels, counters, calls, bodies = _assess("html_once", max_retries=1)
    assert labels == [EXPECTED_VALID.model_copy(update={"judge": "llm:html_once"})]
    assert counters["repaired"] == 1 and len(bodies[1]["messages"]) == 2  # the same request, sent again


def test_output_budget_default_is_sent_with_every_attempt() -> None:
    """The shipped default (not verl's or the answer judge's 256) goes out on the first request and on repairs."""
    assert CreditJudgeConfig().max_tokens == CREDIT_MAX_TOKENS == 8192
    assert CreditJudgeConfig().timeout_s == 300.0
    _, _, _, bodies = _assess("repair", max_retries=2)
    assert [b["max_tokens"] for b in bodies] == [CREDIT_MAX_TOKENS] * 2


def test_a_judge_that_raises_falls_back_for_that_failure_only(monkeypatch) -> None:
    real = CreditJudge.assess
    seen = []

    async def flaky(self, reference, candidate, session=None, images=None):
        seen.append(candidate.session_id)
        if len(seen) == 2:
            raise RuntimeError("bug in the judge")
        return await real(self, reference, candidate, session, images)

    monkeypatch.setattr(CreditJudge, "assess", flaky)
    labels, counters, _, _ = _assess("valid", n=3)
    assert [label.assessed for label in labels] == [True, False, True]
    assert labels[1].fallback_reason == "error" and counters["fallback_error"] == 1


def test_group_requests_run_concurrently_up_to_the_limit_in_input_order() -> None:
    labels, counters, calls, _ = _assess("valid", n=5, latency_s=0.1, max_concurrency=2)
    assert calls["max_in_flight"] == 2 and calls["valid"] == 5 and counters["ok"] == 5
    assert len(labels) == 5 and all(label.assessed for label in labels)


def test_prompt_carries_the_rules_span_ids_and_what_the_agent_saw() -> None:
    for rule in (
        "not the only one",
        "environment's fault",
        "first decision",
        "downstream",
        "recovery",
        "re_derailment",
        "had seen by that turn",
        "metadata are not evidence",
        "span ids as listed",
    ):
        assert rule in SYSTEM_PROMPT


def test_prompt_carries_the_three_rules_of_neos_fig18() -> None:
    """Neos App. F Fig. 18, rules 6 and 7 and the withheld-observation note, in our words and the schema's keys."""
    prompt = " ".join(SYSTEM_PROMPT.split())
    # a wrong final answer is causal only if viable evidence remained; otherwise it is downstream (unlabelled)
    assert "final answer turn is a causal_error only if" in prompt and "a viable route remained" in prompt
    assert "earlier, never recovered error made inevitable, leave it unlabelled" in prompt
    # productive turns inside an error branch keep positive credit; only recovery closes the branch
    assert "inside an unrecovered error branch can still be productive" in prompt
    assert "List it under productive_turns" in prompt and "only a recovery event does" in prompt
    # withheld observations are never the policy's fault; the rendering marks them with the same words
    assert '"not shown to the agent"' in prompt and "never blame the agent for not using them" in prompt
    t4 = credit_messages(reference(), candidate())[1]["content"].split("[t4]")[1].split("\n\n")[0]
    assert "(not shown to the agent)" in t4
    user = credit_messages(reference(), candidate())[1]["content"]
    assert "[reference turn 2]" in user and "[t7]" in user and "t0, t1, t2, t3, t4, t5, t6, t7" in user
    t0, t1, t3 = (user.split(f"[t{i}]")[1].split("\n\n")[0] for i in (0, 1, 3))
    assert "images seen before this turn: img_1 (question)\n" in t0 + "\n"  # its own image comes after it
    assert "img_1 (question), img_2 (ImageSearch)" in t1 and "error: timeout (caused by: tool)" in t1
    assert "registered but never shown (metadata only): img_3 (WebVisit)" in t3  # added at t2, pixels never shown
    t4 = user.split("[t4]")[1].split("\n\n")[0]
    assert "observation: (not shown to the agent)" in t4 and "The Orontes" not in t4


def test_offline_judge_labels_the_path_heuristic() -> None:
    judge = OfflinePathJudge([PATH])
    (labels,) = asyncio.run(judge.assess_group(reference(), [candidate()]))
    # t0 hits "Lebanon", t2 hits "Beirut" (last productive); t3 searches Syria: causal; t4 downstream; t5 mentions
    # Beirut again (no new item): recovery; t6 Orontes: re-derailment; t7 wrong answer while already off: downstream; t1 tool error
    assert labels == CreditLabels(
        assessed=True,
        judge="offline_path",
        num_turns=8,
        events=[
            LabelEvent(turn=3, type="causal_error", severity=1.0, confidence=1.0),
            LabelEvent(turn=5, type="recovery", severity=0.0, confidence=1.0),
            LabelEvent(turn=6, type="re_derailment", severity=1.0, confidence=1.0),
        ],
        productive={0: 1.0, 2: 1.0},
    )
    # Eq. 3 (Table 12): λ_p, neutral, λ_p, -1, -λ_d·1·γ^0, λ_c, -1, -λ_d·1·γ^0
    assert labels.weights(CreditParams()) == pytest.approx([0.1, 0.0, 0.1, -1.0, -0.5, 0.3, -1.0, -0.5])


def test_offline_judge_wrong_answer_on_the_path_is_the_causal_error_and_unknown_tasks_fall_back() -> None:
    on_path = candidate().model_copy(update={"turns": [candidate().turns[i] for i in (0, 1, 2)]})
    answer = candidate().turns[7].model_copy(update={"index": 3})
    on_path = on_path.model_copy(update={"turns": [*on_path.turns, answer]})
    judge = OfflinePathJudge([PATH])
    labels = judge.assess(reference(), on_path)
    assert labels.events == [LabelEvent(turn=3, type="causal_error", severity=1.0, confidence=1.0)]
    other = on_path.model_copy(update={"question": "unknown"})
    assert judge.assess(reference(), other).fallback_reason == "no_task_path"
    assert (judge.counters["ok"], judge.counters["fallback_no_task_path"]) == (1, 1)
