"""The evaluation judge on a real loopback chat server (a scripted judge): replies cached by (question, reference,
response), fallbacks to the rule matcher not cached and counted by reason, the pin, two-pass agreement."""

from __future__ import annotations

import asyncio
import json
import logging

from verl_ext.eval.judging import JUDGE_VERSION, CachedJudge, judge_pin, prompt_digest
from verl_ext.eval.report import judge_summary
from verl_ext.eval.run import EvalRecord
from verl_ext.reward.judge import JudgeConfig

GT = {"target": "Paris", "aliases": ["Paname"]}


def _verdicts(judge: CachedJudge, calls: list[tuple[str, int]]):
    async def main():
        return [await judge.verdict("Capital of France?", GT, response, judge_pass) for response, judge_pass in calls]

    return asyncio.run(main())


def test_replies_are_cached_by_question_reference_response_and_pass(tmp_path, threaded_chat) -> None:
    threaded_chat.reply = lambda body: "reasoning: names the city\ncorrect: yes"
    config = JudgeConfig(url=threaded_chat.url, model="judge-a", retry_backoff_s=0.0)
    judge = CachedJudge(config, tmp_path / "cache.jsonl")
    verdicts = _verdicts(judge, [("It is Paris.", 0), ("It is Paris.", 0), ("It is Paris.", 1), ("Paname", 0)])
    judge.close()
    assert [v.source for v in verdicts] == ["llm"] * 4 and all(v.correct for v in verdicts)
    assert len(threaded_chat.seen) == 3  # the repeat of pass 0 came from the cache
    # a new process over the same cache asks nothing
    judge = CachedJudge(config, tmp_path / "cache.jsonl")
    again = _verdicts(judge, [("It is Paris.", 0), ("It is Paris.", 1), ("Paname", 0)])
    judge.close()
    assert len(threaded_chat.seen) == 3 and [v.reasoning for v in again] == ["names the city"] * 3
    # another judge model does not read the first one's replies
    other = CachedJudge(JudgeConfig(url=threaded_chat.url, model="judge-b"), tmp_path / "cache.jsonl")
    _verdicts(other, [("It is Paris.", 0)])
    other.close()
    assert len(threaded_chat.seen) == 4


def test_fallbacks_are_counted_by_reason_and_not_cached(tmp_path, threaded_chat, caplog) -> None:
    threaded_chat.reply = lambda body: 500 if body["messages"][1]["content"].endswith("Lyon") else "I think so."
    judge = CachedJudge(JudgeConfig(url=threaded_chat.url, model="j", max_retries=1, retry_backoff_s=0.0),
                        tmp_path / "cache.jsonl")
    malformed, unavailable = _verdicts(judge, [("Paris", 0), ("Lyon", 0)])
    judge.close()
    assert (malformed.source, malformed.correct) == ("rule_fallback", True)  # the rule matcher decided
    assert (unavailable.source, unavailable.correct) == ("rule_fallback", False)
    assert (tmp_path / "cache.jsonl").read_text() == ""
    records = [EvalRecord(key=str(i), status="ok", benchmark="b", item_id=str(i), run=0, protocol="neos",
                          question="q", ground_truth=GT, verdict=v.__dict__) for i, v in enumerate([malformed,
                                                                                                   unavailable])]
    with caplog.at_level(logging.WARNING):
        summary = judge_summary(records)
    assert "the rule matcher decided 2 of 2 LLM-judged responses" in caplog.text
    assert summary["by_source"] == {"rule_fallback": 2} and summary["fallback_rate"] == 1.0
    assert summary["fallbacks_by_reason"] == {"JudgeReplyError": 1, "ClientResponseError": 1}


def test_two_passes_agreement_and_pin() -> None:
    def record(i: int, first: bool, second: bool) -> EvalRecord:
        v = lambda c: {"correct": c, "source": "llm", "reasoning": "", "attempts": 1, "error": ""}  # noqa: E731
        return EvalRecord(key=str(i), status="ok", benchmark="b", item_id=str(i), run=0, protocol="neos",
                          question="q", ground_truth=GT, verdict=v(first), verdict_pass2=v(second))

    summary = judge_summary([record(0, True, True), record(1, False, False), record(2, True, False),
                             record(3, False, False)])
    assert summary["repeatability"] == {"pairs": 4, "agreement": 0.75}
    assert judge_pin(JudgeConfig()) == {"kind": "rule", "model": None, "prompt_sha256": prompt_digest(),
                                        "version": JUDGE_VERSION}
    assert len(prompt_digest()) == 12 and json.dumps(judge_pin(JudgeConfig(url="http://x", model="m")))


def test_fallbacks_are_flagged_at_the_answer_judges_threshold_by_default(caplog) -> None:
    """One setting for one event: the report flags rule fallbacks at the answer judge's ``max_fallback_share`` (the
    share training warns at), shipped as 10%; ``--judge-max-fallback-share`` overrides it for run and report."""
    from verl_ext.eval.__main__ import parser
    from verl_ext.eval.report import MAX_JUDGE_FALLBACK_SHARE

    assert MAX_JUDGE_FALLBACK_SHARE == JudgeConfig().max_fallback_share == 0.1
    assert parser().parse_args(["report", "--run", "r"]).judge_max_fallback_share == 0.1
    assert parser().parse_args(["report", "--run", "r", "--judge-max-fallback-share", "0.05"]) \
        .judge_max_fallback_share == 0.05

    def record(i: int, source: str) -> EvalRecord:
        verdict = {"correct": True, "source": source, "reasoning": "", "attempts": 1,
                   "error": "TimeoutError: " if source == "rule_fallback" else ""}
        return EvalRecord(key=str(i), status="ok", benchmark="b", item_id=str(i), run=0, protocol="neos",
                          question="q", ground_truth=GT, verdict=verdict)

    records = [record(i, "rule_fallback" if i < 2 else "llm") for i in range(25)]  # 2 of 25 = 8%
    with caplog.at_level(logging.WARNING):
        default = judge_summary(records)
    assert default["fallback_rate"] == 0.08 and default["max_fallback_share"] == 0.1 and caplog.text == ""
    with caplog.at_level(logging.WARNING):
        stricter = judge_summary(records, max_fallback_share=0.05)
    assert stricter["max_fallback_share"] == 0.05
    assert "2 of 25 LLM-judged responses (8% > max_fallback_share 5%" in caplog.text
