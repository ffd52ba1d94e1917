"""Relation-aware textual expansion (App. A.1): hyperlinks of w(a) -> K_cand sampled candidates -> a relation
proposed per candidate -> filtering on relevance, clarity and whether the target is a concrete entity.

:class:`OfflineRelationProposer` is the **offline default and uses no model**: the relation is the KG fact between
the two entities when there is one (taxonomic and literal facts excluded), phrased by fixed templates; otherwise a
deterministic context template quotes the sentence of w(a) that mentions the target, the mention masked. Filters:
category/class pages and pages without an entity are not concrete entities; a context sentence must mention the
target exactly once, as a capitalised name not opening the sentence (a concrete entity, not a concept), must not
name the source's own title twice and must be 40-300 characters long (clarity). An
LLM proposer plugs in through :class:`RelationProposer` (``data_gen.modalsearch.llm``, LLM when configured).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from PIL import Image as PILImage

from data_gen.kg import KG
from data_gen.kg.distinguish import TAXONOMIC_RELATIONS
from data_gen.modalsearch.graph import Relation
from data_gen.neos.observer import SHADE_OF, palette
from data_gen.neos.verbalize import KIND_NOUNS, RELATION_PHRASES
from neos_core.world.model import Entity, Page
from neos_core.world.store import World

K_CAND = 50
MAX_FLAG_PEERS = 4  # a flag clue among more candidates asks for too many fetches to choose
FLAG_SOURCE = "flag-icons"  # the world's national flags
NON_ENTITY_KINDS = frozenset({"class"})
NOUNS = {**KIND_NOUNS, "stamp": "thing"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# Preference among several KG facts between the same two entities: the most concrete first.
_ORDER = ("P36", "P1376", "P38", "P37", "P17", "P131", "P361", "P30", "P47")


def noun(world: World, entity_id: str | None) -> str:
    entity = world.entities.get(entity_id) if entity_id else None
    return NOUNS.get(entity.kind, "entity") if entity else "topic"


def is_category(world: World, page: Page) -> bool:
    """Generalized category pages: no entity, a class entity, or a stamp-category class."""
    entity = world.entities.get(page.entity_id) if page.entity_id else None
    return entity is None or entity.kind in NON_ENTITY_KINDS or entity.id.startswith("x:category:")


# Phrases that end with ``{x}`` for the relations whose Neos phrase puts it mid-sentence ("has {x} as its capital"):
# nested in a question, such a phrase leaves its tail behind the whole embedded reference ("the region that has the
# country depicted in the locator map of the country that has Sarajevo as its capital as one of its parts"), which
# nobody can read. (as subject, as object), as in ``RELATION_PHRASES``.
TAIL_FREE: dict[str, tuple[str, str]] = {
    "P36": ("whose capital is {x}", "is the capital of {x}"),
    "P1376": ("is the capital of {x}", "whose capital is {x}"),
    "P37": ("whose official languages include {x}", "is an official language of {x}"),
    "P38": ("whose currency is {x}", "is used in {x}"),
    "P361": ("is part of {x}", "contains {x}"),
    "P463": ("is a member of {x}", "whose members include {x}"),
    "P35": ("whose head of state is {x}", "is the head of state of {x}"),
    "P106": ("whose occupations include {x}", "is the occupation of {x}"),
}
RELATIVE = re.compile(r"(?:whose|where|which|that)\b")


def listed(names: Sequence[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def colour_words(colours: Collection[str]) -> str:
    """An unordered colour set as words, in a fixed order: "red and white", "black, red and yellow"."""
    return listed(sorted(colours))


def kg_phrase(relation: str, label: str, forward: bool) -> str:
    """The target described from ``{x}``: ``forward`` when the fact is (source, relation, target)."""
    as_subject, as_object = TAIL_FREE.get(relation) or RELATION_PHRASES.get(
        relation, (f"has {{x}} as its {label}", f"is the {label} of {{x}}"))
    # Neos' phrases open a relative clause with {p} ("that"/"who"); ModalSearch adds its own pronoun (relative())
    return (as_object if forward else as_subject).removeprefix("{p} ")


def relative(noun_: str, phrase: str) -> str:
    """The entity a relation phrase describes: "is the capital of X" -> "the capital of X", "whose capital is X"
    -> "the country whose capital is X", "shares a border with X" -> "the country that shares a border with X"."""
    if phrase.startswith("is the "):
        return phrase[3:]
    return f"the {noun_} {phrase}" if RELATIVE.match(phrase) else f"the {noun_} that {phrase}"


def disambiguated(world: World, phrase: str, target: str, peers: Collection[str], source: str,
                  kg_relation: str | None, flag: Callable[[str], frozenset[str] | None] | None = None) -> Relation:
    """The relation, unique when ``target`` is its only ``peer``; otherwise with the clue the paper keeps for
    answer uniqueness. Offline that is first a visual clue, the colours of the target's national flag (``flag``:
    an entity's flag colours as a person reads them, None without one) when at most ``MAX_FLAG_PEERS`` peers all
    have a flag and no other reads the same: the solver must fetch the peers' flags to choose, new visual evidence
    mid-search (ModalSearcher App. B's search-required); else the initial of the target's name when no other peer
    shares it (else not unique). The clue comes first ("whose name begins with “B” and that shares a border with
    {x}"): after the relation it would attach to the nearest noun of what replaces ``{x}``."""
    if len(peers) <= 1:
        return Relation(phrase, unique=True, source=source, kg_relation=kg_relation)
    clause = phrase if RELATIVE.match(phrase) else f"that {phrase}"
    readings = {p: flag(p) for p in peers} if flag is not None and len(peers) <= MAX_FLAG_PEERS else {}
    mine = readings.get(target)
    if mine and all(readings.values()) and sum(r == mine for r in readings.values()) == 1:
        names = tuple(sorted(world.entities[p].label for p in peers))
        return Relation(f"whose national flag is mostly {colour_words(mine)} and {clause}", unique=True,
                        source=f"{source}+flag_clue", kg_relation=kg_relation, peers=names)
    initial = world.entities[target].label[:1].upper() if target in world.entities else ""
    clash = [p for p in peers if p != target and p in world.entities and
             world.entities[p].label[:1].upper() == initial]
    if initial.isalpha() and not clash:
        return Relation(f"whose name begins with “{initial}” and {clause}", unique=True,
                        source=f"{source}+initial_clue", kg_relation=kg_relation)
    return Relation(phrase, unique=False, source=source, kg_relation=kg_relation)


class RelationProposer(Protocol):
    async def propose(self, source: Page, target: Page) -> Relation | None:
        """A relation describing ``target`` from ``source`` (``{x}``), or None when filtered out."""
        ...


class OfflineRelationProposer:
    """KG relation or deterministic context template; see the module docstring. No model."""

    name = "offline_kg_or_context_template"

    def __init__(self, world: World, kg: KG) -> None:
        self.world = world
        self.kg = kg
        self._flag_paths = {i.entity_id: world.image_path(i.id) for i in world.images.values()
                            if i.source == FLAG_SOURCE and i.entity_id}

    def flag(self, entity_id: str) -> frozenset[str] | None:
        """The entity's national flag colours as a person reads them (near shades merged, unordered)."""
        path = self._flag_paths.get(entity_id)
        return flag_reading(path) if path is not None else None

    async def propose(self, source: Page, target: Page) -> Relation | None:
        if is_category(self.world, target) or not source.entity_id:
            return None
        a, b = source.entity_id, target.entity_id
        facts = [(p, True) for p, objs in self.kg.outgoing(a).items() if b in objs]
        facts += [(p, False) for p, subs in self.kg.incoming(a).items() if b in subs]
        facts = [f for f in facts if f[0] not in TAXONOMIC_RELATIONS]
        if facts:
            rel, forward = min(facts, key=lambda f: (_ORDER.index(f[0]) if f[0] in _ORDER else len(_ORDER), f))
            peers = self.kg.objects(a, rel) if forward else self.kg.subjects(rel, a)
            label = self.world.relations[rel].label if rel in self.world.relations else rel
            return disambiguated(self.world, kg_phrase(rel, label, forward), b, peers, "kg", rel, self.flag)
        return self._context(source, self.world.entities[b])

    def _context(self, source: Page, target: Entity) -> Relation | None:
        names = sorted({target.label, *target.aliases}, key=len, reverse=True)
        for sentence in _SENTENCE.split(source.text):
            hits = [n for n in names if _count(n, sentence)]
            if not hits or not 40 <= len(sentence) <= 300 or _count(source.title, sentence) > 1:
                continue
            if _count(hits[0], sentence) != 1 or not _proper(hits[0], sentence):
                continue
            masked = re.sub(rf"(?<!\w){re.escape(hits[0])}(?!\w)", "___", sentence, flags=re.IGNORECASE)
            if any(_count(n, masked) for n in names if len(n) >= 3):
                continue
            quote = f"\u201c{masked.strip()}\u201d"
            noun_ = NOUNS.get(target.kind, "entity")
            phrase = f"is the {noun_} written as ___ in the sentence {quote} of the article on {{x}}"
            return Relation(phrase, unique=True, source="context_template")
        return None


def _proper(name: str, sentence: str) -> bool:
    """The mention is written as a proper name (capitalised), so the target is a concrete entity, not a concept
    ("land", "city") that the world's linker also links."""
    match = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", sentence, re.IGNORECASE)
    return match is not None and match.group(0)[:1].isupper() and match.start() > 0


def _count(name: str, text: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE))


@lru_cache(maxsize=4096)
def flag_reading(path: Path) -> frozenset[str] | None:
    """The merged colour set of a flag as served (``observer.palette``); None when it has no clear colours."""
    with PILImage.open(path) as im:
        return reading_of(im)


def reading_of(im: PILImage.Image) -> frozenset[str] | None:
    return frozenset(SHADE_OF.get(c, c) for c in palette(im)) or None


_COLOUR = "(?:dark |light )?[a-z]+"
# a relation's clue, before its clause: the name's initial or the flag's colours (group "colours")
CLUE = re.compile(f"^(?:whose name begins with \u201c.\u201d|whose national flag is mostly (?P<colours>{_COLOUR}(?:, "
                  f"{_COLOUR})*(?: and {_COLOUR})?)) and (?:that )?")


def clue_colours(phrase: str) -> frozenset[str] | None:
    """The colours of a flag clue ("whose national flag is mostly red and white and ..."); None without one."""
    match = CLUE.match(phrase)
    if match is None or not match.group("colours"):
        return None
    return frozenset(re.split(r", | and ", match.group("colours")))
