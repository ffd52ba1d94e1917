"""LLM relation proposal and filtering for text expansion (App. A.1), through the project's one
OpenAI-compatible chat client (``verl_ext.reward.judge.chat_completion``, configured by URL and model name).

The model gets the source article's title, the sentences of w(a) that mention the candidate, and the candidate's
title, and replies with strict JSON ``{"keep": bool, "relation": str, "reason": str}``: ``keep`` false for weak,
ambiguous or non-entity links (the filter); ``relation`` describes the candidate from the source with ``{x}``
standing for the source. A reply that is not that JSON, a relation without ``{x}``, one that names the candidate,
or a transport failure falls back to the offline proposer (counted in ``fallbacks``), so a flaky endpoint never
stalls graph construction.
"""

from __future__ import annotations

import json
import re

import aiohttp

from data_gen.common.episode import found
from data_gen.modalsearch.graph import Relation
from data_gen.modalsearch.relations import OfflineRelationProposer
from data_gen.world.model import Page
from verl_ext.reward.judge import JudgeConfig, JudgeReplyError, chat_completion

_SYSTEM = (
    "You help build a knowledge graph from encyclopedia articles. You get a source article, the sentences of it "
    "that mention a linked article, and that linked article's title. Decide whether the link names a concrete "
    "entity clearly and strongly related to the source; if so, write one short relation phrase that describes the "
    "linked entity from the source's point of view, writing {x} where the source belongs and never naming the "
    "linked entity (for example: \"is the river that flows through {x}\"). Reply with JSON only: "
    "{\"keep\": true or false, \"relation\": \"...\", \"reason\": \"...\"}."
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class LLMRelationProposer:
    name = "llm_relation_proposer"

    def __init__(self, config: JudgeConfig, session: aiohttp.ClientSession, fallback: OfflineRelationProposer) -> None:
        self.config = config
        self.session = session
        self.fallback = fallback
        self.calls = 0
        self.fallbacks = 0

    async def propose(self, source: Page, target: Page) -> Relation | None:
        context = [s for s in _SENTENCE.split(source.text) if found(target.title, s)][:3]
        user = json.dumps({"source_title": source.title, "mentions": context, "linked_title": target.title},
                          ensure_ascii=False)
        self.calls += 1
        try:
            reply = await chat_completion(self.session, self.config,
                                          [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}])
            keep, phrase = _parse(reply, target.title)
        except (aiohttp.ClientError, TimeoutError, JudgeReplyError):
            self.fallbacks += 1
            return await self.fallback.propose(source, target)
        return Relation(phrase, unique=True, source="llm") if keep else None


def _parse(reply: str, target_title: str) -> tuple[bool, str]:
    body = reply.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise JudgeReplyError(f"not JSON: {reply[:120]!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keep"), bool):
        raise JudgeReplyError(f"no boolean 'keep': {reply[:120]!r}")
    phrase = data.get("relation")
    if data["keep"] and (not isinstance(phrase, str) or "{x}" not in phrase or found(target_title, phrase)):
        raise JudgeReplyError(f"relation must contain {{x}} and not name the target: {phrase!r}")
    return data["keep"], phrase or ""
