"""Real tool-server episodes: the shortcut probes (Neos App. A, step 7, probes 1-2) and the offline expert (step 8).

Both are **programmatic, offline agents with no model**, and say so in their names:

- :func:`probe_text_only_answer` (probe 1): the question text alone gives the answer away (its name or an alias
  occurs in it).
- :func:`probe_text_only_search` (probe 2): a searcher that sees only the question's text runs at most 4
  TextSearch calls (the question's words, then the leads it found with the asked step's words) and is forced to
  answer (:class:`_Ballot`); solved when that answer matches.
- :func:`probe_entry_image_vqa` (probe 3): the entry images' own texts (captions, alt, OCR) name the answer.
- :func:`probe_short_multimodal_search` (probe 4): 4 tool turns starting from reverse search of the entry images,
  then a forced answer.
- :class:`ProgrammaticExpert`: follows the task's verified path with real calls (ReverseImageSearch on each entry
  image, WebVisit of each step's source page and, failing that, its target page, TextSearch to reach the next page,
  FetchImage of each checkpoint image whose pixels must show the stated palette) and answers only with a name it
  read in an observation. Its episode is a ``verl_ext.rollout.record.TrajectoryRecord``.

:func:`teacher_brief` is what the model-backed teacher (``data_gen.common.teacher``) gets of a task instead.

Infrastructure failures (:class:`ToolServerUnavailable`) propagate: the caller records them as errors, excluded
from every rate and retried on restart.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from data_gen.common.episode import Episode, expert_episode, opened
from data_gen.common.episode import found as _found
from data_gen.common.teacher import Brief
from data_gen.neos.observer import merged, palette
from data_gen.neos.verbalize import KIND_NOUNS
from neos_core.neos_tasks import Task
from neos_core.world.store import World
from verl_ext.reward.answers import answer_matches
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.tools.client import ToolServerClient

SEARCH_TURNS = 4
CHAIN_WIDTH = 3  # leads a text-only searcher follows per call
_STOP = frozenset({
    "the", "a", "an", "of", "that", "is", "its", "in", "on", "which", "whose", "who", "as", "with", "by", "and",
    "shown", "image", "mostly", "what", "name", "identify", "find", "tell", "me", "it", "look", "at", "shows",
    "given", "belongs", "to", "this", "here",
})


def probe_text_only_answer(task: Task) -> bool:
    """Probe 1 (offline, no model): the answer or an alias is written in the question."""
    return any(len(name) >= 2 and _found(name, task.question) for name in (task.answer, *task.aliases))


class _Ballot:
    """A forced answer from search results: the best title by reciprocal rank summed over results (then the
    earliest seen) among hits whose title adds a word the question lacks and whose snippet names the asked kind
    (:func:`asked_kind`: "city", or "diplomat" for "the diplomat, born in 1911, ..."). ``leads`` keeps every
    such title of any kind, in the order seen: what a searcher would look up next."""

    def __init__(self, question: str, kind: str, exclude: Sequence[str] = ()) -> None:
        self.kind = kind
        self.asked_words = {w.lower() for w in re.findall(r"\w+", question)}
        # names the question states ("the capital of Kyrgyzstan"): a synthesized question states none, its entities
        # are letters; a hit whose snippet names one is the link a searcher reads first
        self.names = {w for w in re.findall(r"(?<![.?] )(?<!^)\b[A-Z][\w'-]{2,}", question)}
        # years the question states ("born in 1911, died in 1990"): a title whose snippet states more of them ranks
        # first (a searcher reading "(1911-1990)" beside "(1900-1968)" takes the first), then by votes
        self.years = set(re.findall(r"\b\d{3,4}\b", question))
        self.years_stated: dict[str, int] = {}
        self.exclude = set(exclude)
        self.votes: dict[str, float] = {}
        self.first_seen: dict[str, tuple[int, int]] = {}
        self.urls: dict[str, str] = {}
        self.leads: list[str] = []

    def add(self, turn: int, result: Any, subjects: Sequence[tuple[str, float] | None] = ()) -> None:
        """``subjects[i]``: the lead query ``i`` searched for and its weight. A hit of such a query votes (times
        that weight) only if its snippet names the lead: the link a searcher reads there; the lead itself never
        votes as its own answer."""
        for i, record in enumerate(result.records if result else []):
            subject, weight = subjects[i] if i < len(subjects) and subjects[i] else (None, 1.0)
            voted: set[str] = set()  # two pages of one name in one list are one candidate, at its best rank
            for rank, hit in enumerate(record["results"]):
                title = hit["title"]
                if title in self.exclude or title in voted or _says_nothing_new(title, self.asked_words):
                    continue
                if title not in self.leads:
                    self.leads.append(title)
                if self.kind and not _found(self.kind, hit["snippet"]):
                    continue
                if subject is not None and (title == subject or not _found(subject, hit["snippet"])):
                    continue
                voted.add(title)
                named = 2.0 if any(_found(name, hit["snippet"]) for name in self.names) else 1.0
                years = sum(_found(year, hit["snippet"]) for year in self.years)
                self.years_stated[title] = max(self.years_stated.get(title, 0), years)
                self.votes[title] = self.votes.get(title, 0.0) + named * weight / (1 + rank)
                self.first_seen.setdefault(title, (turn, rank))
                self.urls.setdefault(title, hit["url"])

    def ranked(self) -> list[str]:
        return sorted(self.votes, key=lambda t: (-self.years_stated[t], -self.votes[t], self.first_seen[t]))


@dataclass(frozen=True, slots=True)
class SearchProbe:
    """Probe 2's verdict: ``solved`` (its forced answer matches: the task is rejected) and ``saw_answer`` (some hit
    of its calls was the answer, chosen or not: how close the text-only shortcut came)."""

    solved: bool
    saw_answer: bool


async def probe_text_only_search(client: ToolServerClient, task: Task) -> SearchProbe:
    """Probe 2 (offline, no model): a text-only searcher with at most 4 TextSearch calls, then a forced answer.

    Call 1 searches the question's words (image references left out: the searcher has no image). Each later call
    chains from what it found, as a policy following its leads would: the ``CHAIN_WIDTH`` leading titles not yet
    searched (in the order found), each with the asked step's words ("city capital"), so a question whose text
    alone narrows the chain (a colour some page states, a relation only one candidate has) is solved within 4
    calls. The forced answer is the ballot's leader over every hit of the calls (:class:`_Ballot`; a chained hit
    counts only if its snippet names the lead, weighted by the lead's place). Solved when it matches."""
    # the asked step's words: the kind and the outermost clause ("city capital country" for "What is the capital
    # of the country that ...?")
    asked = _content(f"{asked_kind(task)} {_CLAUSE_BREAK.split(_asked_sentence(task.question))[0]}")
    ballot = _Ballot(task.question, asked_kind(task))
    queries: list[str] = [_content(_without_image_references(task.question))]
    subjects: list[tuple[str, float] | None] = [None]
    searched: set[str] = set()
    async with opened(client, []) as (episode, _):
        for turn in range(SEARCH_TURNS):
            ballot.add(turn, await episode.call("TextSearch", {"query": queries}), subjects)
            searched.update(s[0] for s in subjects if s)
            leads = [(t, 1 / (1 + i)) for i, t in enumerate(ballot.leads) if t not in searched][:CHAIN_WIDTH]
            if not leads:
                break
            queries, subjects = [f"{lead} {asked}".strip() for lead, _ in leads], list(leads)
    truth = task.ground_truth()
    ranked = ballot.ranked()
    return SearchProbe(solved=bool(ranked) and answer_matches(ranked[0], truth),
                       saw_answer=any(answer_matches(t, truth) for t in ballot.leads))


def asked_kind(task: Task) -> str:
    """What a searcher looks for in a snippet: the noun that pins a person where the question states one ("the
    diplomat, born in 1911, ..."; a person's page says "diplomat", never "person"), else the last word of the
    answer kind's noun, which every question implies ("the capital of ..." asks for a city)."""
    pinned = re.search(r"\b(?:the|an?) ([a-z][\w ]*?), born in", task.question)
    if task.answer_type == "person" and pinned:
        return pinned.group(1)
    noun = KIND_NOUNS.get(task.answer_type, "")
    return noun.split()[-1] if noun else ""


def _asked_sentence(question: str) -> str:
    """The sentence that asks (the last one: an image-first question opens with a sentence about the image)."""
    sentences = [s for s in re.split(r"(?<=[.?])\s+", question) if s]
    return (sentences or [""])[-1]


_CLAUSE_BREAK = re.compile(r",? (?:and )?(?:that|who|whose)\b|: ")


def _clauses(question: str) -> list[str]:
    """The question's relative clauses, outermost (the asked step) first, without those about the entry image:
    what a searcher would query one by one."""
    parts = _CLAUSE_BREAK.split(_asked_sentence(question))
    return [p for p in parts if p.strip() and "image" not in p]


def _without_image_references(question: str) -> str:
    """The question as a text-only searcher reads it: "shown in the image" / "image 2" carry no searchable words."""
    return re.sub(r"\b(?:(?:is |are )?shown in )?(?:the image|image \d+)\b", "", question)


def probe_entry_image_vqa(task: Task, image_texts: Sequence[str]) -> bool:
    """Probe 3 (offline, no model): what an image reader gets from the entry images alone (their captions, alt
    texts and any text in them, ``image_texts``) already names the answer. No tools, no world knowledge."""
    return any(_found(name, text) for name in (task.answer, *task.aliases) if len(name) >= 2 for text in image_texts)


async def probe_short_multimodal_search(client: ToolServerClient, task: Task) -> bool:
    """Probe 4 (offline, no model): 4 tool turns with the entry images, then a forced answer. Turn 1 reverse-
    searches every entry image, turn 2 reads the top page of each, turn 3 searches those page titles with each
    sentence's words, turn 4 reads the pages of the two leading answers; it answers with the first whose page
    mentions an entry image's page title, else with the leader."""
    session = await client.open_session([e.url for e in task.entry_images])
    clauses = _clauses(task.question)
    try:
        episode = Episode(client, session.session_id)
        found = await episode.call("ReverseImageSearch", {"image_token": session.images,
                                                          "goal": "What does this image show?"})
        pages = [r["candidates"][0]["pages"][0] for r in (found.records if found else [])
                 if r.get("candidates") and r["candidates"][0]["pages"]]
        if not pages:
            return False
        titles = " ".join(p["title"] for p in pages)
        await episode.call("WebVisit", {"url": [p["url"] for p in pages][:5], "goal": _content(task.question)})
        ballot = _Ballot(task.question, asked_kind(task), exclude=[p["title"] for p in pages])
        queries = [f"{titles} {_content(c)}" for c in reversed(clauses)][:5] or [titles]
        ballot.add(2, await episode.call("TextSearch", {"query": queries}))
        leading = ballot.ranked()[:2]
        if not leading:
            return False
        read = await episode.call("WebVisit", {"url": [ballot.urls[t] for t in leading],
                                               "goal": f"{titles} {_content(clauses[0]) if clauses else ''}"})
        records = read.records if read else []
        visits = {r.get("title"): f"{r.get('evidence', '')} {r.get('summary', '')}" for r in records}
        corroborated = [t for t in leading if any(_found(p["title"], visits.get(t, "")) for p in pages)]
    finally:
        await client.close_session(session.session_id)
    return answer_matches((corroborated or leading)[0], task.ground_truth())


def _says_nothing_new(title: str, asked_words: set[str]) -> bool:
    """A title made only of the question's own words ("Capital city") cannot be the answer a searcher learned."""
    return {w.lower() for w in re.findall(r"\w+", title)} <= asked_words


def _content(text: str) -> str:
    """The words a searcher would type: no stop words, no one-letter variables ("B."), each word once."""
    words = (w.rstrip(".") for w in re.findall(r"[A-Za-z][\w.'-]*", text))
    return " ".join(dict.fromkeys(w for w in words if len(w) > 1 and w.lower() not in _STOP))


class ProgrammaticExpert:
    """The offline expert (no model): walks the verified path with real tool calls; see the module docstring."""

    name = "programmatic_path_expert"

    def __init__(self, client: ToolServerClient) -> None:
        self.client = client

    async def solve(self, task: Task) -> tuple[bool, TrajectoryRecord, str]:
        """(solved, trajectory, why it failed or '')."""
        return await expert_episode(
            self.client, [e.url for e in task.entry_images], lambda episode, refs: self._walk(task, episode, refs),
            protocol="neos", question=task.question, group_id=task.id, answer=task.answer,
            render=lambda final: final or "I could not verify an answer.")

    async def _walk(self, task: Task, episode: Episode, refs: list[str]) -> str:
        for ref, entry in zip(refs, task.entry_images):
            anchor_page = next(s.source_page_url for s in task.steps if s.source == entry.entity_id)
            result = await episode.call("ReverseImageSearch", {"image_token": [ref], "goal": "Which page carries "
                                        "this image and what does it show?"},
                                        reasoning=(f"I do not know what {ref} shows yet; a reverse image search "
                                                   "should find the page that carries it."))
            if result is None or anchor_page is None or anchor_page not in result.text:
                return f"reverse search did not reach the anchor page of {entry.image_id}"
        for step in task.steps:
            goal = f"{step.relation_label} {step.source_name}"
            seen = await self._visit(episode, step.source_page_url, goal,
                                     f"The evidence so far points to {step.source_name}; its page should say which "
                                     f"entity is linked to it by '{step.relation_label}'.")
            if not _found(step.target_name, seen):
                # the other side's page, reached as a searcher reaches it: through a search whose results list it
                # (opening it by its address would use a page no tool has returned)
                query = f"{_words_up_to(task.question, step.span)} {step.source_name}"
                found = await episode.call("TextSearch", {"query": [query]}, reasoning=(
                    f"The page of {step.source_name} does not settle it; a search for '{query}' may find a page "
                    "that states the link from its side."))
                if found is None or step.target_page_url is None or step.target_page_url not in found.text:
                    return f"step {step.index}: no page states {step.fact}"
                back = await self._visit(episode, step.target_page_url, goal,
                                         f"The search lists the page of {step.target_name}; it may state the link.")
                if not _found(step.source_name, back):
                    return f"step {step.index}: no page states {step.fact}"
            if step.checkpoint:
                why = await self._check(episode, step, seen)
                if why:
                    return why
            if _found(step.target_name, seen) and step.target != task.answer_entity and step.target_page_url:
                result = await episode.call("TextSearch", {"query": [step.target_name]}, reasoning=(
                    f"The page of {step.source_name} names {step.target_name} ({step.relation_label}); I look up "
                    f"{step.target_name}'s own page to continue from it."))
                if result is None or step.target_page_url not in result.text:
                    return f"step {step.index}: search did not find the page of {step.target_name}"
        return ""

    async def _check(self, episode: Episode, step, seen: str) -> str:
        """A visual checkpoint: first the pixels of one other candidate the page named (rejected when its colours
        are not the described ones), then the checkpoint's own image, whose pixels must show them."""
        wanted = step.checkpoint_colours
        named = [a for a in step.alternatives if _found(a.name, seen)]
        if named:
            alt = named[0]
            result = await episode.call("FetchImage", {"urls": [alt.image_url]}, pixels=True, reasoning=(
                f"The page of {step.source_name} names several candidates, {alt.name} and {step.target_name} among "
                f"them; the question describes the one it means as {step.checkpoint_description}. I look at "
                f"{alt.name}'s first."))
            if result is not None and result.images and result.images[0].png is not None:
                with Image.open(io.BytesIO(result.images[0].png)) as im:
                    if list(merged(palette(im))) == wanted:
                        return f"step {step.index}: the other candidate {alt.name} also shows the stated colours"
        before = f"{named[0].name}'s image is not {' and '.join(wanted or [])}, so it is not the one meant; " \
            if named else ""
        result = await episode.call("FetchImage", {"urls": [step.checkpoint_image_url]}, pixels=True, reasoning=(
            f"{before}I check {step.target_name}'s image against the description."))
        if result is None or not result.images or result.images[0].png is None:
            return f"step {step.index}: checkpoint image not fetched"
        with Image.open(io.BytesIO(result.images[0].png)) as im:
            if list(merged(palette(im))) != wanted:
                return f"step {step.index}: fetched pixels do not show the stated colours"
        return ""

    async def _visit(self, episode: Episode, url: str | None, goal: str, reason: str) -> str:
        if url is None:
            return ""
        result = await episode.call("WebVisit", {"url": [url], "goal": goal}, reasoning=(reason))
        return result.text if result else ""


def _words_up_to(question: str, span: str, n: int = 8) -> str:
    """The question's last ``n`` words up to the end of a step's span: what it says of the step's target ("chemical
    element that was discovered in a country"), the noun a search needs besides the span's own words."""
    at = question.find(span)
    return " ".join((question[: at + len(span)] if at >= 0 else span).split()[-n:])


def teacher_brief(world: World, task: Task) -> Brief:
    """The task as the model-backed teacher gets it: the question and the entry images (world URLs and pixels)."""
    return Brief(task.id, task.question, [e.url for e in task.entry_images],
                 [world.image_path(e.image_id) for e in task.entry_images], task.ground_truth(), answer_in_text=True)
