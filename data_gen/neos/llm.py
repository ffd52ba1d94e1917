"""Neos steps with a model: probes 1 and 3, the rewriter and the blind observer.

Probe 1 with a model (Neos App. A, step 7, text-only answering): an LLM answers the question closed-book, no tools and
no images, through the project's one OpenAI-compatible chat client (``verl_ext.reward.judge.chat_completion``,
configured by URL and model name). A question it answers correctly gives its answer away in text and is rejected,
as the programmatic probe 1 (the answer's name in the question) rejects it; the pipeline runs both.

Its reply is matched with the reward's rule matcher (``answer_matches``, aliases included). A transport failure or a
body that is not a chat completion, after ``1 + max_retries`` attempts, is an infrastructure failure
(:class:`ProbeUnavailable`): the pipeline records the candidate as an error, excluded from every rate and retried on
restart, never accepted unprobed. Probe 3 with a model (entry-image VQA) works the same way, a VLM answering from
the question and the entry images alone (data URLs), after the programmatic probe 3.

The rewriter (step 6) and the blind observer (step 5) run inside the synchronous synthesizer through
:class:`data_gen.common.llm.SyncChat`; a reply they cannot use (after the client's retries, for transport failures)
falls back to the offline step for that item (template text, palette/OCR description) and is counted: no task is
rejected or left unfinished because of the model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Annotated

import aiohttp
from pydantic import Field

from data_gen.common.llm import QuestionReply, StrictReply, SyncChat, Usage, image_part
from data_gen.neos.observer import COLOURS, IMAGE_KINDS, MAX_COLOURS, Description, Observer, unnamed, words_of
from data_gen.neos.verbalize import Verbalization
from neos_core.neos_tasks import Task
from verl_ext.reward.answers import answer_matches
from verl_ext.reward.judge import JudgeConfig, JudgeReplyError, chat_completion

_SYSTEM = (
    "Answer the question from your own knowledge; you cannot search and you cannot see any image it mentions. "
    "Reply with the answer's name only, or with your best guess if you are unsure."
)


class ProbeUnavailable(Exception):
    """The probe's model could not be asked (transport failure or no completion): an infrastructure failure."""


class LLMTextOnlyProbe:
    name = "llm_text_only_answer"

    def __init__(self, config: JudgeConfig, session: aiohttp.ClientSession) -> None:
        if not config.url:
            raise ValueError("a model probe needs a chat-completions base URL")
        self.config = config
        self.session = session
        self.calls = 0

    def messages(self, task: Task) -> list[dict]:
        return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": task.question}]

    async def solves(self, task: Task) -> bool:
        """Whether the model's answer (to :meth:`messages`) matches the task's answer or an alias."""
        messages = self.messages(task)
        error = ""
        for attempt in range(1 + self.config.max_retries):
            if attempt:
                await asyncio.sleep(self.config.retry_backoff_s * 2 ** (attempt - 1))
            self.calls += 1
            try:
                reply = await chat_completion(self.session, self.config, messages)
            except (aiohttp.ClientError, TimeoutError, JudgeReplyError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                continue
            return answer_matches(reply, task.ground_truth())
        raise ProbeUnavailable(f"{self.name} ({self.config.model}): {error}")


_VQA = (
    "Answer the question from the image(s) you are shown and your own knowledge; you cannot search. "
    "Reply with the answer's name only, or with your best guess if you are unsure."
)


class VLMEntryImageProbe(LLMTextOnlyProbe):
    """Probe 3 with a model: the question and the entry images (``image_path(image_id)``), nothing else."""

    name = "vlm_entry_image_answer"

    def __init__(self, config: JudgeConfig, session: aiohttp.ClientSession,
                 image_path: Callable[[str], Path]) -> None:
        super().__init__(config, session)
        self.image_path = image_path

    def messages(self, task: Task) -> list[dict]:
        images = [image_part(self.image_path(e.image_id)) for e in task.entry_images]
        return [{"role": "system", "content": _VQA},
                {"role": "user", "content": [{"type": "text", "text": task.question}, *images]}]


_REWRITE = (
    "You polish multi-hop puzzle questions. You get one question built from templates, in which every entity is "
    "described by nested relative clauses and never named, and a list of phrases. Reword it so that it reads as a "
    "person would ask it, under these rules: keep every phrase of the list word for word; keep it one question "
    "about the same entity, asking for the same kind of thing; add no names and no facts, drop none. Reply with "
    "JSON only: {\"question\": \"...\"}."
)


class LLMRewriter:
    """Step 6 with a model: rewords the template question (:class:`data_gen.neos.verbalize.Rewriter`)."""

    name = "llm_rewriter"

    def __init__(self, chat: SyncChat) -> None:
        self.chat = chat
        self.usage = Usage()

    def rewrite(self, verbalization: Verbalization, keep: Sequence[str],
                check: Callable[[str], str | None]) -> Verbalization:
        phrases = [*verbalization.spans, *keep]

        def usable(reply: QuestionReply) -> str | None:
            if any(p not in reply.question for p in phrases):
                return "dropped_phrase"
            return None if check(reply.question) is None else "coverage"

        user = json.dumps({"question": verbalization.question, "phrases": phrases}, ensure_ascii=False)
        reply = self.chat.ask([{"role": "system", "content": _REWRITE}, {"role": "user", "content": user}],
                              QuestionReply, self.usage, usable)
        if reply is None:
            return verbalization
        return Verbalization(reply.question, verbalization.spans)


_OBSERVE = (
    "Describe the image you are shown by what you see alone. Name its dominant colours, largest area first, at "
    "most {n}, each one of: {palette}; ignore colours covering less than a few percent. List the words written in "
    "it, if any, exactly as written. Reply with JSON only: {{\"colours\": [...], \"text\": [...]}}."
)


class Observed(StrictReply):
    colours: list[str] = Field(min_length=1, max_length=MAX_COLOURS)
    text: list[Annotated[str, Field(max_length=200)]] = Field(max_length=50)


class VLMObserver:
    """Step 5 with a model (:class:`data_gen.neos.observer.Observer`): a VLM sees the image as a data URL, with no
    caption, file name or entity name, and answers in the offline observer's terms (palette colours by decreasing
    area, written words). The kind still comes from the image metadata, as offline; withheld names are removed from
    the words afterwards. Replies are cached per image: grounding asks about the same distractors again and again.
    """

    name = "vlm_observer"

    def __init__(self, chat: SyncChat, fallback: Observer) -> None:
        self.chat = chat
        self.fallback = fallback
        self.usage = Usage()
        self._seen: dict[Path, Observed | None] = {}
        self._system = _OBSERVE.format(n=MAX_COLOURS, palette=", ".join(COLOURS))

    def describe(self, path: Path, source: str, withheld: Collection[str]) -> Description | None:
        kind = IMAGE_KINDS.get(source)
        if kind is None:
            return None
        if path not in self._seen:
            self._seen[path] = self.chat.ask(self._messages(path), Observed, self.usage, _palette_only)
        seen = self._seen[path]
        if seen is None:
            return self.fallback.describe(path, source, withheld)
        words = unnamed((w for line in seen.text for w in words_of(line)), withheld)
        return Description(kind, tuple(seen.colours), words)

    def _messages(self, path: Path) -> list[dict]:
        return [{"role": "system", "content": self._system},
                {"role": "user", "content": [{"type": "text", "text": "Describe this image."}, image_part(path)]}]


def _palette_only(reply: Observed) -> str | None:
    if any(c not in COLOURS for c in reply.colours) or len(set(reply.colours)) != len(reply.colours):
        return "unknown_colour"
    return None
