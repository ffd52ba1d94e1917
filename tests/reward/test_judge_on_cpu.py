"""The LLM judge against a real aiohttp endpoint on 127.0.0.1: yes, no, malformed, slow, flaky, and no URL."""

from __future__ import annotations

import asyncio

import pytest

from verl_ext.reward.judge import AnswerJudge, JudgeConfig, JudgeReplyError, judge_messages, parse_judge_reply

from .conftest import judge_server


def _run(model: str, response: str = "It is Paris.", ground_truth: object = "Paris", **cfg: object):
    async def main():
        async with judge_server(slow_s=1.0) as (url, calls):
            judge = AnswerJudge(JudgeConfig(url=url, model=model, retry_backoff_s=0.0, **cfg))
            return await judge.judge("Capital of France?", ground_truth, response), calls

    return asyncio.run(main())


def test_yes_and_no_come_from_the_llm() -> None:
    verdict, _ = _run("yes", response="something the rule would reject")
    assert (verdict.correct, verdict.source, verdict.attempts) == (True, "llm", 1)
    assert verdict.reasoning == "the response names the reference."
    verdict, _ = _run("no", response="Paris")  # the LLM overrules the rule matcher
    assert (verdict.correct, verdict.source) == (False, "llm")


def test_malformed_falls_back_after_bounded_retries() -> None:
    verdict, calls = _run("malformed", response="The answer is Paris.", max_retries=2)
    assert calls["malformed"] == 3
    assert (verdict.correct, verdict.source, verdict.attempts) == (True, "rule_fallback", 3)
    assert verdict.error.startswith("JudgeReplyError")
    assert AnswerJudge.extra_info(verdict)["judge_fallback"] == 1.0


def test_slow_judge_times_out_and_falls_back() -> None:
    verdict, calls = _run("slow", response="Lyon", timeout_s=0.2, max_retries=1)
    assert calls["slow"] == 2
    assert (verdict.correct, verdict.source) == (False, "rule_fallback")
    assert "Timeout" in verdict.error


def test_retry_recovers_and_http_errors_fall_back() -> None:
    verdict, calls = _run("flaky")
    assert (verdict.correct, verdict.source, verdict.attempts, calls["flaky"]) == (True, "llm", 2, 2)
    verdict, calls = _run("http500", max_retries=0)
    assert (verdict.source, calls["http500"]) == ("rule_fallback", 1)
    assert "ClientResponseError" in verdict.error


def test_no_url_and_empty_response_use_the_rule_without_requests() -> None:
    verdict = asyncio.run(AnswerJudge(JudgeConfig()).judge("q", {"target": "NYC", "aliases": ["New York"]}, "New York"))
    assert (verdict.correct, verdict.source, verdict.attempts) == (True, "rule", 0)
    verdict, calls = _run("yes", response="  ")
    assert (verdict.correct, verdict.source, sum(calls.values())) == (False, "rule", 0)


def test_concurrency_is_bounded() -> None:
    async def main():
        async with judge_server(slow_s=0.2) as (url, _):
            judge = AnswerJudge(JudgeConfig(url=url, model="slow", max_concurrency=2))
            start = asyncio.get_running_loop().time()
            verdicts = await asyncio.gather(*(judge.judge("q", "Paris", "Paris") for _ in range(4)))
            return verdicts, asyncio.get_running_loop().time() - start

    verdicts, elapsed = asyncio.run(main())
    assert all(v.source == "llm" for v in verdicts)
    assert elapsed >= 0.4  # two waves of two


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("reasoning: fine\ncorrect: yes", (True, "fine")),
        ("Reasoning: nope\nCorrect: NO", (False, "nope")),
        ("**correct:** yes", (True, "")),
    ],
)
def test_parse_judge_reply(reply: str, expected: tuple[bool, str]) -> None:
    assert parse_judge_reply(reply) == expected


@pytest.mark.parametrize("reply", ["correct: maybe", "correct: yes\ncorrect: no", "yes", "the answer is correct: yes"])
def test_parse_judge_reply_is_strict(reply: str) -> None:
    with pytest.raises(JudgeReplyError):
        parse_judge_reply(reply)


def test_config_rejects_unknown_keys_and_prompt_has_all_parts() -> None:
    with pytest.raises(ValueError, match="unknown judge settings"):
        JudgeConfig.from_mapping({"ulr": "http://127.0.0.1:1"})
    user = judge_messages("Q?", "R", "S")[1]["content"]
    assert "Q?" in user and "R" in user and "S" in user


def test_a_window_of_fallbacks_above_the_shipped_threshold_logs_one_warning(caplog) -> None:
    """The shipped defaults (window 64, 10%): a judge down for a whole window warns once, naming the error; a healthy
    window does not; answers the rule decides by choice (no URL) do not count."""
    assert (JudgeConfig().fallback_window, JudgeConfig().max_fallback_share) == (64, 0.1)

    async def main():
        async with judge_server() as (url, _):
            down = AnswerJudge(JudgeConfig(url=url, model="http500", max_retries=0, retry_backoff_s=0.0))
            await asyncio.gather(*(down.judge("q", "Paris", "Paris") for _ in range(64)))
            healthy = AnswerJudge(JudgeConfig(url=url, model="yes"))
            await asyncio.gather(*(healthy.judge("q", "Paris", "Paris") for _ in range(64)))
            return down.fallbacks, healthy.fallbacks

    with caplog.at_level("WARNING", logger="verl_ext.reward.judge"):
        down, healthy = asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.name == "verl_ext.reward.judge"]
    assert len(warnings) == 1 and "64 of the last 64 answers" in warnings[0] and "ClientResponseError" in warnings[0]
    assert (down.total_judged, down.total_fallbacks, healthy.total_fallbacks) == (64, 64, 0)
    rule_only = AnswerJudge(JudgeConfig())
    asyncio.run(rule_only.judge("q", "Paris", "Paris"))
    assert rule_only.fallbacks.total_judged == 0


def test_fallback_window_counts_by_hand() -> None:
    from verl_ext.reward.judge import FallbackWindow, Verdict

    window = FallbackWindow(size=4, max_share=0.25)
    llm, fallback = Verdict(True, "llm"), Verdict(False, "rule_fallback", error="TimeoutError: ")
    assert [window.add(v) for v in (llm, fallback, llm, llm)] == [None] * 4  # 1 of 4 = 25%: not above
    results = [window.add(v) for v in (fallback, fallback, llm, llm)]  # 2 of 4 = 50%
    assert results[:3] == [None] * 3 and "2 of the last 4" in results[3] and "TimeoutError" in results[3]
    with pytest.raises(ValueError):
        FallbackWindow(size=0, max_share=0.1)
