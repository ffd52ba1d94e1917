"""ModalSearch steps with a model, through the project's one OpenAI-compatible chat client
(``verl_ext.reward.judge.chat_completion``, configured by URL and model name): relation proposal and filtering for
text expansion (App. A.1), and the wording of the terminal question and of each backward rewrite (App. A.5-A.6).

The model gets the source article's title, the sentences of w(a) that mention the candidate, and the candidate's
title, and replies with strict JSON ``{"keep": bool, "relation": str, "reason": str}``: ``keep`` false for weak,
ambiguous or non-entity links (the filter); ``relation`` describes the candidate from the source with ``{x}``
standing for the source. A reply that is not that JSON, a relation without ``{x}``, one that names the candidate,
or a transport failure falls back to the offline proposer (counted in ``fallbacks``), so a flaky endpoint never
stalls graph construction.

:class:`LLMWording` words the terminal question (strict JSON ``{"question": ...}`` with ``{REF}`` once, ending
with "?", not containing the answer or a node placeholder) and each backward step ``R`` (``{"question": ...}``
holding the next node's placeholder once and no other). It runs inside the synchronous question writer through
:class:`data_gen.common.llm.SyncChat`; an unusable reply falls back to the template wording, counted by reason.
The fact or visual ask it words was chosen and verified by the writer beforehand, and the leak check runs after.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import aiohttp

from data_gen.common.episode import found
from data_gen.common.llm import QuestionReply, StrictReply, SyncChat, Usage, parse_reply
from data_gen.modalsearch.graph import Relation
from data_gen.modalsearch.questions import TerminalContext, TemplateWording
from data_gen.modalsearch.relations import OfflineRelationProposer
from neos_core.world.model import Page
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
_MARK = re.compile("\u27e8v\\d+\u27e9")  # the writer's placeholders for path nodes (questions.write)


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


class _Proposal(StrictReply):
    keep: bool
    relation: str = ""
    reason: str = ""


def _parse(reply: str, target_title: str) -> tuple[bool, str]:
    data = parse_reply(reply, _Proposal)
    if data.keep and ("{x}" not in data.relation or found(target_title, data.relation)):
        raise JudgeReplyError(f"relation must contain {{x}} and not name the target: {data.relation!r}")
    return data.keep, data.relation


_TERMINAL = (
    "You write quiz questions. You get a question template about an entity, written {REF} (a placeholder), what it "
    "asks, the evidence that answers it and the answer. Reword the template into one natural question asking "
    "exactly the same thing: keep {REF} exactly once, in place of the entity; do not reveal the answer; end with a "
    "question mark. Reply with JSON only: {\"question\": \"...\"}."
)
_REWRITE = (
    "You rewrite multi-hop questions backwards. You get a question, a placeholder in it (like \u27e8v2\u27e9), and "
    "a description of that entity through another one, which contains the other entity's placeholder. Replace the "
    "first placeholder by the description, rephrased so that the whole question reads naturally: keep its meaning "
    "exactly, keep the other placeholder exactly once and unchanged, add no names, end with a question mark. Reply "
    "with JSON only: {\"question\": \"...\"}."
)


class LLMWording:
    """The question writer's wording by a model (:class:`data_gen.modalsearch.questions.Wording`)."""

    name = "llm_wording"

    def __init__(self, chat: SyncChat) -> None:
        self.chat = chat
        self.offline = TemplateWording()
        self.usage = Usage()

    def terminal(self, template: str, context: TerminalContext) -> str:
        def usable(reply: QuestionReply) -> str | None:
            q = reply.question
            if q.count("{REF}") != 1 or not q.endswith("?") or _MARK.search(q):
                return "form"
            return "reveals_answer" if any(found(a, q.replace("{REF}", "")) for a in context.answers) else None

        user = {"template": template, "entity_kind": context.noun, "asks": context.asks,
                "evidence": context.evidence, "answer": context.answers[0]}
        reply = self._ask(_TERMINAL, user, usable)
        return reply.question if reply else self.offline.terminal(template, context)

    def rewrite(self, question: str, mark: str, reference: str, keep: str) -> str:
        def usable(reply: QuestionReply) -> str | None:
            q = reply.question
            ok = _MARK.findall(q) == [keep] and q.endswith("?") and "{REF}" not in q
            return None if ok else "form"

        reply = self._ask(_REWRITE, {"question": question, "placeholder": mark, "description": reference}, usable)
        return reply.question if reply else self.offline.rewrite(question, mark, reference, keep)

    def _ask(self, system: str, user: dict, check: Callable[[QuestionReply], str | None]) -> QuestionReply | None:
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": json.dumps(user, ensure_ascii=False)}]
        return self.chat.ask(messages, QuestionReply, self.usage, check)
