"""The ModalSearch closed-book probe (issue 36): a question counts as search-required (ModalSearcher, App. B: new
visual evidence fetched mid-search) only when a strong VLM cannot answer it with no tool call at all.

The solver knows what ``data_gen.common.closed_book`` says such a model knows (the Neos probe's knowledge) and walks
the question's path as a reader would: it names a start image it recognises (a country's flag or locator map) or a
start described by common facts (or by a lead sentence quoting a code), pictures the flag or map of a country it has
reached, takes every hop that is a common fact (reading a flag clue among countries, or a name's initial; beyond the
Neos probe's facts, the country a state or province lies in), and
states the terminal fact when it is common or the colours of a national flag it pictures. A hop quoting an article's
sentence, an image it does not recognise, a long-tail fact (a discoverer, a time zone, a script) or a dated figure
stops it: the question needs a tool.
"""

from __future__ import annotations

from collections.abc import Sequence

from data_gen.common.closed_book import CommonKnowledge
from data_gen.kg import KG
from data_gen.kg.distinguish import Fact
from data_gen.modalsearch.graph import Graph, GraphEdge
from data_gen.modalsearch.relations import FLAG_SOURCE
from data_gen.modalsearch.sampler import Path
from data_gen.world.infobox_flags import SUBDIVISION_KINDS
from neos_core.world.store import World

# Entities the model names from their masked lead sentence: a country's describes it as plainly as its flag; a
# currency's, a language's or an element's quotes its code or symbol ("The ___ (ISO 4217 code NGN, symbol ₦)",
# "___ is a chemical element; it has symbol Ac and atomic number 89").
NAMED_BY_LEAD = frozenset({"country", "currency", "language", "element"})
# Images whose colours the model states from memory: a national flag's (a locator map's shares are the renderer's).
KNOWN_PALETTES = frozenset({FLAG_SOURCE})
# Which country a state or province lies in: the model places Bavaria, Montana or Inner Mongolia as surely as it names
# their capitals (which it knows); of a country's states it cannot single one out, so only this direction.
LIES_IN = frozenset({"P131", "P17"})


class ClosedBookProbe:
    def __init__(self, world: World, kg: KG) -> None:
        self.world = world
        self.kg = kg
        self.knowledge = CommonKnowledge(kg, {e.id: e.kind for e in world.entities.values()})

    def solves(self, graph: Graph, path: Path, start_facts: Sequence[Fact] | None, fact: str | None) -> bool:
        """Whether the answer follows from common knowledge alone: ``start_facts`` describe a text start (None: its
        masked lead sentence), ``fact`` is the terminal text question's relation (None: a visual ask)."""
        nodes = [graph.nodes[n] for n in path.nodes]
        reach = self._start(nodes[0].ref, nodes[0].kind, nodes[0].entity, start_facts)
        for edge in path.edges:
            if reach is None:
                return False
            reach = self._hop(graph, edge, reach)
        if reach is None:
            return False
        last = nodes[-1]
        if last.kind == "image":
            return self.world.images[last.ref].source in KNOWN_PALETTES
        if fact is None or last.entity is None:
            return False
        if self.knowledge.knows_value(last.entity, fact):
            return True
        answers = self._step(reach, fact, True)
        return answers is not None and len(answers) == 1

    def _start(self, ref: str, kind: str, entity: str | None, facts: Sequence[Fact] | None) -> set[str] | None:
        if entity is None:
            return None
        if kind == "image":
            return {entity} if self.knowledge.recognises(entity, self.world.images[ref].source) else None
        if facts is None:
            return {entity} if self.knowledge.kinds.get(entity) in NAMED_BY_LEAD else None
        reach: set[str] | None = None
        for f in facts:
            step = self._step({f.neighbour}, f.relation, not f.outgoing)
            if step is None:
                return None
            reach = step if reach is None else reach & step
        return reach if reach == {entity} else None

    def _hop(self, graph: Graph, edge: GraphEdge, reach: set[str]) -> set[str] | None:
        """The entities the solver holds after ``edge`` (one: every hop singles its target out), None when it cannot
        take it."""
        source, target = graph.nodes[edge.source], graph.nodes[edge.target]
        if target.entity is None:
            return None
        if edge.relation.source == "page_figure":  # another's flag on the page: known when their link is common
            return {target.entity} if self._linked(reach, source.entity, target.entity) else None
        if edge.kind == "t2i":  # it pictures the flag or map of the country it holds
            recognised = self.knowledge.recognises(target.entity, self.world.images[target.ref].source)
            return {target.entity} if recognised and reach == {target.entity} else None
        if edge.relation.source == "depiction":  # the entity an image it recognised shows
            return reach if reach == {target.entity} else None
        relation = edge.relation.kg_relation
        if relation is None or source.entity is None:
            return None  # a sentence quoted from an article: only the article says what fills the blank
        forward = target.entity in self.kg.objects(source.entity, relation)
        step = self._step(reach, relation, forward)
        if step is None or target.entity not in step:
            return None
        if len(step) > 1 and edge.relation.peers and not all(self.knowledge.recognises(c, FLAG_SOURCE)
                                                               for c in step):
            return None  # a flag clue among entities whose flags it does not know
        return {target.entity} if len(step) == 1 or edge.relation.unique else None

    def _linked(self, reach: set[str], source: str | None, target: str) -> bool:
        """Whether a common fact between ``source`` and ``target`` leads the solver from ``reach`` to ``target``
        (a capital's page shows its state's flag, and the model knows the city is that state's capital)."""
        if source is None:
            return False
        facts = [(p, True) for p, objs in self.kg.outgoing(source).items() if target in objs]
        facts += [(p, False) for p, subs in self.kg.incoming(source).items() if target in subs]
        return any(target in (self._step(reach, p, forward) or ()) for p, forward in facts)

    def _step(self, sources: set[str], relation: str, forward: bool) -> set[str] | None:
        """``CommonKnowledge.step``, and the country each of ``sources`` lies in when all are states or
        provinces."""
        kinds = self.knowledge.kinds
        if forward and relation in LIES_IN and sources and all(kinds.get(s) in SUBDIVISION_KINDS for s in sources):
            countries = [{o for o in self.kg.objects(s, relation) if kinds.get(o) == "country"} for s in sources]
            if all(countries):
                return set().union(*countries)
        return self.knowledge.step(sources, relation, forward)
