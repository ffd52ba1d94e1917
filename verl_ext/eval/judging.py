"""The answer judge of an evaluation: the project's LLM judge with a reply cache, pinned, with repeatability.

The rule is both papers' (the response holds an answer consistent with the reference, anywhere, in any form;
``correct: yes|no`` + reasoning), asked through the project's one OpenAI-compatible client by
``verl_ext.reward.judge.AnswerJudge``, which falls back to the rule matcher (``verl_ext.reward.answers``) when the
judge keeps failing. As ModalSearcher's evaluation does, only the final answer is judged, not the trajectory.

- Pinned: judge model, the prompt's digest (of ``judge_messages`` with placeholders) and ``JUDGE_VERSION`` go into
  ``run.json`` (the URL too, as an endpoint); a restart with another judge is refused, so one results file never
  mixes judges.
- Cached: LLM replies are kept in ``judge_cache.jsonl`` by (model, prompt digest, pass, question, reference,
  response); a rerun or a second report asks nothing twice. Fallback verdicts are not cached (the next run asks).
- Repeatability: with two passes every response is judged again under a separate cache key; the report gives the
  agreement of the two passes (ModalSearcher App. D.2 repeats the judge on fixed answers).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from neos_core.results import ResultLog
from verl_ext.reward.answers import primary_target
from verl_ext.reward.judge import AnswerJudge, JudgeConfig, Verdict, judge_messages

JUDGE_VERSION = "neos-answer-judge/1"  # bump when the judge's parsing or fallback rule changes


def prompt_digest() -> str:
    """sha256 (12 hex) of the judge prompt with placeholders: changes whenever its wording does."""
    text = json.dumps(judge_messages("{question}", "{reference}", "{response}"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def judge_pin(config: JudgeConfig) -> dict[str, Any]:
    """What decides the verdicts of a run: recorded in ``run.json`` and in the report."""
    return {"kind": "llm" if config.url else "rule", "model": config.model if config.url else None,
            "prompt_sha256": prompt_digest(), "version": JUDGE_VERSION}


class CachedReply(BaseModel):
    key: str
    status: Literal["ok"] = "ok"
    correct: bool
    reasoning: str
    attempts: int


def fallback_reason(verdict: Verdict) -> str:
    """The class of the last failure (``JudgeReplyError``, ``ClientResponseError``, ``TimeoutError``, ...)."""
    return verdict.error.split(":", 1)[0] or "unknown"


class CachedJudge:
    def __init__(self, config: JudgeConfig, cache_path: Path) -> None:
        self.config = config
        self.judge = AnswerJudge(config)
        self.log = ResultLog(cache_path, CachedReply)
        self.cache = {r.key: r for r in self.log.outcomes()}
        self._digest = prompt_digest()
        self._pending: dict[str, asyncio.Future[Verdict]] = {}

    def _key(self, question: str, ground_truth: Any, response: str, judge_pass: int) -> str:
        text = json.dumps([self.config.model, self._digest, judge_pass, question, primary_target(ground_truth),
                           response], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    async def verdict(self, question: str, ground_truth: Any, response: str, judge_pass: int = 0) -> Verdict:
        """The verdict of pass ``judge_pass`` (0 or 1), from the cache when an LLM reply is there."""
        if not self.config.url or not response.strip():
            return await self.judge.judge(question, ground_truth, response)
        key = self._key(question, ground_truth, response, judge_pass)
        if key in self.cache:
            hit = self.cache[key]
            return Verdict(correct=hit.correct, source="llm", reasoning=hit.reasoning, attempts=0)
        if key in self._pending:  # the same (question, reference, response) in flight: ask once
            return await asyncio.shield(self._pending[key])
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            verdict = await self.judge.judge(question, ground_truth, response)
            if verdict.source == "llm":
                entry = CachedReply(key=key, correct=verdict.correct, reasoning=verdict.reasoning,
                                    attempts=verdict.attempts)
                self.log.append(entry)
                self.cache[key] = entry
            future.set_result(verdict)
            return verdict
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            del self._pending[key]

    def close(self) -> None:
        self.log.close()
