"""Question synthesis on a sampled path (§3.2, App. A.5-A.6): compose t2i2t subpaths into one relation, write the
terminal question by the modality of ``v_L`` and verify it, rewrite backward from the end to the start, then label.

Offline defaults, **no model**, deterministic templates:

- composition: the image-to-text relation with ``{x}`` replaced by the text-to-image one ("the <image kind> of {x}",
  "the national flag shown on the page of {x}"), so the composed relation mentions the scene/artwork it goes
  through, never the image node itself or an instruction to search;
- terminal text question: up to ``K2 = 5`` candidates from the KG facts of ``v_L`` whose value its article states
  (the evidence sentence); closed-book-answerable ones (``answerers.PriorAnswerer``) and ones whose answer is on
  the path are removed; the evaluator keeps the first one a closed-book model does not know (``CommonKnowledge``:
  a country's national dish before its capital, so the question needs the article), entity-valued before values;
- terminal image question: up to 5 palette questions, ``T = 3`` trials with and without the image
  (``PixelAnswerer`` / ``BlindImageAnswerer``), kept iff ``C_with = T`` and ``C_without < T``, fewest
  ``C_without`` preferred; a colour answer the image's source contradicts (it names two or more colours, the
  answer not among them: ``data_gen.common.source_colours``) is not asked, and a path left with none is rejected
  (``source_colours``);
- backward rewriting ``q_{n-1} = R(q_n; v_{n-1}, r_n, v_n)``: the reference to ``v_n`` becomes "the <noun> that
  <r_n with {x} = v_{n-1}>"; a text start node becomes an indirect description (a KG distinguishing set of its
  facts, else its article's lead sentence with the name masked); an image start node becomes "this image", the
  image going in as input.

A hop whose relation does not single out its target (``unique`` false) is rejected (``ambiguous_hop``); so is a
composed hop through an image of its own source (``image_detour``: "the country depicted in the locator map of X" is
X, so the image is decoration and the question needs no image search); a final question naming a path entity or the
answer is rejected (``leak``).

The words of the terminal question and of each backward rewrite come from a :class:`Wording`:
:class:`TemplateWording` (the templates above, no model) or ``data_gen.modalsearch.llm.LLMWording``. The choice of
fact or visual ask, its verification (closed-book and path checks, the ``T = 3`` trials) and the leak check are the
same whoever writes the words.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from data_gen.common.episode import found
from data_gen.common.source_colours import image_source_texts, source_excludes, stated_colours
from data_gen.kg import KG, NotDistinguishable, distinguishing_set
from data_gen.kg.distinguish import TAXONOMIC_RELATIONS, Fact
from data_gen.modalsearch.answerers import (
    READ_SIDES,
    T,
    VISUAL_QUESTIONS,
    BlindImageAnswerer,
    PixelAnswerer,
    PriorAnswerer,
    read_palette,
)
from data_gen.modalsearch.closed_book import ClosedBookProbe
from data_gen.modalsearch.facts import DATED, QUANTITIES, conflicting, dated_scope
from data_gen.modalsearch.graph import Graph, Node
from data_gen.modalsearch.relations import NOUNS, RELATIVE, kg_phrase, listed, relative
from data_gen.modalsearch.sampler import Path, brings_visual_evidence
from data_gen.neos.observer import NAMED_SOURCES, SHADE_OF
from data_gen.neos.open_world import OPEN_WORLD
from data_gen.modalsearch.schema import Label, PathHop, PathNode, Task, Terminal
from neos_core.world.model import Triple
from neos_core.world.store import World

K2 = 5
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
QUESTION_TEMPLATES: dict[str, str] = {
    "P36": "What is the capital of {REF}?", "P1376": "Which country's capital is {REF}?",
    "P38": "Which currency is used in {REF}?", "P37": "What is the official language of {REF}?",
    "P30": "Which continent contains {REF}?", "P17": "Which country contains {REF}?",
    "P131": "Which administrative region contains {REF}?", "P361": "Which larger region contains {REF}?",
    "P474": "What is the country calling code of {REF}?", "P78": "What is the top-level Internet domain of {REF}?",
    "P1549": "What is the demonym of {REF}?", "P1448": "What is the official name of {REF}?",
    "P1082": "According to its article, what is the population of {REF}?",
    "P2046": "According to its article, what is the area of {REF}?",
}
# Every template ends with {REF}: what replaces it is a long nested reference, and a word after it ("Of what larger
# region is {REF} a part?") would stand 30 words from the words it belongs to.
# Part-of: an answer reached through it is also right as any region that contains it ("Of what larger region is
# Mali a part?": "Western Africa", and "Africa" too), so those come as aliases.
CONTAINMENT = ("P361",)
# What a reader can still parse: at most this many relative clauses and words in one question.
MAX_CLAUSES = 4
MAX_WORDS = 50
_CLAUSE = re.compile(r"\b(?:that|which|whose|where|who)\b", re.IGNORECASE)
_REPEAT = re.compile(r"\b(\w+(?:\s+\w+){0,2})\s+\1\b", re.IGNORECASE)
_SKIP_RELATIONS = frozenset({*TAXONOMIC_RELATIONS, "P625", "x:vital_topic", "x:landlocked", "P297", "P298", "P299",
                             "P300", "P421", "P220", "P498", "P5061", "P465", "P856"})


@dataclass(frozen=True, slots=True)
class Rejection:
    filter: str
    detail: str


@dataclass(frozen=True, slots=True)
class TerminalContext:
    """What a writer of the terminal question gets: the node's noun, what is asked (a relation label or a visual
    ask), the evidence it is answered from, and the answer's forms (the question must not contain them)."""

    noun: str
    asks: str
    evidence: str
    answers: tuple[str, ...]


class Wording(Protocol):
    def terminal(self, template: str, context: TerminalContext) -> str:
        """q_L with ``{REF}`` standing for ``v_L``: ``template`` itself or a rewording of it."""
        ...

    def rewrite(self, question: str, mark: str, reference: str, keep: str) -> str:
        """``R``: ``question`` with ``mark`` replaced by ``reference`` (which contains the mark ``keep``)."""
        ...


class TemplateWording:
    """Offline wording, no model: the template, and the reference put in place of the mark."""

    name = "templates"

    def terminal(self, template: str, context: TerminalContext) -> str:
        return template

    def rewrite(self, question: str, mark: str, reference: str, keep: str) -> str:
        return question.replace(mark, reference)


def path_key(graph_name: str, path: Path) -> str:
    return hashlib.sha256("|".join((graph_name, *path.nodes)).encode()).hexdigest()[:16]


def modality(graph: Graph, path: Path) -> tuple[str, Label]:
    kinds = [graph.nodes[n].kind for n in path.nodes]
    pattern = "-".join("I" if k == "image" else "T" for k in kinds)
    if brings_visual_evidence(graph, path):
        return pattern, "search_required"
    return pattern, "input_only" if kinds[0] == "image" else "text_only"


def compose(graph: Graph, path: Path) -> list[PathHop]:
    """Path edges as question hops, each t2i -> image -> i2t subpath composed into one t2i2t hop."""
    hops: list[PathHop] = []
    edges = list(path.edges)
    i = 0
    while i < len(edges):
        e = edges[i]
        nxt = edges[i + 1] if i + 1 < len(edges) else None
        if e.kind == "t2i" and nxt is not None and nxt.kind == "i2t":
            image = graph.nodes[e.target]
            phrase = nxt.relation.phrase.replace("{x}", e.relation.phrase.removeprefix("is "))
            hops.append(PathHop(source=e.source, target=nxt.target, kind="t2i2t", relation=phrase,
                                relation_source=f"composed:{e.relation.source}+{nxt.relation.source}", via=image.id))
            i += 2
            continue
        hops.append(PathHop(source=e.source, target=e.target, kind=e.kind, relation=e.relation.phrase,
                            relation_source=e.relation.source, peers=list(e.relation.peers)))
        i += 1
    return hops


def reference(hop: PathHop, node: Node, source_ref: str) -> str:
    """How the question names ``node`` from its predecessor's reference ("is the capital of {x}" -> "the capital
    of <ref>"; "shares a border with {x}" -> "the country that shares a border with <ref>")."""
    return relative(node.noun, hop.relation.replace("{x}", source_ref))


# Words by which an article sentence states a relation, beyond the words of the relation's label.
_LIES_IN = ("lies in", "located in", "country in", "state in", "territory in")
RELATION_WORDS: dict[str, tuple[str, ...]] = {
    "P30": ("continent", *_LIES_IN), "P17": ("country", *_LIES_IN), "P131": ("region", "states of", *_LIES_IN),
    "P361": ("region", "part of", "comprises", "subregion", *_LIES_IN), "P1082": ("population", "inhabitants"),
    "P2046": ("area", "covers"), "P1549": ("demonym",), "P78": ("domain",), "P474": ("calling code",),
    "P1448": ("officially",), "P38": ("used in",),
}


def supports(sentence: str, forms: list[str], relation: str, label: str) -> bool:
    """The sentence can serve as a hop's evidence: it names the value (one of ``forms``) and states the relation,
    by a word of its label or one of ``RELATION_WORDS``, not just mentions the value in passing."""
    return any(found(f, sentence) for f in forms) and states(sentence, relation, label)


def states(sentence: str, relation: str, label: str) -> bool:
    """The sentence states a ``relation`` fact: a word of its label or one of ``RELATION_WORDS``."""
    words = [w for w in re.findall(r"[a-z]+", label.lower()) if len(w) > 3]
    return any(found(w, sentence) for w in (*words, *RELATION_WORDS.get(relation, ())))


def terminal_template(relation: str, label: str, noun: str) -> str | None:
    """The question asking for the object of a ``relation`` fact of ``{REF}``: its own template, else one made
    from the relation's phrase ("Which country shares a border with {REF}?", "Which country was {REF} discovered
    in?"); None when the phrase cannot be turned into a question ("{x} flows through"). A label is no noun phrase
    ("shares border with"), so "What is the <label> of {REF}?" would not read."""
    if relation in QUESTION_TEMPLATES:
        return QUESTION_TEMPLATES[relation]
    phrase = kg_phrase(relation, label, True).replace("{x}", "{REF}")
    if phrase.startswith("is the "):
        return f"What {phrase}?"
    if phrase.startswith("whose "):
        return f"Which {noun}'s {phrase[6:]}?"
    inverted = re.fullmatch(r"\{REF\} (is|was) (.+)", phrase)
    if inverted:
        return f"Which {noun} {inverted.group(1)} {{REF}} {inverted.group(2)}?"
    return None if phrase.startswith("{REF}") or RELATIVE.match(phrase) else f"Which {noun} {phrase}?"


def grammar_problem(question: str) -> str | None:
    """Why a reader would stumble over ``question``: a repeated word or phrase ("the continent the continent"),
    two name clues (each attaches to the nearest noun, so the second one reads as the first's), relative clauses
    nested deeper than ``MAX_CLAUSES``, or more than ``MAX_WORDS`` words; None when it reads."""
    quoted = re.sub(r"\u201c[^\u201d]*\u201d", "QUOTE", question)  # a quoted article sentence is not our grammar
    repeat = _REPEAT.search(quoted)
    if repeat is not None:
        return f"repeats {repeat.group(1)!r}"
    clues = quoted.count("whose name begins with")
    if clues > 1:
        return f"{clues} name clues"
    clauses = len(_CLAUSE.findall(quoted))
    if clauses > MAX_CLAUSES:
        return f"{clauses} relative clauses (at most {MAX_CLAUSES})"
    words = len(question.split())
    if words > MAX_WORDS:
        return f"{words} words (at most {MAX_WORDS})"
    return None


class QuestionWriter:
    """``text_only``: also write questions on paths without an image (the paper samples those separately, as an
    ablation, outside the RL and SFT mix; rejected as ``text_only`` otherwise)."""

    def __init__(self, world: World, kg: KG, seed: int = 0, wording: Wording | None = None,
                 text_only: bool = False) -> None:
        self.world = world
        self.kg = kg
        self.seed = seed
        self.text_only = text_only
        self.wording = wording or TemplateWording()
        self.prior = PriorAnswerer(world)
        self.pixels = PixelAnswerer()
        self.blind = BlindImageAnswerer(world)
        self.closed_book = ClosedBookProbe(world, kg)
        self._facts: dict[str, list[Triple]] = {}
        self._leads: Counter[str] | None = None
        self.counts: Counter[str] = Counter()  # terminal facts not asked, by why (facts.py)
        for t in world.triples:
            self._facts.setdefault(t.s, []).append(t)

    def write(self, graph: Graph, path: Path, full: frozenset[str] = frozenset()) -> Task | Rejection:
        """The question on ``path``; ``full``: answer types the run has no room for, so a terminal fact of another
        type is asked where the article states one."""
        key = path_key(graph.name, path)
        rng = random.Random(f"{self.seed}:{key}")
        nodes = [graph.nodes[n] for n in path.nodes]
        pattern, label = modality(graph, path)
        if label == "text_only" and not self.text_only:
            return Rejection("text_only", f"no image on the path ({pattern})")
        if nodes[0].kind == "image" and self.world.images[nodes[0].ref].source in NAMED_SOURCES:
            return Rejection("named_start_image", f"{nodes[0].ref} prints its entity's name")  # Neos' entry rule
        if not all(e.relation.unique for e in path.edges):
            bad = next(e for e in path.edges if not e.relation.unique)
            return Rejection("ambiguous_hop", f"{bad.source}->{bad.target}: {bad.relation.phrase}")
        detour = next((h for h in compose(graph, path) if h.kind == "t2i2t" and graph.nodes[h.via].entity
                       and graph.nodes[h.via].entity == graph.nodes[h.source].entity), None)
        if detour is not None:  # "the country depicted in the locator map of <Nepal>" is Nepal: no image needed
            return Rejection("image_detour", f"{detour.via} depicts {detour.source} itself")
        path_entities = {n.entity for n in nodes if n.entity}
        terminal = self._terminal_text(nodes[-1], path_entities, rng, full) if nodes[-1].kind == "text" \
            else self._terminal_image(nodes[-1])
        if isinstance(terminal, Rejection):
            return terminal
        answer, aliases, answer_type, term = terminal
        hops = compose(graph, path)
        hop_nodes = [nodes[0]] + [graph.nodes[h.target] for h in hops]
        marks = [f"\u27e8v{i}\u27e9" for i in range(len(hop_nodes))]
        question = term.template.replace("{REF}", marks[-1])
        rewrites = [term.question]
        for n in range(len(hops), 0, -1):  # backward: replace v_n by its description through v_{n-1}
            question = self.wording.rewrite(question, marks[n], reference(hops[n - 1], hop_nodes[n], marks[n - 1]),
                                            marks[n - 1])
            rewrites.append(question)
        start = nodes[0]
        clues: list[str] = []
        start_facts: tuple[Fact, ...] | None = None
        if start.kind == "image":
            question = question.replace(marks[0], "this image")
        else:
            indirect = self._indirect(start, path_entities)
            if indirect is None:
                return Rejection("start_description", f"no indirect description of {start.name}")
            described, clues, start_facts = indirect
            question = question.replace(marks[0], described)
        question = question[:1].upper() + question[1:]
        withheld = {answer, *aliases}
        for node in nodes:
            if node.kind == "text":
                entity = self.world.entities.get(node.entity or "")
                withheld |= {node.name, *(entity.aliases if entity else [])}
        leaked = sorted(n for n in withheld if len(n) >= 3 and found(n, question))
        if leaked:
            return Rejection("leak", f"the question names {leaked[0]!r}")
        problem = grammar_problem(question)
        if problem is not None:
            return Rejection("grammar", problem)
        first = nodes[0]
        return Task(
            id=key, graph=graph.name, seed=self.seed, question=question, answer=answer, aliases=aliases,
            answer_type=answer_type, nodes=[_path_node(self.world, n) for n in nodes], hops=hops, modality=pattern,
            label=label, closed_book=self.closed_book.solves(graph, path, start_facts, term.fact),
            start_image_id=first.ref if first.kind == "image" else None,
            start_image_url=first.url if first.kind == "image" else None, start_clues=clues, rewrites=rewrites,
            terminal=term,
        )

    # -- terminal questions -------------------------------------------------------------------------------------

    def _terminal_text(self, node: Node, path_entities: set[str], rng: random.Random,
                       full: frozenset[str] = frozenset()):
        page = self.world.pages[node.ref]
        candidates = []
        for t in self._facts.get(node.entity or "", []):
            if t.p in _SKIP_RELATIONS or (not t.literal and t.o not in self.world.entities):
                continue
            if (t.p, True) in OPEN_WORLD:
                continue  # one organisation of the country in the KG, many in reality: not one answer
            same = [u for u in self._facts[node.entity] if u.p == t.p]
            if len(same) != 1:
                continue  # the article's answer would not be unique
            forms = _literal_forms(t.o) if t.literal else _entity_forms(self.world, t.o)
            label = self.world.relations[t.p].label if t.p in self.world.relations else t.p
            template = terminal_template(t.p, label, "value" if t.literal else NOUNS.get(
                self.world.entities[t.o].kind, "entity"))
            sentence = next((s for s in _SENTENCE.split(page.text) if supports(s, forms, t.p, label)), None)
            if sentence is not None and t.literal and t.p in QUANTITIES:
                sentence = self._quantity_evidence(t, label, forms, page.text)
            if sentence is not None and template is not None:
                candidates.append((t, forms, sentence))
        rng.shuffle(candidates)
        candidates = candidates[:K2]
        kept = [c for c in candidates if c[0].o not in path_entities
                and self.prior.answer(c[0].p) not in c[1]]
        if not kept:
            return Rejection("terminal_text", f"{len(candidates)} candidates, none survives the closed-book and "
                                              "path checks")
        known = self.closed_book.knowledge.knows
        # a type with room first, then long-tail, then entity-valued (stable: keeps the rng order)
        t, forms, sentence = min(kept, key=lambda c: (self._answer_type(c[0]) in full,
                                                      known(node.entity or "", c[0].p, c[0].literal), c[0].literal))
        label = self.world.relations[t.p].label if t.p in self.world.relations else t.p
        noun = "value" if t.literal else NOUNS.get(self.world.entities[t.o].kind, "entity")
        base = terminal_template(t.p, label, noun) or ""
        if t.literal and t.p in DATED:  # the figure as of its source's year: "what was the 2024 population of"
            base = f"According to its article, what was the {dated_scope(sentence)} {label} of {{REF}}?"
        template = self.wording.terminal(base, TerminalContext(node.noun, label, sentence.strip(), tuple(forms)))
        answer_type = self._answer_type(t)
        term = Terminal(modality="text", template=template, question=template.replace("{REF}", node.name),
                        answer=forms[0], evidence=sentence.strip(), candidates=len(candidates), passed=len(kept),
                        fact=t.p)
        aliases = set(forms[1:])
        if not t.literal and t.p in CONTAINMENT:
            aliases |= {self.world.entities[c].label for c in self.containers(t.o)} - {forms[0]}
        return forms[0], sorted(aliases), answer_type, term

    def _answer_type(self, fact: Triple) -> str:
        """A value's type is what it measures or names ("literal:population", "literal:demonym"): the answer-type
        cap and stats.json then tell a run of populations from one mixing populations, areas and calling codes."""
        if not fact.literal:
            return self.world.entities[fact.o].kind
        return f"literal:{self.world.relations[fact.p].label if fact.p in self.world.relations else fact.p}"

    def _quantity_evidence(self, fact: Triple, label: str, forms: list[str], text: str) -> str | None:
        """The sentence a quantity is asked from (``data_gen.modalsearch.facts``): None, counted in ``counts``, when
        a sentence of the page states another figure for it (``source_conflict``) or, for a count that changes over
        time, none dates it and counts the entity itself (``number_undated``)."""
        stating = [s for s in _SENTENCE.split(text) if states(s, fact.p, label)]
        if conflicting(fact.o, stating) is not None:
            self.counts["source_conflict"] += 1
            return None
        supporting = [s for s in stating if any(found(f, s) for f in forms)]
        if fact.p in DATED:
            supporting = [s for s in supporting if dated_scope(s)]
            if not supporting:
                self.counts["number_undated"] += 1
                return None
        return supporting[0] if supporting else None

    def containers(self, entity_id: str) -> set[str]:
        """Every region that contains ``entity_id`` through the containment relations, transitively."""
        seen: set[str] = set()
        frontier = [entity_id]
        while frontier:
            current = frontier.pop()
            for rel in CONTAINMENT:
                for parent in self.kg.objects(current, rel) - seen:
                    if parent in self.world.entities:
                        seen.add(parent)
                        frontier.append(parent)
        return seen

    def _terminal_image(self, node: Node):
        path = self.world.image_path(node.ref)
        scored = []
        for ask in VISUAL_QUESTIONS[:K2]:
            gold = ask[2](read_palette(path, READ_SIDES[-1]))
            if gold is None:
                continue
            c_with = sum(self.pixels.answer(path, ask, trial) == gold for trial in range(T))
            c_without = T * (self.blind.answer(node.noun, ask) == gold)
            scored.append((ask, gold, c_with, c_without))
        passing = [s for s in scored if s[2] == T and s[3] < T]
        if not passing:
            return Rejection("terminal_image", f"{len(scored)} candidates, none has C_with = T and C_without < T")
        stated = stated_colours(image_source_texts(self.world, node.ref))
        contradicted = [s for s in passing if s[0][0] != "colour_count" and source_excludes(s[1], stated)]
        passing = [s for s in passing if s not in contradicted]
        if not passing:
            return Rejection("source_colours", f"{node.ref}: the source states {sorted(stated or ())}, not "
                                               + ", ".join(sorted({s[1] for s in contradicted})))
        ask, gold, c_with, c_without = min(passing, key=lambda s: s[3])
        template = self.wording.terminal(ask[1], TerminalContext(node.noun, ask[1], "the image's pixels", (gold,)))
        term = Terminal(modality="image", template=template, question=template.replace("{REF}", f"the {node.noun} "
                        f"({node.description})"), answer=gold, evidence=f"pixels of {node.url}",
                        candidates=len(scored), passed=len(passing), c_with=c_with, c_without=c_without,
                        ask=ask[0])
        # a shade's answer is also right as its colour ("dark blue": "blue"), as a person reads it
        aliases = [SHADE_OF[gold]] if gold in SHADE_OF else []
        return gold, aliases, "colour" if ask[0] != "colour_count" else "count", term

    # -- the start node -----------------------------------------------------------------------------------------

    def _indirect(self, node: Node, path_entities: set[str]) -> tuple[str, list[str], tuple[Fact, ...] | None] | None:
        """A KG distinguishing set of the start entity (no path entity used), else its masked lead sentence; with
        what a solver searches for to find it (the neighbours the set names, or the quoted sentence) and the set's
        facts (None for the sentence)."""
        entity = self.world.entities.get(node.entity or "")
        noun = NOUNS.get(entity.kind, "entity") if entity else "topic"
        if entity is not None and self.kg.degree(entity.id):
            try:
                facts = distinguishing_set(self.kg, entity.id, exclude=path_entities)
            except NotDistinguishable:
                facts = ()
            if facts:
                neighbours: dict[str, list[str]] = {}  # one clause per phrase: "shares a border with A and B"
                for f in facts:
                    label = self.world.relations[f.relation].label if f.relation in self.world.relations else f.relation
                    neighbour = self.world.entities[f.neighbour].label if f.neighbour in self.world.entities \
                        else f.neighbour
                    neighbours.setdefault(kg_phrase(f.relation, label, not f.outgoing), []).append(neighbour)
                clauses = [phrase.replace("{x}", listed(names)) for phrase, names in neighbours.items()]
                clauses = [c if RELATIVE.match(c) else f"that {c}" for c in clauses]
                return (f"the {noun} {' and '.join(clauses)}", [n for names in neighbours.values() for n in names],
                        facts)
        lead = self._masked_lead(node.ref, node.name)
        if lead is None or self._lead_counts()[lead] > 1:
            return None  # "___ is one of the 16 states of Germany." opens 16 pages: it describes none of them
        return f"the {noun} described as \u201c{lead}\u201d", [lead], None

    def _masked_lead(self, page_id: str, name: str) -> str | None:
        """The page's first sentence with its entity's names masked; None when it names none or is too long."""
        page = self.world.pages[page_id]
        entity = self.world.entities.get(page.entity_id or "")
        lead = _SENTENCE.split(page.text.strip())[0]
        names = {name, *((entity.label, *entity.aliases) if entity else ())}
        for each in sorted(names, key=len, reverse=True):
            lead = re.sub(rf"(?<!\w){re.escape(each)}(?!\w)", "___", lead, flags=re.IGNORECASE)
        return lead if "___" in lead and len(lead) <= 300 else None

    def _lead_counts(self) -> Counter[str]:
        """How many of the world's pages open with each masked lead sentence (computed once)."""
        if self._leads is None:
            self._leads = Counter(filter(None, (self._masked_lead(p.id, p.title) for p in self.world.pages.values())))
        return self._leads


def _entity_forms(world: World, entity_id: str) -> list[str]:
    entity = world.entities[entity_id]
    return [entity.label, *[a for a in entity.aliases if a.lower() != entity.label.lower()]]


def _literal_forms(value: str) -> list[str]:
    """The value as the article would write it (thousands separators for integers) and as stored."""
    if value.isdigit() and len(value) > 4:
        return [f"{int(value):,}", value]
    return [value]


def _path_node(world: World, node: Node) -> PathNode:
    source = world.pages.get(node.source_page) if node.source_page else None
    return PathNode(id=node.id, kind=node.kind, name=node.name, noun=node.noun, url=node.url, entity=node.entity,
                    description=node.description, source_page_url=source.url if source else None)
