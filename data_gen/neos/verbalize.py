"""Step 6, verbalization, and the step-to-span coverage check that every question must pass.

:class:`TemplateVerbalizer` is the **offline default and uses no model**: one question per structure, in the
paper's style (Neos, Sec. 3.3 and App. A.1: the entity described, never named): the answer's noun phrase with the
path nested in relative clauses ("What is the capital of the country whose national flag is mostly green and red,
and that shares a border with the country whose locator map is shown in the image?"), its opening and order
(answer first, or the entry image first) varied by a hash of the structure. A model-backed verbalizer plugs in
through the :class:`Verbalizer` protocol, and a :class:`Rewriter` (``data_gen.neos.llm.LLMRewriter``) may then
reword the text; whatever writes it, :func:`check_coverage` verifies it against the structure, and a rewrite that
fails falls back to the template.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from data_gen.kg import Edge, Structure
from data_gen.neos.observer import Description
from data_gen.world.properties import (
    AIRPORT_CITY,
    CULTURE_RELATIONS,
    FEATURE_RELATIONS,
    FORMER_CURRENCY,
    HIGHEST_POINT,
    LANDMARK_RELATION,
    LOWEST_POINT,
    MAIN_RELIGION,
    NATIONAL_DISH,
    TIME_ZONE,
    WILDLIFE_RELATIONS,
    WRITING_SYSTEM,
)

# relation -> (the subject described from the object {x}, the object described from the subject {x}), each a
# relative clause ({p}: "that", "who" for a person) that ends with {x}, so the entity it starts from can be a nested
# noun phrase ("the capital of the country that shares a border with the country whose flag is shown in the image").
RELATION_PHRASES: dict[str, tuple[str, str]] = {
    "P36": ("whose capital is {x}", "{p} is the capital of {x}"),
    "P1376": ("{p} is the capital of {x}", "whose capital is {x}"),
    "P47": ("{p} shares a border with {x}", "{p} shares a border with {x}"),
    "P37": ("whose official languages include {x}", "{p} is an official language of {x}"),
    "P38": ("whose currency is {x}", "{p} is used in {x}"),
    "P30": ("{p} lies on {x}", "{p} contains {x}"),
    "P17": ("{p} lies in {x}", "{p} contains {x}"),
    "P131": ("{p} is located in {x}", "{p} contains {x}"),
    "P361": ("{p} is part of {x}", "{p} includes {x}"),
    "P31": ("{p} is an instance of {x}", "{p} has as an instance {x}"),
    "P279": ("{p} is a subclass of {x}", "{p} has as a subclass {x}"),
    "P35": ("whose head of state is {x}", "{p} is the head of state of {x}"),
    "P27": ("{p} is a citizen of {x}", "whose citizens include {x}"),
    "P106": ("whose occupations include {x}", "{p} is the occupation of {x}"),
    "P159": ("{p} has its headquarters in {x}", "{p} hosts the headquarters of {x}"),
    "P112": ("{p} was founded by {x}", "{p} founded {x}"),
    "P463": ("{p} is a member of {x}", "whose members include {x}"),
    "P1549": ("{p} is the homeland of {x}", "{p} names the natives of {x}"),
    "P189": ("{p} was discovered in {x}", "{p} saw the discovery of {x}"),
    "P138": ("{p} is named after {x}", "{p} gave its name to {x}"),
    "P61": ("{p} was discovered by {x}", "{p} discovered {x}"),
    **{rel: ("{p} lies in {x}", "{p} contains {x}") for rel in FEATURE_RELATIONS.values()},
    FEATURE_RELATIONS["river"]: ("{p} flows through {x}", "{p} is crossed by {x}"),
    **{rel: ("{p} is associated with {x}", "{p} is associated with {x}") for rel in CULTURE_RELATIONS.values()},
    **{rel: ("{p} is found in {x}", "{p} is home to {x}") for rel in WILDLIFE_RELATIONS.values()},
    LANDMARK_RELATION: ("{p} lies in {x}", "{p} contains {x}"),
    NATIONAL_DISH: ("whose national dish is {x}", "{p} is the national dish of {x}"),
    MAIN_RELIGION: ("whose main religion is {x}", "{p} is the main religion of {x}"),
    WRITING_SYSTEM: ("{p} is written in {x}", "{p} is the script of {x}"),
    TIME_ZONE: ("{p} keeps {x}", "{p} is the time zone of {x}"),
    AIRPORT_CITY: ("{p} serves {x}", "{p} is served by {x}"),
    HIGHEST_POINT: ("whose highest point is {x}", "{p} is the highest point of {x}"),
    LOWEST_POINT: ("whose lowest point is {x}", "{p} is the lowest point of {x}"),
    FORMER_CURRENCY: ("whose former currency is {x}", "{p} is the former currency of {x}"),
}
KIND_NOUNS: dict[str, str] = {
    "country": "country", "city": "city", "subdivision": "region", "us_state": "U.S. state",
    "federal_district": "federal district", "currency": "currency", "language": "language",
    "continent": "continent", "synset": "kind of thing", "brand": "brand", "article": "topic", "class": "class",
    "region": "region", "person": "person", "company": "company", "organization": "organization",
    "taxon": "species", "nationality": "nationality", "occupation": "occupation", "food": "food",
    "artifact": "artifact", "animal": "animal", "plant": "plant", "landmark": "landmark",
    "element": "chemical element", "dish": "dish", "religion": "religion",
    "script": "script", "time_zone": "time zone", "airport": "airport", "summit": "summit",
    "lowest_point": "place",
    **{kind: kind for kind in FEATURE_RELATIONS},
}


def relation_phrase(edge: Edge, relation_label: str, source: str, pronoun: str = "that") -> str:
    """How the question states ``edge``: a relative clause on the target, ending with the source ``source``, in
    the fact's direction."""
    as_subject, as_object = RELATION_PHRASES.get(
        edge.relation, ("{p} has as its " + relation_label + " {x}", "{p} is the " + relation_label + " of {x}"))
    return (as_object if edge.forward else as_subject).format(p=pronoun, x=source)


def fact_sentence(edge: Edge, relation_label: str, subject: str, source: str) -> str:
    """``edge``'s fact as a sentence about ``subject`` (the target's name): "France's capital is Paris.",
    "Paris is the capital of France." (a page of a loaded KG states its facts so)."""
    clause = _template(edge, {edge.relation: relation_label}).format(p="", x=source).strip()
    return f"{subject}'s {clause.removeprefix('whose ')}." if clause.startswith("whose ") else f"{subject} {clause}."


# "{p} is the capital of {x}" on its own says the target's kind: the target is "the capital of X" ("an official
# language of X"); "a member of X", "a citizen of X", "an instance of X" do not
_OWN = re.compile(r"\{p\} is (?:the|an) (?!instance)(.+ of) \{x\}")


@dataclass(frozen=True, slots=True)
class Verbalization:
    question: str
    spans: tuple[str, ...]  # one per structure edge, in ``structure.edges`` order


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


@dataclass(frozen=True, slots=True)
class _Phrase:
    """A node's noun phrase: ``lead`` (determiner and head, where a span of the edge out of it ends) and ``text``
    (the whole phrase, nested clauses included)."""

    lead: str
    text: str


# How the question opens, chosen per structure by a hash: its answer first ("What is the capital of ...?",
# "Which currency is used in ...?"), or a sentence about the entry image first and then the question on "that
# country". {np}: the answer's noun phrase, {noun}: its kind. Each opening's first words name the asked relation or
# the image, so openings vary with the content as well as the form.
ANSWER_FIRST = ("What is {np}?", "Name {np}.", "Identify {np}.", "{NP}: which {noun} is it?", "Find {np}.",
                "Tell me {np}.")
WHICH = "Which {noun} {clause}?"  # the answer by a single relative clause: "Which currency is used in ...?"
OWN = "Which {noun} is {np}?"  # an answer the relation names: "Which city is the capital of ...?"
# {image}: the entry image's kind ("national flag"), {anchor}: its entity's kind
IMAGE_FIRST = ("The image shows the {image} of a {anchor}. {question}", "Look at the {image} in the image. "
               "{question}", "In the image is the {image} of a {anchor}. {question}", "Given the {image} in the "
               "image, {lower}", "The {image} in the image belongs to a {anchor}. {question}")


class TemplateVerbalizer:
    """Offline verbalizer, no model (see the module docstring): one question of nested relative clauses about the
    answer, each entity described and never named."""

    def verbalize(self, structure, kinds, relation_labels, anchor_images, checkpoints, ambiguous,
                  nouns: Mapping[str, str] = {}) -> Verbalization:
        choice = int(hashlib.sha256(json.dumps(structure.to_dict(), sort_keys=True).encode()).hexdigest(), 16)
        single = len(structure.anchors) == 1
        image_first = single and choice % 3 == 0
        spans: dict[Edge, str] = {}
        phrases: dict[str, _Phrase] = {}
        for i, (anchor, image_kind) in enumerate(zip(structure.anchors, anchor_images), 1):
            noun = _noun(kinds, anchor)
            if image_first:
                phrases[anchor] = _Phrase(f"that {noun}", f"that {noun}")
            else:
                where = "the image" if single else f"image {i}"
                phrases[anchor] = _Phrase(f"the {noun}", f"the {noun} whose {image_kind} is shown in {where}")
        for node in structure.nodes:
            incoming = [e for e in structure.edges if e.target == node]
            if incoming:
                phrases[node] = _phrase(node, incoming, kinds, relation_labels, checkpoints, ambiguous, nouns,
                                        phrases, spans)
        answer = structure.answer
        noun = nouns.get(answer, "").split(",")[0] or _noun(kinds, answer)  # "diplomat", not its dates
        np = re.sub(r"^an? ", "the ", phrases[answer].text)
        incoming = [e for e in structure.edges if e.target == answer]
        template = _template(incoming[0], relation_labels)
        forms = list(ANSWER_FIRST)
        own = _OWN.fullmatch(template)
        if len(incoming) == 1 and own and answer not in nouns and noun not in own.group(1):
            forms.append(OWN)
        elif len(incoming) == 1 and not own and template.startswith("{p} ") and answer not in nouns:
            forms.append(WHICH)
        form = forms[(choice // 3) % len(forms)]
        clause = relation_phrase(incoming[0], relation_labels[incoming[0].relation], phrases[incoming[0].source].text,
                                 "").strip()
        question = form.format(np=np, NP=np[0].upper() + np[1:], noun=noun, clause=clause)
        if image_first:
            lead = IMAGE_FIRST[(choice // 7) % len(IMAGE_FIRST)]
            question = lead.format(image=anchor_images[0], anchor=_noun(kinds, structure.anchors[0]),
                                   question=question, lower=question[0].lower() + question[1:])
        return Verbalization(question, tuple(spans[e] for e in structure.edges))


def _phrase(node, incoming, kinds, labels, checkpoints, ambiguous, nouns, phrases, spans) -> _Phrase:
    """``node``'s noun phrase, its incoming edges' spans written into ``spans``."""
    noun = nouns.get(node) or _noun(kinds, node)
    own = _OWN.fullmatch(_template(incoming[0], labels)) if len(incoming) == 1 and node not in nouns else None
    if own and node not in checkpoints:
        # "the capital of X", "an official language of X": the relation names the kind once
        source = phrases[incoming[0].source]
        det = _article(own.group(1)) if node in ambiguous else "the"
        spans[incoming[0]] = f"{own.group(1)} {source.lead}"
        return _Phrase(f"{det} {own.group(1).rsplit(' of', 1)[0]}", f"{det} {own.group(1)} {source.text}")
    det = _article(noun) if node in ambiguous else "the"
    pronoun = _pronoun(kinds, node)
    for e in incoming:
        spans[e] = relation_phrase(e, labels[e.relation], phrases[e.source].lead, "").strip()
    # the visual clause first, so it cannot be read as a nested entity's; then one clause per incoming edge, each
    # ending with its source's noun phrase
    parts = [f"whose {checkpoints[node].clause()}"] if node in checkpoints else []
    parts += [relation_phrase(e, labels[e.relation], phrases[e.source].text, pronoun) for e in incoming]
    clauses = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + ", and " + parts[-1]
    return _Phrase(f"{det} {noun}", f"{det} {noun} {clauses}")


def _template(edge: Edge, labels: Mapping[str, str]) -> str:
    as_subject, as_object = RELATION_PHRASES.get(
        edge.relation, ("{p} has as its " + labels[edge.relation] + " {x}", "{p} is the " + labels[edge.relation]
                        + " of {x}"))
    return as_object if edge.forward else as_subject


def _noun(kinds: Mapping[str, str], node: str) -> str:
    return KIND_NOUNS.get(kinds.get(node, ""), "entity")


def _pronoun(kinds: Mapping[str, str], node: str) -> str:
    return "who" if kinds.get(node) == "person" else "that"


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"


def check_coverage(question: str, structure: Structure, verbalization: Verbalization,
                   withheld: Collection[str]) -> str | None:
    """None when every step is stated in the right direction and no withheld name leaks; else the reason.

    A step is covered when its span occurs in the question: the relation's words followed by the start of the
    phrase that describes the entity it starts from ("shares a border with the country", "capital of the
    country"), so the text says which entity is described from which. No path entity may be named (whole word,
    any case).
    """
    for edge, span in zip(structure.edges, verbalization.spans):
        if span not in question:
            return f"step {edge.source}->{edge.target} ({edge.relation}) not covered: {span!r}"
    for name in withheld:
        if len(name) >= 3 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question, re.IGNORECASE):
            return f"names a path entity ({name!r})"
    return None
