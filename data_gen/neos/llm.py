"""Probe 1 with a model (SPEC §6 step 7, text-only answering): an LLM answers the question closed-book, no tools and
no images, through the project's one OpenAI-compatible chat client (``verl_ext.reward.judge.chat_completion``,
configured by URL and model name). A question it answers correctly gives its answer away in text and is rejected,
as the programmatic probe 1 (the answer's name in the question) rejects it; the pipeline runs both.

Its reply is matched with the reward's rule matcher (``answer_matches``, aliases included). A transport failure or a
body that is not a chat completion, after ``1 + max_retries`` attempts, is an infrastructure failure
(:class:`ProbeUnavailable`): the pipeline records the candidate as an error, excluded from every rate and retried on
restart, never accepted unprobed.
"""

from __future__ import annotations

import asyncio

import aiohttp

from data_gen.neos.schema import Task
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
            raise ValueError("the LLM probe needs a chat-completions base URL")
        self.config = config
        self.session = session
        self.calls = 0

    async def solves(self, task: Task) -> bool:
        """Whether the model's closed-book answer to the question text matches the task's answer or an alias."""
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": task.question}]
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
