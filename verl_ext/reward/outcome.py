"""One episode's reward from its assistant turns, under each protocol (no verl import).

The verl reward managers (``managers.py``) and the rLLM adapters (``verl_ext.rllm``) both score through
:func:`score_turns`, so an episode gets the same reward whichever framework ran it.
Neos: binary correctness of the final turn's plain text. ModalSearcher (Sec. 3.3 and Appendix C.3 of its paper):
0.9·accuracy + 0.1·format; an episode ended by 3 consecutive agent errors gets 0.1, one ended by tool instability 0.
"""

from __future__ import annotations

from typing import Any

from verl_ext.reward.judge import AnswerJudge, Verdict
from verl_ext.reward.protocols import modalsearcher_answer, modalsearcher_format_ok, neos_final_text
from verl_ext.rollout.protocols import Protocol

ACC_WEIGHT, FORMAT_WEIGHT = 0.9, 0.1
AGENT_ERRORS_REWARD, TOOL_ERRORS_REWARD = 0.1, 0.0
_PRED_CHARS = 500  # enough to audit a verdict in logs without bloating the batch


async def score_turns(
    judge: AnswerJudge,
    protocol: Protocol,
    turns: list[str],
    *,
    question: str,
    ground_truth: Any,
    termination_reason: str = "",
) -> tuple[float, dict[str, Any]]:
    """``(reward, extra_info)`` of an episode whose assistant turns are ``turns`` (special tokens removed)."""
    if protocol == "neos":
        prediction = neos_final_text(turns)
        verdict = await judge.judge(question, ground_truth, prediction)
        return float(verdict.correct), {**AnswerJudge.extra_info(verdict), "pred": prediction[:_PRED_CHARS]}
    prediction = modalsearcher_answer(turns)
    fmt = float(modalsearcher_format_ok(turns))
    if termination_reason in ("agent_errors", "tool_errors"):
        # How the episode ended decides its reward: no judge call, and it does not count as correct.
        verdict = Verdict(correct=False, source="rule")
        score = AGENT_ERRORS_REWARD if termination_reason == "agent_errors" else TOOL_ERRORS_REWARD
    else:
        verdict = await judge.judge(question, ground_truth, prediction)
        score = ACC_WEIGHT * float(verdict.correct) + FORMAT_WEIGHT * fmt
    return score, {**AnswerJudge.extra_info(verdict), "fmt": fmt, "pred": prediction[:_PRED_CHARS]}
