"""A model-backed MEI: an OpenAI-compatible chat-completions endpoint (vLLM or SGLang serving the MEI checkpoint).

Each call tries up to ``1 + max_retries`` requests. A response is accepted when its content parses as JSON and
validates against the strict schema plus :mod:`.prompts`' checks (``valid``, or ``retried`` after a failed attempt);
content that fails is passed through json-repair once and accepted if the repaired object validates (``repaired``);
otherwise the next attempt is made. Timeouts and HTTP/transport errors consume an attempt too. When all attempts
fail the extractive evidence is returned (``fallback``), so a tool never fails because its MEI did.
Attempt-level events are counted as ``timeout``, ``http_error`` and ``invalid``.

Versions: the MEI checkpoint can be swapped behind the endpoint between rollout rounds (Neos §3.5), so the version
recorded with a call is the one its server reported in the response's ``model`` field (our MEI server answers its
checkpoint version there), from the last response the call received; the configured ``version`` stands in only until
a server has reported one, or for servers that answer without a ``model`` field.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import aiohttp
import json_repair
from pydantic import BaseModel, ValidationError

from . import prompts
from .extractive import ExtractiveMEI
from .interface import Produced
from .schema import ImageSearchEvidence, ImageView, PageView, ReverseImageEvidence, WebVisitEvidence

M = TypeVar("M", bound=BaseModel)


class _AttemptFailed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _parse(content: str, model: type[M], check: Callable[[M], str | None], *, repair: bool) -> M | None:
    try:
        obj: Any = json_repair.loads(content) if repair else json.loads(content)
        if not isinstance(obj, dict):
            return None
        ev = model.model_validate(obj)
    except (ValueError, ValidationError):
        return None
    return ev if check(ev) is None else None


def read_answer(
    content: str, model: type[M], check: Callable[[M], str | None]
) -> tuple[M, Literal["valid", "repaired"]] | None:
    """The evidence in one answer of the model, as a call accepts it: parsed as is (``valid``), else after json-repair
    (``repaired``), each time validated by ``model`` and ``check``; ``None``: the attempt is invalid."""
    ev = _parse(content, model, check, repair=False)
    if ev is not None:
        return ev, "valid"
    ev = _parse(content, model, check, repair=True)
    return None if ev is None else (ev, "repaired")


def logged_answer_check(method: str, summary: dict[str, Any]) -> tuple[type[BaseModel], Callable[[Any], str | None]]:
    """The schema and tool-side check an answer to a logged call must pass, rebuilt from the call's input summary
    (:class:`~tool_server.mei.log.MEIRecord` ``input``): what :class:`ModelMEI` applied when the call was made. The
    web-visit check reads only the page's image URLs, which the summary keeps (its text is a hash)."""
    if method == "web_visit":
        page = PageView(url=summary["page"]["url"], title=summary["page"]["title"], text="",
                        images=[ImageView(url=im["url"]) for im in summary["page"]["images"]])
        return WebVisitEvidence, lambda e: prompts.check_web_visit(e, page)
    schemas: dict[str, type[BaseModel]] = {"image_search": ImageSearchEvidence,
                                           "reverse_image_search": ReverseImageEvidence}
    if method not in schemas:
        raise ValueError(f"no MEI method {method!r} (web_visit, image_search, reverse_image_search)")
    n = len(summary["candidates"])
    return schemas[method], lambda e: prompts.check_candidates(e, n)


class ModelMEI:
    """Producer backed by a served model; wrapped by :class:`tool_server.mei.interface.LoggedInterface`."""

    def __init__(
        self,
        *,
        endpoint: str,
        model: str,
        version: str,
        fallback: ExtractiveMEI,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        max_tokens: int = 2048,
        max_page_chars: int = 60_000,
        api_key: str | None = None,
        json_mode: bool = True,
    ) -> None:
        if max_retries < 0 or timeout_s <= 0:
            raise ValueError(f"need max_retries >= 0 and timeout_s > 0, got {max_retries}, {timeout_s}")
        self.version = version
        self._url = endpoint.rstrip("/") + "/chat/completions"
        self._model = model
        self._fallback = fallback
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_retries = max_retries
        self._backoff = retry_backoff_s
        self._max_tokens = max_tokens
        self._max_page_chars = max_page_chars
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._json_mode = json_mode
        self._session: aiohttp.ClientSession | None = None
        self._events: Counter[str] = Counter()

    async def _complete(self, messages: prompts.Messages) -> tuple[str, str | None]:
        """The answer's content and the version (``model`` field) the server reported, if any."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        body: dict[str, Any] = {"model": self._model, "messages": messages, "temperature": 0.0,
                                "max_tokens": self._max_tokens}
        if self._json_mode:
            body["response_format"] = {"type": "json_object"}
        try:
            async with self._session.post(self._url, json=body) as resp:
                if resp.status != 200:
                    raise _AttemptFailed("http_error", f"HTTP {resp.status}: {(await resp.text())[:200]}")
                payload = await resp.json(content_type=None)
        except TimeoutError as e:
            raise _AttemptFailed("timeout", f"no answer within {self._timeout.total} s") from e
        except (aiohttp.ClientError, ValueError) as e:
            raise _AttemptFailed("http_error", f"{type(e).__name__}: {e}") from e
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise _AttemptFailed("http_error", f"not a chat-completions response: {str(payload)[:200]}") from e
        if not isinstance(content, str):
            raise _AttemptFailed("http_error", "message content is not a string")
        served = payload.get("model") if isinstance(payload, dict) else None
        if isinstance(served, str) and served:
            self.version = served
            return content, served
        return content, None

    async def _ask(
        self, messages: prompts.Messages, model: type[M], check: Callable[[M], str | None]
    ) -> tuple[M | None, str, list[str], str | None]:
        """``(evidence or None, outcome, attempt log, version the last answering server reported)``."""
        attempts: list[str] = []
        served: str | None = None
        for attempt in range(1 + self._max_retries):
            if attempt and self._backoff:
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
            try:
                content, reported = await self._complete(messages)
            except _AttemptFailed as e:
                self._events[e.kind] += 1
                attempts.append(str(e))
                continue
            served = reported or served
            read = read_answer(content, model, check)
            if read is not None:
                ev, how = read
                attempts.append(how)
                if how == "valid":
                    return ev, "valid" if attempt == 0 else "retried", attempts, served
                return ev, "repaired", attempts, served
            self._events["invalid"] += 1
            attempts.append(f"invalid: {content[:120]!r}")
        return None, "fallback", attempts, served

    async def web_visit(self, *, goal: str, page: PageView) -> Produced[WebVisitEvidence]:
        messages = prompts.web_visit_messages(goal, page, max_page_chars=self._max_page_chars)
        check = lambda e: prompts.check_web_visit(e, page)  # noqa: E731
        ev, outcome, attempts, served = await self._ask(messages, WebVisitEvidence, check)
        if ev is None:
            ev = await self._fallback.web_visit(goal=goal, page=page)
        return Produced(ev, outcome, attempts, messages, served)

    async def image_search(
        self, *, goal: str, query: str, candidates: list[ImageView]
    ) -> Produced[ImageSearchEvidence]:
        messages = prompts.image_search_messages(goal, query, candidates)
        check = lambda e: prompts.check_candidates(e, len(candidates))  # noqa: E731
        ev, outcome, attempts, served = await self._ask(messages, ImageSearchEvidence, check)
        if ev is None:
            ev = await self._fallback.image_search(goal=goal, query=query, candidates=candidates)
        return Produced(ev, outcome, attempts, messages, served)

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView]
    ) -> Produced[ReverseImageEvidence]:
        messages = prompts.reverse_image_messages(goal, query_image, candidates)
        check = lambda e: prompts.check_candidates(e, len(candidates))  # noqa: E731
        ev, outcome, attempts, served = await self._ask(messages, ReverseImageEvidence, check)
        if ev is None:
            ev = await self._fallback.reverse_image_search(goal=goal, query_image=query_image, candidates=candidates)
        return Produced(ev, outcome, attempts, messages, served)

    def counters(self) -> dict[str, int]:
        return {"timeout": self._events["timeout"], "http_error": self._events["http_error"],
                "invalid": self._events["invalid"], **self._fallback.counters()}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
