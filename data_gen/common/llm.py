"""Strict-JSON calls to an OpenAI-compatible model for the data-generation steps that can take one (Neos' rewriter
and blind observer, ModalSearch's question writer and backward rewriter), through the project's one chat client
(``verl_ext.reward.judge.chat_completion``, configured by URL and model name; the model-backed teacher uses its
``chat_message``, which offers tools), and :func:`image_part`: pixels as a data URL.

Those steps run inside synchronous synthesizers, so :class:`SyncChat` owns a private event loop on a daemon thread
and blocks the caller until the reply is in. Every step follows one contract: the reply must be JSON that fits a
pydantic model and passes the step's own check; anything else (a transport failure after ``1 + max_retries``
attempts, a body that is not a completion, a reply that fails validation or the check) returns None, is counted in
the step's :class:`Usage` under its reason, and the step uses its offline default instead: a flaky or confused model
never stalls or crashes a pipeline.

Because callers block, the model server must not run on the caller's event loop (tests serve it from a thread).
"""

from __future__ import annotations

import asyncio
import mimetypes
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, Field, ValidationError

from verl_ext.reward.judge import JudgeConfig, JudgeReplyError, chat_completion, png_part

M = TypeVar("M", bound=BaseModel)


@dataclass
class Usage:
    """Calls a step made and why it fell back to its offline default (reason -> count)."""

    calls: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)

    def report(self) -> dict[str, Any]:
        return {"calls": self.calls, "fallbacks": sum(self.fallbacks.values()), "by_reason": dict(self.fallbacks)}


def parse_reply(reply: str, schema: type[M]) -> M:
    """``reply`` (optionally in a ```json fence) validated against ``schema``; ``JudgeReplyError`` otherwise."""
    body = reply.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        raise JudgeReplyError(f"reply does not fit {schema.__name__}: {reply[:120]!r}") from exc


class StrictReply(BaseModel, extra="forbid", strict=True):
    """Base of every reply schema: no extra keys, no type coercion."""


class QuestionReply(StrictReply):
    """The reply of every step that writes or rewords a question."""

    question: str = Field(min_length=1, max_length=2000)


def image_part(path: Path) -> dict[str, Any]:
    """An image file as a chat message part: a data URL, so the model gets the pixels and not the file's name."""
    return png_part(path.read_bytes(), mimetypes.guess_type(path.name)[0] or "image/png")


class SyncChat:
    """Blocking strict-JSON asks of one OpenAI-compatible endpoint (see the module docstring); close when done."""

    def __init__(self, config: JudgeConfig) -> None:
        if not config.url:
            raise ValueError("a model step needs a chat-completions base URL")
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="data-gen-chat", daemon=True)
        self._thread.start()
        self._session = self._run(self._open())

    async def _open(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def ask(self, messages: list[dict[str, Any]], schema: type[M], usage: Usage,
            check: Callable[[M], str | None] = lambda _: None) -> M | None:
        """The validated reply, or None (counted in ``usage``) when the model cannot be used for this item.

        ``check`` returns a reason (a short key such as ``"coverage"``) when the parsed reply is unusable.
        """
        for attempt in range(1 + self.config.max_retries):
            usage.calls += 1
            try:
                text = self._run(self._complete(messages, attempt))
            except (aiohttp.ClientError, TimeoutError):
                continue
            except ValueError:  # JudgeReplyError, or a body that is not JSON at all
                usage.fallbacks["not_a_completion"] += 1
                return None
            try:
                reply = parse_reply(text, schema)
            except JudgeReplyError:
                usage.fallbacks["invalid"] += 1
                return None
            reason = check(reply)
            if reason is not None:
                usage.fallbacks[reason] += 1
                return None
            return reply
        usage.fallbacks["transport"] += 1
        return None

    async def _complete(self, messages: list[dict[str, Any]], attempt: int) -> str:
        if attempt:
            await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
        return await chat_completion(self._session, self.config, messages)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._session.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SyncChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
