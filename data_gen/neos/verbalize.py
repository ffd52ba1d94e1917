"""Step 6, verbalization, and the step-to-span coverage check that every question must pass.

:class:`TemplateVerbalizer` is the **offline default and uses no model**: deterministic English templates, one
sentence per entity of the structure ("Let B be a country that shares a border with A; ..."), each path entity a
letter, never a name. A model-backed verbalizer plugs in through the :class:`Verbalizer` protocol, and a
:class:`Rewriter` (``data_gen.neos.llm.LLMRewriter``) may then reword the text; whatever writes it,
:func:`check_coverage` verifies it against the structure, and a rewrite that fails falls back to the template.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from data_gen.kg import Edge, Structure
from data_gen.neos.observer import Description
from data_gen.world.properties import (
    CULTURE_RELATIONS,
    FEATURE_RELATIONS,
    LANDMARK_RELATION,
    MAIN_RELIGION,
    NATIONAL_DISH,
    TIME_ZONE,
    WILDLIFE_RELATIONS,
    WRITING_SYSTEM,
)

# relation -> (the subject described from the object {x}, the object described from the subject {x})
RELATION_PHRASES: dict[str, tuple[str, str]] = {
    "P36": ("has {x} as its capital", "is the capital of {x}"),
    "P1376": ("is the capital of {x}", "has {x} as its capital"),
    "P47": ("shares a border with {x}", "shares a border with {x}"),
    "P37": ("has {x} as an official language", "is an official language of {x}"),
    "P38": ("uses {x} as its currency", "is used in {x}"),
    "P30": ("lies on {x}", "contains {x}"),
    "P17": ("lies in {x}", "contains {x}"),
    "P131": ("is located in {x}", "contains {x}"),
    "P361": ("is part of {x}", "has {x} as one of its parts"),
    "P31": ("is an instance of {x}", "{x} is an instance of"),
    "P279": ("is a subclass of {x}", "{x} is a subclass of"),
    "P35": ("has {x} as its head of state", "is the head of state of {x}"),
    "P27": ("is a citizen of {x}", "{x} is a citizen of"),
    "P106": ("has {x} as an occupation", "is the occupation of {x}"),
    "P159": ("has its headquarters in {x}", "is where {x} has its headquarters"),
    "P112": ("was founded by {x}", "founded {x}"),
    "P463": ("is a member of {x}", "has {x} as a member"),
    "P1549": ("is the homeland of {x}", "names the natives of {x}"),
    "P189": ("was discovered in {x}", "{x} was discovered in"),
    "P138": ("is named after {x}", "{x} is named after"),
    "P61": ("was discovered by {x}", "discovered {x}"),
    **{rel: ("lies in {x}", "contains {x}") for rel in FEATURE_RELATIONS.values()},
    FEATURE_RELATIONS["river"]: ("flows through {x}", "{x} flows through"),
    **{rel: ("is associated with {x}", "{x} is associated with") for rel in CULTURE_RELATIONS.values()},
    **{rel: ("is found in {x}", "{x} is found in") for rel in WILDLIFE_RELATIONS.values()},
    LANDMARK_RELATION: ("lies in {x}", "contains {x}"),
    NATIONAL_DISH: ("has {x} as its national dish", "is the national dish of {x}"),
    MAIN_RELIGION: ("has {x} as its main religion", "is the main religion of {x}"),
    WRITING_SYSTEM: ("is written in {x}", "is the script of {x}"),
    TIME_ZONE: ("keeps {x}", "is the time zone of {x}"),
}
KIND_NOUNS: dict[str, str] = {
    "country": "country", "city": "city", "subdivision": "region", "us_state": "U.S. state",
    "federal_district": "federal district", "currency": "currency", "language": "language",
    "continent": "continent", "synset": "kind of thing", "brand": "brand", "article": "topic", "class": "class",
    "region": "region", "person": "person", "company": "company", "organization": "organization",
    "taxon": "species", "nationality": "nationality", "occupation": "occupation", "food": "food",
    "artifact": "artifact", "animal": "animal", "plant": "plant", "landmark": "landmark",
    "element": "chemical element", "dish": "dish", "religion": "religion",
    "script": "script", "time_zone": "time zone",
    **{kind: kind for kind in FEATURE_RELATIONS},
}


def relation_phrase(edge: Edge, relation_label: str, source_letter: str) -> str:
    """How the question states ``edge``: the target described from the source, in the fact's direction."""
    as_subject, as_object = RELATION_PHRASES.get(
        edge.relation, (f"has {{x}} as its {relation_label}", f"is the {relation_label} of {{x}}"))
    return (as_object if edge.forward else as_subject).format(x=source_letter)


@dataclass(frozen=True, slots=True)
class Verbalization:
    question: str
    spans: tuple[str, ...]  # one per structure edge, in ``structure.edges`` order
    letters: Mapping[str, str]  # entity -> its letter in the question


class Verbalizer(Protocol):
    def verbalize(
        self,
        structure: Structure,
        kinds: Mapping[str, str],
        relation_labels: Mapping[str, str],
        anchor_images: Sequence[str],
        checkpoints: Mapping[str, Description],
        ambiguous: Collection[str],
        nouns: Mapping[str, str] = {},
    ) -> Verbalization:
        """``anchor_images``: each anchor's image kind; ``ambiguous``: entities the text alone leaves open;
        ``nouns``: a node's noun phrase in place of its kind's, the facts that pin it (data_gen.neos.open_world)."""
        ...


class Rewriter(Protocol):
    def rewrite(self, verbalization: Verbalization, keep: Sequence[str],
                check: Callable[[str], str | None]) -> Verbalization:
        """A reworded ``verbalization`` that still contains every ``keep`` phrase and passes ``check`` (the
        coverage check: None or a reason), else ``verbalization`` itself."""
        ...


class TemplateVerbalizer:
    """Offline verbalizer, no model: fixed templates, letters for entities (see the module docstring)."""

    def verbalize(self, structure, kinds, relation_labels, anchor_images, checkpoints, ambiguous,
                  nouns: Mapping[str, str] = {}) -> Verbalization:
        letters = {node: string.ascii_uppercase[i] for i, node in enumerate(structure.nodes)}
        spans = {e: relation_phrase(e, relation_labels[e.relation], letters[e.source]) for e in structure.edges}
        sentences = []
        single = len(structure.anchors) == 1
        for i, (anchor, image_kind) in enumerate(zip(structure.anchors, anchor_images), 1):
            where = "the image" if single else f"image {i}"
            sentences.append(f"Let {letters[anchor]} be the {_noun(kinds, anchor)} whose {image_kind} is shown in "
                             f"{where}.")
        for node in structure.nodes:
            incoming = [e for e in structure.edges if e.target == node]
            if not incoming:
                continue
            noun = nouns.get(node) or _noun(kinds, node)
            own = re.fullmatch(rf"is (?:the|an?) ((?:\w+ )*{re.escape(noun)} of .+)", spans[incoming[0]])
            if len(incoming) == 1 and own:
                # "the occupation of C", "the official language of B": the kind said once, not "the language that
                # is an official language of B"
                spans[incoming[0]] = own.group(1)
                det = _article(own.group(1)) if node in ambiguous else "the"
                sentence = f"Let {letters[node]} be {det} {own.group(1)}"
            else:
                det = _article(noun) if node in ambiguous else "the"
                clause = " and ".join(spans[e] for e in incoming)
                sentence = f"Let {letters[node]} be {det} {noun} {_pronoun(kinds, node)} {clause}"
            if node in checkpoints:
                sentence += f"; {checkpoints[node].render()}"
            sentences.append(sentence + ".")
        sentences.append(f"Which {_noun(kinds, structure.answer)} is {letters[structure.answer]}?")
        return Verbalization(" ".join(sentences), tuple(spans[e] for e in structure.edges), letters)


def _noun(kinds: Mapping[str, str], node: str) -> str:
    return KIND_NOUNS.get(kinds.get(node, ""), "entity")


def _pronoun(kinds: Mapping[str, str], node: str) -> str:
    return "who" if kinds.get(node) == "person" else "that"


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"


def check_coverage(question: str, structure: Structure, verbalization: Verbalization,
                   withheld: Collection[str]) -> str | None:
    """None when every step is stated in the right direction and no withheld name leaks; else the reason.

    A step is covered when its span occurs inside the sentence that defines its target ("Let B be ... .") — so
    the text says which entity is described from which — and no path entity is named (whole-word, any case).
    """
    letters = verbalization.letters
    for edge, span in zip(structure.edges, verbalization.spans):
        sentence = re.search(rf"Let {letters[edge.target]} be .*?(?=\. (?:Let|Which) |\?)", question)
        if sentence is None or span not in sentence.group(0):
            return f"step {letters[edge.source]}->{letters[edge.target]} ({edge.relation}) not covered"
    for name in withheld:
        if len(name) >= 3 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question, re.IGNORECASE):
            return f"names a path entity ({name!r})"
    return None
