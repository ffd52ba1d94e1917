"""Answer correctness by an LLM judge (the papers' evaluation rule: Neos §4 and ModalSearcher Appendix C) behind an
OpenAI-compatible endpoint, with a rule fallback.

The judge decides whether the response contains, anywhere and in any wording, an answer consistent with the
reference. A judge that is not configured, or that keeps failing (transport errors, timeouts, replies without
exactly one ``correct: yes|no`` line), never stalls or zeroes training: the normalised-answer matcher of
``answers`` decides instead, and the verdict records which path decided. A fallback is never silent: every verdict
says ``judge_fallback`` in the sample's ``reward_extra_info``, and each process warns once per window of
``fallback_window`` judged answers in which more than ``max_fallback_share`` fell back to the rule. No verl import.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

import aiohttp

from verl_ext.reward.answers import answer_matches, primary_target

JudgeSource = Literal["llm", "rule", "rule_fallback"]
log = logging.getLogger(__name__)

_SYSTEM = (
    "You grade answers to research questions. You are given a question, the reference answer and an agent's "
    "response. Decide whether the response states an answer that agrees with the reference. The answer may "
    "appear anywhere in the response and in any wording, format, language or unit, as long as it denotes the "
    "same thing. It does not agree if it names a different or less specific entity, gives a different value, "
    "or hedges between several candidates. Ignore style, length and how the answer was reached.\n"
    "Reply in exactly two lines:\n"
    "reasoning: <one or two sentences>\n"
    "correct: yes   (or: correct: no)"
)
_VERDICT = re.compile(r"^\s*\**correct\**\s*:\s*\**\s*([a-z]+)\s*\**\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
_REASONING = re.compile(r"^\s*\**reasoning\**\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)


class JudgeReplyError(ValueError):
    """The judge answered, but not in the required format (counts as a failed attempt)."""


@dataclass(frozen=True)
class JudgeConfig:
    """Settings under ``reward.reward_kwargs.judge``; with no ``url`` the rule matcher decides alone."""

    url: str | None = None  # base URL of an OpenAI-compatible server, e.g. http://host:8000/v1
    model: str = "judge"
    api_key_env: str = "NEOS_JUDGE_API_KEY"  # name of the environment variable holding the key, if any
    timeout_s: float = 60.0
    max_concurrency: int = 64
    max_retries: int = 2  # attempts = 1 + max_retries
    retry_backoff_s: float = 1.0  # doubled after each failed attempt
    max_tokens: int = 256
    # Warn when more than this share of a window's judged answers fell back to the rule. An LLM judge at
    # temperature 0 with two retries fails on well under 1% of answers; 10% means an outage or a misconfiguration,
    # and the reward has then silently become the string rule for those answers.
    max_fallback_share: float = 0.1
    fallback_window: int = 64  # judged answers (those sent to the LLM) per check, per process

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> JudgeConfig:
        """Build from a (possibly OmegaConf) mapping, rejecting unknown keys so a typo cannot disable the judge."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown judge settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)


@dataclass(frozen=True)
class Verdict:
    correct: bool
    source: JudgeSource
    reasoning: str = ""
    attempts: int = 0  # requests sent to the LLM judge
    error: str = ""  # last failure when the rule had to fall back


def judge_messages(question: str, reference: str, response: str) -> list[dict[str, str]]:
    user = f"[Question]\n{question}\n\n[Reference answer]\n{reference}\n\n[Response]\n{response}"
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def parse_judge_reply(text: str) -> tuple[bool, str]:
    """Strictly parse ``correct: yes|no`` (exactly one verdict line) and the reasoning line, if any."""
    verdicts = [v.lower() for v in _VERDICT.findall(text)]
    if len(verdicts) != 1 or verdicts[0] not in ("yes", "no"):
        raise JudgeReplyError(f"expected one 'correct: yes|no' line, got {text[:200]!r}")
    reasoning = _REASONING.search(text)
    return verdicts[0] == "yes", (reasoning.group(1).strip() if reasoning else "")


async def chat_choice(
    session: aiohttp.ClientSession,
    config: JudgeConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    sampling: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first choice (``message`` and ``finish_reason``) of one chat-completions call and the server's ``usage``
    (token counts; ``{}`` when it sends none). Greedy unless ``sampling`` (``temperature``, ``top_p``, ``seed``, ...)
    says otherwise, at most ``max_tokens``, offering ``tools`` (OpenAI function schemas) when given, the API key from
    ``api_key_env``; raises ``JudgeReplyError`` for a 200 body that is not a chat completion (not JSON, no choices,
    no message). The project's one client: every model step uses it."""
    payload: dict[str, Any] = {
        "model": config.model, "messages": messages, "temperature": 0.0, "max_tokens": config.max_tokens,
        **(sampling or {}),
    }
    if tools:
        payload["tools"] = tools
    key = os.environ.get(config.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with session.post(f"{config.url.rstrip('/')}/chat/completions", json=payload, headers=headers) as resp:
        resp.raise_for_status()
        text = await resp.text(errors="replace")
    try:
        body = json.loads(text)
        choice = body["choices"][0]
    except ValueError as exc:  # json.JSONDecodeError
        raise JudgeReplyError(f"body is not JSON: {text[:200]!r}") from exc
    except (KeyError, IndexError, TypeError) as exc:
        raise JudgeReplyError(f"not a chat completion: {text[:200]!r}") from exc
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise JudgeReplyError(f"not a chat message: {str(choice)[:200]!r}")
    usage = body.get("usage")
    return choice, usage if isinstance(usage, dict) else {}


def png_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    """Image bytes as a chat message part (a data URL)."""
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


async def chat_reply(
    session: aiohttp.ClientSession,
    config: JudgeConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    sampling: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The assistant message of :func:`chat_choice` and the server's ``usage``: an evaluated policy samples as its
    paper's inference configuration says and reports its token counts."""
    choice, usage = await chat_choice(session, config, messages, tools, sampling)
    return choice["message"], usage


async def chat_message(
    session: aiohttp.ClientSession,
    config: JudgeConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The assistant message (``content`` and any native ``tool_calls``) of :func:`chat_choice`."""
    return (await chat_choice(session, config, messages, tools))[0]["message"]


async def chat_completion(session: aiohttp.ClientSession, config: JudgeConfig, messages: list[dict[str, Any]]) -> str:
    """The assistant text of one chat-completions call (no tools offered)."""
    message = await chat_message(session, config, messages)
    if "content" not in message:
        raise JudgeReplyError(f"not a chat completion: {str(message)[:200]!r}")
    return str(message["content"])


class FallbackWindow:
    """Counts LLM verdicts and rule fallbacks over consecutive windows of ``size`` judged answers; at the end of a
    window whose fallback share exceeds ``max_share`` it returns the warning to log (the last error included)."""

    def __init__(self, size: int, max_share: float) -> None:
        if size < 1 or not 0 <= max_share <= 1:
            raise ValueError(f"fallback_window must be >= 1 and max_fallback_share in [0, 1], got {size}, {max_share}")
        self.size, self.max_share = size, max_share
        self.judged = self.fallbacks = 0
        self.total_judged = self.total_fallbacks = 0
        self.last_error = ""

    def add(self, verdict: Verdict) -> str | None:
        if verdict.source == "rule":
            return None  # no LLM configured, or nothing to judge: a choice, not a fallback
        fell_back = verdict.source == "rule_fallback"
        self.judged += 1
        self.total_judged += 1
        if fell_back:
            self.fallbacks += 1
            self.total_fallbacks += 1
            self.last_error = verdict.error
        if self.judged < self.size:
            return None
        share, fallbacks = self.fallbacks / self.judged, self.fallbacks
        self.judged = self.fallbacks = 0
        if share <= self.max_share:
            return None
        return (
            f"answer judge: {fallbacks} of the last {self.size} answers were scored by the string rule because the "
            f"LLM judge failed ({share:.0%} > max_fallback_share {self.max_share:.0%}; last error: {self.last_error}). "
            "Check reward.reward_kwargs.judge (url, model, timeout_s) and the judge_fallback reward field"
        )


class AnswerJudge:
    """One per reward manager; bounds in-flight judge requests per process with a semaphore."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self.fallbacks = FallbackWindow(config.fallback_window, config.max_fallback_share)

    async def judge(self, question: str, ground_truth: Any, response: str) -> Verdict:
        """Verdict for ``response``; an empty response is wrong without asking anyone. Fallbacks are counted."""
        verdict = await self._judge(question, ground_truth, response)
        warning = self.fallbacks.add(verdict)
        if warning:
            log.warning(warning)
        return verdict

    async def _ask(self, session: aiohttp.ClientSession, messages: list[dict[str, str]]) -> tuple[bool, str]:
        return parse_judge_reply(await chat_completion(session, self.config, messages))

    async def _judge(self, question: str, ground_truth: Any, response: str) -> Verdict:
        rule = answer_matches(response, ground_truth) if response.strip() else False
        if not self.config.url or not response.strip():
            return Verdict(correct=rule, source="rule")
        messages = judge_messages(question, primary_target(ground_truth), response)
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        error = ""
        attempts = 0
        async with self._semaphore, aiohttp.ClientSession(timeout=timeout) as session:
            for attempt in range(self.config.max_retries + 1):
                if attempt:
                    await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
                attempts += 1
                try:
                    correct, reasoning = await self._ask(session, messages)
                    return Verdict(correct=correct, source="llm", reasoning=reasoning, attempts=attempts)
                except (
                    aiohttp.ClientError,
                    asyncio.TimeoutError,
                    ValueError,
                ) as exc:  # JudgeReplyError is a ValueError
                    error = f"{type(exc).__name__}: {exc}"[:300]
        return Verdict(correct=rule, source="rule_fallback", attempts=attempts, error=error)

    @staticmethod
    def extra_info(verdict: Verdict) -> dict[str, Any]:
        """Flat per-sample fields; every sample gets the same keys because verl stacks them into arrays."""
        return {
            "acc": float(verdict.correct),
            "judge": verdict.source,
            "judge_fallback": float(verdict.source == "rule_fallback"),
            "judge_attempts": verdict.attempts,
            "judge_reasoning": verdict.reasoning,
            "judge_error": verdict.error,
        }
