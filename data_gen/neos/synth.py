"""Steps 1-6 of Neos task synthesis over a world: seeds, DAGs, identifiable structures with visual checkpoints,
blind grounding, verbalization and coverage. Deterministic given the world and the seed."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from data_gen.common.source_colours import image_source_texts, source_disagrees, stated_colours
from data_gen.kg import (
    KG,
    ExpansionConfig,
    NotDistinguishable,
    Structure,
    StructureConfig,
    enumerate_structures,
    expand,
)
from data_gen.kg.distinguish import TAXONOMIC_RELATIONS, DistinguishingConfig, convergent_sets
from data_gen.neos.closed_book import ClosedBookSolver
from data_gen.neos.observer import IMAGE_KINDS, NAMED_SOURCES, Description, Observer, PaletteObserver, ground
from data_gen.neos.open_world import complete_lists, open_reason, pinning, pinning_noun, unlisted
from data_gen.neos.verbalize import Rewriter, TemplateVerbalizer, Verbalizer, check_coverage
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
from neos_core.neos_tasks import Alternative, EntryImage, Step, Task
from neos_core.world.model import page_url
from neos_core.world.store import World

# The offline world's kinds a question can end at. Not seeded: kinds every structure reaches only through open-world
# relations that nothing stated pins (data_gen.neos.open_world): WordNet classes (P31/P279), occupations (P106),
# natural features, foods and artifacts, animals and plants, landmarks; each of their seeds would be expanded,
# grounded and then rejected as ``open_world``. A person is pinned by its occupation and dates, or as the one
# discoverer of a chemical element; an element by where it was discovered or the country it is named after; an
# organisation whose member list the world holds completely by its member count (WordNet's stay open); a dish or a
# religion as its country's one national dish or main religion; a script as its language's one script; a time
# zone or an airport as a capital's; a summit or a place as its country's highest or lowest point.
SEED_KINDS = frozenset({"country", "city", "subdivision", "us_state", "currency", "language", "region", "continent",
                        "nationality", "person", "element", "organization", "dish", "religion",
                        "script", "time_zone", "airport", "summit", "lowest_point"})


# Relation families withheld from distinguishing sets, one DAG per entry: greedy selection always takes the same
# most selective fact, so each variant forces the seed's DAG through other relations. A subdivision (P131) or a
# capital (P36, P1376, P17) singles its country out in one fact, but a subdivision has no other fact and a city no
# image, so either ends the DAG one hop from the country, too short for an anchor and a checkpoint. Every variant
# but the first withholds subdivisions; the borders and language/currency variants come twice, once keeping
# capitals (a city seed is identified through its country) and once without them (a country seed through its
# image-bearing neighbours). A natural feature lying in one country and a nationality (P1549) are dead ends of the
# same sort, and so are a food, an artifact, an animal, a plant or a landmark of one country and a country's only
# citizen (P27) the world knows, and so is the one chemical element discovered in (P189) or named after (P138) one
# country, and a country's national dish, main religion or former currency, a language's script and a capital's
# time zone or airport, and a country's highest and lowest points.
_DEAD_ENDS = frozenset({"P36", "P1376", "P17", "P131", "P1549", "P27", "P189", "P138", *FEATURE_RELATIONS.values(),
                        *CULTURE_RELATIONS.values(), *WILDLIFE_RELATIONS.values(), LANDMARK_RELATION, NATIONAL_DISH,
                        MAIN_RELIGION, WRITING_SYSTEM, TIME_ZONE, FORMER_CURRENCY, AIRPORT_CITY,
                        HIGHEST_POINT, LOWEST_POINT})

# A chemical element's country (P189, P138) is a dead end for the country but the way to the element's one
# discoverer (P61): Finland's only element is yttrium, found by Johann Gadolin alone. The last variant withholds
# the other dead ends and keeps these, so the element is known by its country, and the country by its borders,
# region or organisations: not by a language or currency of its own (Finnish; withheld too, another dead end) nor
# by an element (the distinguishing penalty below). A subdivision with a flag is no dead end either: its flag is an
# entry image that no closed-book reader recognises, so the last variant keeps P131 alone, and a country that one of
# its subdivisions singles out is reached from that flag ("the official language of the country of the region that
# includes the country containing the region whose flag is shown": Andalusia's flag, Spain, Southern Europe, Andorra,
# Catalan).
RELATION_VARIANTS: tuple[frozenset[str], ...] = (
    frozenset(), _DEAD_ENDS, frozenset({"P131", "P47"}), frozenset({"P131", "P37", "P38"}),
    _DEAD_ENDS | {"P47"}, _DEAD_ENDS | {"P37", "P38"}, (_DEAD_ENDS - {"P189", "P138"}) | {"P37", "P38"},
    _DEAD_ENDS - {"P131"},
)

# A natural feature or a nationality (P1549) is known by its country alone, so as a seed it needs a dead-end
# relation for its own first fact, and its country must then be identified without one: the variants above that
# withhold the dead ends, again, withholding them from every node but the seed. (A country with a currency or a
# language of its own is singled out by it, another dead end: hence the variant without P37 and P38.) A script's
# language is known by its country (P37) alone, and that country by its currency unless a variant without P38 makes
# its borders do; a time zone's capital is known as its country's capital (P1376, a dead end), and that country by
# its demonym or currency unless a variant keeps P1376 alone. The last keeps P131 alone, as RELATION_VARIANTS' last
# does, and withholds languages and currencies too, so a demonym's country is known by its border with a country
# that one of its subdivisions singles out (Andalusia's flag, Spain, Andorra, "Andorran").
SEED_FREE_VARIANTS: tuple[frozenset[str], ...] = (_DEAD_ENDS, _DEAD_ENDS | {"P47"}, _DEAD_ENDS | {"P37", "P38"},
                                                  _DEAD_ENDS | {"P38"}, (_DEAD_ENDS - {"P1376"}) | {"P37", "P38"},
                                                  (_DEAD_ENDS - {"P131"}) | {"P37", "P38"})

# A country's greedy set takes two borders (two facts of one relation) or three facts, which no structure states
# (a path states one fact into its answer, a convergent structure two of distinct relations). So the seed also gets
# a DAG per set that a structure states whole (data_gen.kg.distinguish.convergent_sets: "the country of Western
# Europe that borders Czechia"), with each of these withheld from the sets and from the other nodes: the dead ends,
# then borders or languages and currencies too, as in RELATION_VARIANTS.
CONVERGENT_VARIANTS: tuple[frozenset[str], ...] = (_DEAD_ENDS, _DEAD_ENDS | {"P47"}, _DEAD_ENDS | {"P37", "P38"})

# A loaded Wikidata KG holds more single-valued facts that lead to no image (a head of state, a citizenship):
# greedy selection takes them as it takes capitals, so three more variants keep them out too (data_gen.neos.kg_world).
KG_RELATION_VARIANTS: tuple[frozenset[str], ...] = RELATION_VARIANTS + (
    frozenset({"P35", "P27"}), frozenset({"P35", "P27", "P37", "P38"}),
    frozenset({"P35", "P27", "P37", "P38", "P36", "P1376", "P17"}),
)

# A person's occupation (P106) is shared with few others, so it often singles the person out as well as the
# country does, and greedy selection would take it on a tie (its id sorts first); but an occupation has no image
# and no other fact, a dead end. Two bits of penalty (a citizenship costs the default one) let the country win.
# Likewise an element or its discoverer (P61, P138, P189) has no image: Sweden is the one country where chlorine was
# discovered, and at the default bit that fact would beat "shares a border with Norway" (3 countries, 2.6 bits) and
# end the chain at chlorine. Four bits, a taxonomic link's, let borders, regions and organisations win; the three
# cost the same, so an element's own set breaks its ties as before (named after, then discovered in, then by).
_ELEMENT_FACTS = {"P61": 4.0, "P138": 4.0, "P189": 4.0}
DISTINGUISHING = DistinguishingConfig(relation_penalty={**DistinguishingConfig().relation_penalty, "P106": 2.0,
                                                        **_ELEMENT_FACTS})


@dataclass(frozen=True)
class SynthConfig:
    expansion: ExpansionConfig = field(default_factory=lambda: ExpansionConfig(max_depth=4, max_branching=3,
                                                                              max_nodes=60,
                                                                              distinguishing=DISTINGUISHING))
    structures: StructureConfig = field(default_factory=lambda: StructureConfig(max_hops=5, visual_answer=False,
                                                                               max_candidates=1000))
    variants: tuple[frozenset[str], ...] = RELATION_VARIANTS
    # withheld from all nodes but the seed; the offline world's run (data_gen.neos.cli) takes SEED_FREE_VARIANTS,
    # a loaded KG its own KG_RELATION_VARIANTS
    seed_free_variants: tuple[frozenset[str], ...] = ()
    # one more DAG per variant here and convergent set of the seed under it; the offline world's run takes
    # CONVERGENT_VARIANTS
    convergent_variants: tuple[frozenset[str], ...] = ()
    max_structures_per_seed: int = 40  # accepted structures taken on to grounding, per seed
    seed_kinds: frozenset[str] | None = SEED_KINDS  # None: every page-bearing entity (a loaded KG's own kinds)
    closed_book: bool = True  # reject what common knowledge solves (data_gen.neos.closed_book)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A structure that passed identifiability; ``task`` is set once grounding and coverage passed too."""

    key: str
    structure: Structure
    task: Task | None
    filter: str | None  # the rejecting filter ("grounding", "source_colours", ...) when ``task`` is None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: str
    candidates: tuple[Candidate, ...]
    counts: dict[str, int]  # seed-level and identifiability rejections


class Synthesizer:
    """Holds the world's KG and image index; :meth:`seeds` orders the seeds, :meth:`synthesize` runs steps 2-6."""

    def __init__(self, world: World, seed: int = 0, config: SynthConfig = SynthConfig(),
                 observer: Observer | None = None, verbalizer: Verbalizer | None = None,
                 rewriter: Rewriter | None = None) -> None:
        self.world = world
        self.seed = seed
        self.config = config
        self.observer = observer or PaletteObserver()
        self.verbalizer = verbalizer or TemplateVerbalizer()
        self.rewriter = rewriter
        self.world_hash = world.manifest.get("content_hash", "")
        # Entity-only facts: a literal (a code, a population) can never be an anchor or checkpoint, and a unique
        # literal would win every distinguishing set and cut the DAG off from image-bearing neighbours.
        # A fact a second source contradicts (data_gen.world.corroborate: a maritime "border", a currency no longer
        # legal tender) is no fact of a question: left out of the KG, so no structure states it.
        self.contested = {(f["s"], f["p"], f["o"]) for f in world.manifest.get("contested_facts", [])}
        self.kg = KG.from_triples((t.s, t.p, t.o) for t in world.triples
                                  if not t.literal and (t.s, t.p, t.o) not in self.contested)
        self.closed_book = ClosedBookSolver(self.kg, {e.id: e.kind for e in world.entities.values()},
                                            lambda e, d: self._fits(e, d, set()))
        self._complete = complete_lists(world, self.kg)  # organisations whose members the world holds completely
        order = list(IMAGE_KINDS)
        self._images: dict[str, list[tuple[str, Path, str]]] = {}
        usable = (im for im in world.images.values() if im.entity_id and im.source in IMAGE_KINDS)
        for im in sorted(usable, key=lambda i: (order.index(i.source), i.id)):
            self._images.setdefault(im.entity_id, []).append((im.id, world.image_path(im.id), im.source))
        # What a reader without the entry image knows of its anchor: an entity of this kind with such an image.
        self._pictured: dict[tuple[str, str], set[str]] = {}
        for eid, images in self._images.items():
            if eid in world.entities:
                for _, _, source in images:
                    self._pictured.setdefault((world.entities[eid].kind, source), set()).add(eid)

    # -- step 1 -------------------------------------------------------------------------------------------------

    def seeds(self) -> list[str]:
        """Page-bearing entities in a weighted random order (Efraimidis-Spirakis keys): more distinct concrete
        relations and image-bearing neighbours weigh more, hubs (high degree) less; taxonomic links do not count.
        Kinds take turns (each kind's first seed, then each one's second, ...): the world holds 250 countries and 9
        organisations, and a run limited to 60 tasks should still reach the rare kinds. Within a kind, seeds that
        closed facts single out from a pictured entity come first, in one hop before two (:meth:`_pinned`): of 461
        people, the four sole discoverers of an element that a country's facts single out (Johann Gadolin: Finland's
        yttrium) come first; the only citizens of a country, reached through an open fact, no longer do."""
        rng = random.Random(self.seed)
        keyed: dict[str, list[tuple[float, str]]] = {}
        for eid in sorted(self.world.entities):
            entity = self.world.entities[eid]
            kinds = self.config.seed_kinds
            if (kinds is not None and entity.kind not in kinds) or not entity.page_id or self.kg.degree(eid) == 0:
                continue
            rels = {r for r in (*self.kg.outgoing(eid), *self.kg.incoming(eid)) if r not in TAXONOMIC_RELATIONS}
            neighbours = {n for objs in self.kg.outgoing(eid).values() for n in objs}
            neighbours |= {n for subs in self.kg.incoming(eid).values() for n in subs}
            visual = sum(1 for n in neighbours if n in self._images)
            weight = (1 + len(rels) + min(visual, 5)) / math.log2(2 + self.kg.degree(eid))
            keyed.setdefault(entity.kind, []).append((rng.random() ** (1 / weight), eid))
        turns = [(rank, -key, eid) for seeds in keyed.values()
                 for rank, (key, eid) in enumerate(sorted(seeds, key=lambda s: (self._pinned(s[1]) or 3, -s[0])))]
        return [eid for *_, eid in sorted(turns)]

    def _pinned(self, eid: str) -> int | None:
        """The fewest hops (1 or 2) of a chain from a pictured entity that can end at ``eid``: each hop a
        non-taxonomic fact that, read towards ``eid``, is closed (:mod:`data_gen.neos.open_world`) and reaches it
        alone. "The capital of B", B a flag, is one hop; "the person who discovered the chemical element that was
        discovered in B" two. None when there is none. An open fact does not count: "the person who is a citizen
        of B" has one answer in the world only (the open-world rule rejects it unless a noun pins it, and the noun
        names the person without the image)."""
        frontier = {eid}
        for hops in (1, 2):
            frontier = {n for e in frontier for n in self._singled_out_by(e)}
            if frontier & self._images.keys():
                return hops
        return None

    def _singled_out_by(self, eid: str) -> set[str]:
        """The neighbours from which one closed, non-taxonomic fact reaches ``eid`` alone."""
        out = {o for relation, objects in self.kg.outgoing(eid).items() for o in objects
               if self._closed_to(relation, False, o) and self.kg.subjects(relation, o) == {eid}}
        return out | {s for relation, subjects in self.kg.incoming(eid).items() for s in subjects
                      if self._closed_to(relation, True, s) and self.kg.objects(s, relation) == {eid}}

    def _closed_to(self, relation: str, forward: bool, source: str) -> bool:
        return relation not in TAXONOMIC_RELATIONS and open_reason(relation, forward, source, self._complete) is None

    # -- steps 2-6 ----------------------------------------------------------------------------------------------

    def synthesize(self, seed_entity: str) -> SeedResult:
        """Steps 2-6 for one seed: a DAG per relation variant, their identifiable structures (deduplicated),
        then grounding, verbalization and coverage for each."""
        counts: Counter[str] = Counter()
        accepted: dict[str, Structure] = {}
        variants = [(excluded, excluded) for excluded in self.config.variants]
        variants += [(frozenset(), excluded) for excluded in self.config.seed_free_variants]
        base = self.config.expansion.distinguishing
        expansions = [replace(self.config.expansion,
                              distinguishing=replace(base, excluded_relations=base.excluded_relations | excluded),
                              seed_distinguishing=replace(base, excluded_relations=base.excluded_relations | at_seed))
                      for at_seed, excluded in variants]
        for excluded in self.config.convergent_variants:
            rest = replace(base, excluded_relations=base.excluded_relations | excluded)
            sets = convergent_sets(self.kg, seed_entity, replace(rest, excluded_relations=rest.excluded_relations | {
                *TAXONOMIC_RELATIONS}))
            expansions += [replace(self.config.expansion, distinguishing=rest, seed_facts=facts) for facts in sets]
        verdicts: dict[Structure, str | None] = {}  # identifiability, shared by the seed's DAGs
        for expansion in expansions:
            try:
                dag = expand(self.kg, seed_entity, expansion, self._images.keys())
            except NotDistinguishable:
                counts["not_distinguishable"] += 1
                continue
            enum = enumerate_structures(self.kg, dag, self._images.keys(), self.config.structures, verdicts)
            counts.update({f"identifiability:{k}": v for k, v in enum.rejection_counts.items()})
            if not enum.accepted:
                counts["no_structure"] += 1
            for structure in enum.accepted:
                accepted.setdefault(self.structure_key(structure), structure)
        chosen = list(accepted.values())[: self.config.max_structures_per_seed]
        return SeedResult(seed_entity, tuple(self.candidate(s) for s in chosen), dict(counts))

    def structure_key(self, structure: Structure) -> str:
        blob = json.dumps([self.world_hash, structure.to_dict()], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def candidate(self, structure: Structure) -> Candidate:
        """Steps 5-6 and the evidence rules for one identifiable structure."""
        key = self.structure_key(structure)
        kinds = {n: self.world.entities[n].kind for n in structure.nodes if n in self.world.entities}
        nouns = self.nouns(structure)
        if isinstance(nouns, str):
            return Candidate(key, structure, None, "open_world", nouns)
        names = self._withheld(structure)
        ambiguous: set[str] = set()
        bound: dict[str, Description] = {}
        grounded: dict[str, str] = {}
        alternatives: dict[str, list[Alternative]] = {}
        reach: dict[str, set[str]] = {a: {a} for a in structure.anchors}
        for edge in structure.edges:
            gap = unlisted(self.kg, reach[edge.source], edge.relation, edge.forward)
            if gap is not None:
                return Candidate(key, structure, None, "open_world", gap)
            step = self._step_candidates(reach[edge.source], edge.relation, edge.forward)
            reach[edge.target] = reach[edge.target] & step if edge.target in reach else step
            if edge.target == structure.merge and len(structure.branches) == 2 and edge not in structure.branches[1]:
                continue  # the merge node's second branch narrows it further before it is judged
            if len(reach[edge.target]) > 1:
                ambiguous.add(edge.target)
            if edge.target in structure.checkpoints:
                g = ground(edge.target, reach[edge.target], lambda e: self._images.get(e, []), self.observer, names)
                if g is None:
                    return Candidate(key, structure, None, "grounding",
                                     f"no image of {edge.target} is distinctive among {len(reach[edge.target])}")
                stated = stated_colours(image_source_texts(self.world, g.image_id))
                if source_disagrees(g.description.colours, stated):
                    return Candidate(key, structure, None, "source_colours",
                                     f"{g.image_id}: the pixels read {g.description.colours[0]}, its source states "
                                     f"{', '.join(sorted(stated or ()))}")
                bound[edge.target], grounded[edge.target] = g.description, g.image_id
                alternatives[edge.target] = self._alternatives(edge.target, reach[edge.target], g.description, names)
                reach[edge.target] = {edge.target}
        rule = self._evidence_rule(structure, bound, names, nouns)
        if rule is not None:
            return Candidate(key, structure, None, *rule)
        entry_sources = {a: self.entry_image(a)[2] for a in structure.anchors}
        if self.config.closed_book and self.closed_book.solves(structure, entry_sources, bound):
            return Candidate(key, structure, None, "closed_book", "common knowledge and the images a strong model "
                                                                   "recognises leave only the answer")
        labels = {e.relation: self._relation_label(e.relation) for e in structure.edges}
        anchor_images = [IMAGE_KINDS[self.entry_image(a)[2]] for a in structure.anchors]
        verbal = self.verbalizer.verbalize(structure, kinds, labels, anchor_images, bound, ambiguous, nouns)
        reason = check_coverage(verbal.question, structure, verbal, names)
        if reason is not None:
            return Candidate(key, structure, None, "coverage", reason)
        if self.rewriter is not None:
            images = ["the image"] if len(structure.anchors) == 1 else [
                f"image {i}" for i in range(1, len(structure.anchors) + 1)]
            # the checkpoints' descriptions and the facts that pin an open-world node ("film director, born in 1900")
            keep = [*images, *(d.clause() for d in bound.values()), *(n.rstrip(",") for n in nouns.values())]
            verbal = self.rewriter.rewrite(verbal, keep, lambda q: check_coverage(q, structure, verbal, names))
        steps = [self._step(i, e, verbal.spans[i], grounded, bound, alternatives.get(e.target, []))
                 for i, e in enumerate(structure.edges)]
        answer = self.world.entities[structure.answer]
        task = Task(
            id=key, world_hash=self.world_hash, seed=self.seed,
            structure_type=structure.kind, structure=structure.to_dict(), question=verbal.question,
            entry_images=[self._entry(a) for a in structure.anchors], answer=answer.label,
            answer_entity=answer.id, answer_type=answer.kind,
            aliases=sorted({a for a in answer.aliases if a.lower() != answer.label.lower()}),
            steps=steps,
        )
        return Candidate(key, structure, task, None)

    def nouns(self, structure: Structure) -> dict[str, str] | str:
        """The noun phrases that pin the structure's open-world nodes, or why one cannot be pinned
        (:func:`data_gen.neos.open_world.pinning`)."""
        kinds = {n: self.world.entities[n].kind for n in structure.nodes if n in self.world.entities}
        return pinning(structure, kinds, self.kg, self.world, self._complete)

    def _evidence_rule(self, structure: Structure, bound: dict[str, Description], names: set[str],
                       nouns: dict[str, str]) -> tuple[str, str] | None:
        """Neos's evidence dependence as a rejection rule, checked on the compiled query as a reader would solve
        it: remove one entry image (its anchor becomes any entity of its kind with such an image) or one visual
        checkpoint's description (the node keeps only its relations and what the question states of it: a
        person's occupation and dates, ``nouns``); if the answer is still the only one left, that evidence is
        decoration and the question is rejected. ``(filter, detail)``, or None when every image and every
        checkpoint is needed."""
        anchor = self.entry_image_decoration(structure, bound, names, nouns)
        if anchor is not None:
            return "entry_image_ablation", f"without the image of {anchor} the text alone leaves one answer"
        anchors = {a: {a} for a in structure.anchors}
        for checkpoint in structure.checkpoints:
            rest = {k: v for k, v in bound.items() if k != checkpoint}
            if self._answers(structure, anchors, rest, names, nouns) == {structure.answer}:
                return "checkpoint_ablation", f"without the checkpoint image of {checkpoint} the relations alone " \
                                              "leave one answer"
        return None

    def entry_image_decoration(self, structure: Structure, bound: dict[str, Description], names: set[str],
                               nouns: dict[str, str]) -> str | None:
        """The first anchor whose entry image can be removed (the anchor becoming any entity of its kind with such
        an image) with the answer still the only one left, each checkpoint read through ``bound``'s
        :meth:`Description.matches`; None when every entry image is needed."""
        anchors = {a: {a} for a in structure.anchors}
        for anchor in structure.anchors:
            entity = self.world.entities.get(anchor)
            source = self.entry_image(anchor)[2]
            pictured = self._pictured.get((entity.kind if entity else "", source), {anchor})
            if self._answers(structure, {**anchors, anchor: pictured}, bound, names, nouns) == {structure.answer}:
                return anchor
        return None

    def _answers(self, structure: Structure, start: dict[str, set[str]], bound: dict[str, Description],
                 names: set[str], nouns: dict[str, str]) -> set[str]:
        """The answers a reader is left with: candidates propagated along the edges from ``start``, each bound
        checkpoint narrowed to the entities whose image fits its description under a person's reading, each node
        the question names by a noun ("the diplomat, born in 1911, died in 1990,") to the entities it fits."""
        reach = dict(start)
        for edge in structure.edges:
            step = self._step_candidates(reach[edge.source], edge.relation, edge.forward)
            if edge.target in bound:
                step = {c for c in step if self._fits(c, bound[edge.target], names)}
            if edge.target in nouns:
                entity = self.world.entities.get(edge.target)
                kind = entity.kind if entity else ""
                step = {c for c in step
                        if pinning_noun(c, kind, self.kg, self.world, self._complete) == nouns[edge.target]}
            reach[edge.target] = reach[edge.target] & step if edge.target in reach else step
        return reach[structure.answer]

    def _fits(self, entity: str, description: Description, names: set[str]) -> bool:
        return any(IMAGE_KINDS.get(source) == description.kind
                   and description.matches(self.observer.describe(path, source, names))
                   for _, path, source in self._images.get(entity, []))

    def _step_candidates(self, sources: set[str], relation: str, forward: bool) -> set[str]:
        out: set[str] = set()
        for s in sources:
            out |= self.kg.objects(s, relation) if forward else self.kg.subjects(relation, s)
        return out

    def _withheld(self, structure: Structure) -> set[str]:
        names: set[str] = set()
        for node in structure.nodes:
            entity = self.world.entities.get(node)
            if entity is not None:
                names |= {entity.label, *entity.aliases}
        return names

    def _relation_label(self, relation: str) -> str:
        rel = self.world.relations.get(relation)
        return rel.label if rel else relation

    def _page(self, entity_id: str) -> str | None:
        entity = self.world.entities.get(entity_id)
        return page_url(entity.page_id) if entity and entity.page_id and entity.page_id in self.world.pages else None

    def _name(self, entity_id: str) -> str:
        entity = self.world.entities.get(entity_id)
        return entity.label if entity else entity_id

    def entry_image(self, anchor: str) -> tuple[str, Path, str]:
        """The image that stands for ``anchor`` in its questions, ``(image_id, path, source)``: one of its images
        that does not print its name (a country's flag or unlabelled locator map), picked by a hash of the run's
        seed and the anchor, so a run mixes image kinds and the same world and seed give the same questions. An
        anchor with only named images keeps its first one."""
        images = self._images[anchor]
        unnamed = [im for im in images if im[2] not in NAMED_SOURCES] or images[:1]
        digest = hashlib.sha256(f"{self.seed}:{anchor}".encode()).digest()
        return unnamed[int.from_bytes(digest[:8], "big") % len(unnamed)]

    def _entry(self, anchor: str) -> EntryImage:
        image_id = self.entry_image(anchor)[0]
        return EntryImage(image_id=image_id, url=self.world.images[image_id].url, entity_id=anchor)

    def _alternatives(self, checkpoint: str, candidates: set[str], description: Description, names: set[str],
                      most: int = 2) -> list[Alternative]:
        """Up to ``most`` other candidates of a checkpoint with an image of the same kind, and its colours."""
        out = []
        for other in sorted(candidates - {checkpoint}):
            for image_id, path, source in self._images.get(other, []):
                seen = self.observer.describe(path, source, names) if IMAGE_KINDS.get(source) == description.kind \
                    else None
                if seen is not None:
                    out.append(Alternative(name=self._name(other), image_id=image_id,
                                           image_url=self.world.images[image_id].url,
                                           colours=list(seen.colours)))
                    break
            if len(out) == most:
                break
        return out

    def _step(self, index: int, edge, span: str, grounded: dict[str, str], bound: dict[str, Description],
              alternatives: list[Alternative]) -> Step:
        return Step(
            index=index, source=edge.source, target=edge.target, relation=edge.relation,
            relation_label=self._relation_label(edge.relation), forward=edge.forward, fact=edge.fact,
            source_name=self._name(edge.source), target_name=self._name(edge.target),
            source_page_url=self._page(edge.source), target_page_url=self._page(edge.target),
            checkpoint=edge.target in grounded, checkpoint_image_id=grounded.get(edge.target),
            checkpoint_image_url=self.world.images[grounded[edge.target]].url if edge.target in grounded else None,
            checkpoint_description=bound[edge.target].render() if edge.target in bound else None,
            checkpoint_colours=list(bound[edge.target].stated()) if edge.target in bound else None, span=span,
            alternatives=alternatives,
        )

