"""LLM credit judge (Neos §3.4, App. F Figs. 18-20) behind an OpenAI-compatible endpoint: one failed candidate vs one
verified success reference.

A reply must parse as ``CreditAssessment`` and pass ``labels_from_assessment`` (listed span ids, Eq. 3's rules). Every
malformed reply is a failed attempt out of one budget of ``1 + max_retries``: a reply that is not valid JSON, is cut
off at ``max_tokens`` or breaks the schema is sent back with the error for a repair; a 200 body that is not a chat
completion, a transport failure or a timeout is retried as it was. After the last attempt the trajectory falls back to
plain GRPO (``assessed=False``) with the last attempt's reason (:data:`FALLBACK_REASONS`); ``assess`` never raises for
judge misbehaviour. Settings are :class:`CreditJudgeConfig`. No verl import.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import aiohttp

from verl_ext.credit.labels import CreditLabels, labels_from_assessment, unassessed
from verl_ext.credit.prompt import REPAIR_PROMPT, TRUNCATED_ERROR, credit_messages
from verl_ext.credit.schema import CreditAssessment
from verl_ext.reward.judge import JudgeConfig, JudgeReplyError, chat_choice
from verl_ext.rollout.record import TrajectoryRecord

log = logging.getLogger(__name__)

# Output budget of one assessment (and of each repair), in tokens. Measured with the Qwen3 tokenizer on v2
# assessments of 20-50-turn failures (bench/bench_judge_budget.py, docs/credit_judge.md): the longest realistic one,
# a 50-turn failure with every turn labelled and pretty-printed, is ~4.9k tokens; 8,192 leaves ~1.7x headroom.
CREDIT_MAX_TOKENS = 8192

FallbackReason = Literal["invalid", "truncated", "bad_body", "timeout", "http", "error"]
# invalid: not JSON / schema or span-id rules broken; truncated: cut off at max_tokens (finish_reason "length");
# bad_body: a 200 whose body is not a chat completion; timeout / http: transport; error: the judge raised otherwise.
FALLBACK_REASONS: tuple[FallbackReason, ...] = ("invalid", "truncated", "bad_body", "timeout", "http", "error")
OUTCOMES: tuple[str, ...] = ("ok", "repaired", *(f"fallback_{r}" for r in FALLBACK_REASONS))
_REPAIRABLE = ("invalid", "truncated")  # the reply came back: repair at once; otherwise back off first
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class CreditJudgeConfig(JudgeConfig):
    """``JudgeConfig`` (endpoint, retries, concurrency) with the credit judge's own defaults, under
    ``actor_rollout_ref.rollout.custom.neos_credit_judge`` (``kind: llm``)."""

    max_tokens: int = CREDIT_MAX_TOKENS  # per attempt, repairs included: see CREDIT_MAX_TOKENS
    timeout_s: float = 300.0  # a multi-thousand-token reply takes minutes on a busy server, not seconds
    max_observation_chars: int = 2000  # per tool observation shown to the judge
    images: bool = True  # the candidate's images inline as data URLs (Neos App. F Fig. 19); false: text-only judges


def parse_credit_reply(text: str, candidate: TrajectoryRecord, judge: str) -> CreditLabels:
    """Labels from a judge reply (optionally inside one ```json fence); ``ValueError`` says what to repair."""
    fenced = _FENCE.match(text)
    assessment = CreditAssessment.model_validate_json(fenced.group(1) if fenced else text)
    return labels_from_assessment(assessment, candidate.span_turns(), judge)


class CreditJudge:
    """One per process; ``max_concurrency`` bounds in-flight requests, ``timeout_s`` each request."""

    def __init__(self, config: CreditJudgeConfig) -> None:
        if not config.url:
            raise ValueError("the credit judge needs judge.url (an OpenAI-compatible base URL)")
        self.config = config
        self.name = f"llm:{config.model}"
        self.counters: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
        self._semaphore = asyncio.Semaphore(config.max_concurrency)

    async def assess(
        self,
        reference: TrajectoryRecord,
        candidate: TrajectoryRecord,
        session: aiohttp.ClientSession | None = None,
        images: Mapping[str, str] | None = None,
    ) -> CreditLabels:
        """Labels for one failed ``candidate``; never raises for judge misbehaviour (falls back instead).

        ``images``: the candidate's register refs -> data URLs of the pixels the agent saw (``credit_messages``);
        not sent when ``config.images`` is off."""
        if session is None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s)) as own:
                return await self.assess(reference, candidate, own, images)
        shown = images if self.config.images else None
        messages = credit_messages(reference, candidate, self.config.max_observation_chars, shown)
        failure: FallbackReason = "http"
        async with self._semaphore:
            for attempt in range(self.config.max_retries + 1):
                if attempt and failure not in _REPAIRABLE:
                    await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
                try:
                    choice, _ = await chat_choice(session, self.config, messages)
                except asyncio.TimeoutError:
                    failure = "timeout"
                    continue
                except aiohttp.ClientError:
                    failure = "http"
                    continue
                except JudgeReplyError:
                    failure = "bad_body"
                    continue
                content = choice["message"].get("content")
                reply = content if isinstance(content, str) else ""
                try:
                    labels = parse_credit_reply(reply, candidate, self.name)
                except ValueError as exc:  # pydantic's ValidationError is a ValueError
                    truncated = choice.get("finish_reason") == "length"
                    failure = "truncated" if truncated else "invalid"
                    error = TRUNCATED_ERROR.format(max_tokens=self.config.max_tokens) if truncated else str(exc)
                    messages = [
                        *messages,
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": REPAIR_PROMPT.format(error=error[:1500])},
                    ]
                    continue
                self.counters["ok" if attempt == 0 else "repaired"] += 1
                return labels
        return self._fallback(candidate, failure)

    def _fallback(self, candidate: TrajectoryRecord, reason: FallbackReason) -> CreditLabels:
        self.counters[f"fallback_{reason}"] += 1
        return unassessed(self.name, len(candidate.turns), reason)

    async def assess_group(
        self,
        reference: TrajectoryRecord,
        failures: Sequence[TrajectoryRecord],
        images: Sequence[Mapping[str, str] | None] | None = None,
    ) -> list[CreditLabels]:
        """Labels for every failure of one group against its reference, requested concurrently, in input order;
        ``images[i]`` are failure i's (see ``assess``).

        A request that raises anyway (a bug, not judge misbehaviour) is logged and falls back for its failure only.
        """
        images = list(images) if images is not None else [None] * len(failures)
        if len(images) != len(failures):
            raise ValueError(f"got images for {len(images)} of {len(failures)} failures")
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            results = await asyncio.gather(
                *(self.assess(reference, f, session, im) for f, im in zip(failures, images)), return_exceptions=True
            )
        labels = []
        for failure, result in zip(failures, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                log.error("credit judge raised; the failure falls back to GRPO", exc_info=result)
                result = self._fallback(failure, "error")
            labels.append(result)
        return labels
