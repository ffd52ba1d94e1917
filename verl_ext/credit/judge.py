"""LLM credit judge (Neos §3.4) behind an OpenAI-compatible endpoint: one failed candidate vs one verified reference.

A reply must parse as ``CreditAssessment`` and pass ``labels_from_assessment`` (listed span ids, Eq. 3's rules).
An unusable reply is sent back with the error for a bounded number of repairs; transport failures and timeouts are
retried within the same budget; after that the trajectory falls back to plain GRPO (``assessed=False``) with the
reason. Settings are the answer judge's ``JudgeConfig`` (same endpoint conventions). No verl import.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import aiohttp

from verl_ext.credit.labels import CreditLabels, labels_from_assessment, unassessed
from verl_ext.credit.prompt import REPAIR_PROMPT, credit_messages
from verl_ext.credit.schema import CreditAssessment
from verl_ext.reward.judge import JudgeConfig, JudgeReplyError, chat_completion
from verl_ext.rollout.record import TrajectoryRecord

Outcome = Literal["ok", "repaired", "fallback_invalid", "fallback_timeout", "fallback_http"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "repaired", "fallback_invalid", "fallback_timeout", "fallback_http")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_credit_reply(text: str, candidate: TrajectoryRecord, judge: str) -> CreditLabels:
    """Labels from a judge reply (optionally inside one ```json fence); ``ValueError`` says what to repair."""
    fenced = _FENCE.match(text)
    assessment = CreditAssessment.model_validate_json(fenced.group(1) if fenced else text)
    return labels_from_assessment(assessment, candidate.span_turns(), judge)


class CreditJudge:
    """One per process; ``max_concurrency`` bounds in-flight requests, ``timeout_s`` each request."""

    def __init__(self, config: JudgeConfig, max_observation_chars: int = 2000) -> None:
        if not config.url:
            raise ValueError("the credit judge needs judge.url (an OpenAI-compatible base URL)")
        self.config = config
        self.name = f"llm:{config.model}"
        self.max_observation_chars = max_observation_chars
        self.counters: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
        self._semaphore = asyncio.Semaphore(config.max_concurrency)

    async def assess(
        self, reference: TrajectoryRecord, candidate: TrajectoryRecord, session: aiohttp.ClientSession | None = None
    ) -> CreditLabels:
        """Labels for one failed ``candidate``; never raises for judge misbehaviour (falls back instead)."""
        if session is None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s)) as own:
                return await self.assess(reference, candidate, own)
        messages = credit_messages(reference, candidate, self.max_observation_chars)
        failure: Outcome = "fallback_http"
        async with self._semaphore:
            for attempt in range(self.config.max_retries + 1):
                if attempt and failure != "fallback_invalid":  # transport trouble: back off; a repair goes at once
                    await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
                try:
                    reply = await chat_completion(session, self.config, messages)
                except asyncio.TimeoutError:
                    failure = "fallback_timeout"
                    continue
                except (aiohttp.ClientError, JudgeReplyError):
                    failure = "fallback_http"
                    continue
                try:
                    labels = parse_credit_reply(reply, candidate, self.name)
                except ValueError as exc:  # pydantic's ValidationError is a ValueError
                    failure = "fallback_invalid"
                    error = str(exc)[:1500]
                    messages = [
                        *messages,
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": REPAIR_PROMPT.format(error=error)},
                    ]
                    continue
                self.counters["ok" if attempt == 0 else "repaired"] += 1
                return labels
        self.counters[failure] += 1
        return unassessed(self.name, len(candidate.turns), failure)

    async def assess_group(
        self, reference: TrajectoryRecord, failures: Sequence[TrajectoryRecord]
    ) -> list[CreditLabels]:
        """Labels for every failure of one group against its reference, requested concurrently, in input order."""
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return list(await asyncio.gather(*(self.assess(reference, f, session) for f in failures)))
