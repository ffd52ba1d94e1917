"""Distinguishing sets: a few neighbour facts whose conjunction singles an entity out of the KG (Neos App. A).

Selection is greedy: each step takes the fact that leaves the fewest candidates, scored in bits
(``log2(candidates)``) plus a relation penalty and a hub penalty, also in bits. Penalties are what make the sets
useful for questions rather than merely unique: concrete relations (creation, membership, location) cost nothing,
taxonomic links (P31 instance of, P279 subclass of) cost a lot, and a neighbour that is a hub tells a solver little.
Ties go to the smallest ``(relation, neighbour, incoming)``, so the result never depends on insertion order.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from data_gen.kg.graph import KG

# Creation, membership and location relations: the ones a question can state concretely.
CONCRETE_RELATIONS: tuple[str, ...] = (
    "P17", "P19", "P20", "P36", "P50", "P57", "P86", "P112", "P115", "P127", "P131", "P137", "P159", "P161", "P170",
    "P175", "P176", "P178", "P276", "P361", "P463", "P54", "P102", "P108", "P69", "P740", "P1376",
)
TAXONOMIC_RELATIONS: tuple[str, ...] = ("P31", "P279")


def _default_penalties() -> dict[str, float]:
    penalties = {rel: 0.0 for rel in CONCRETE_RELATIONS}
    penalties.update({rel: 4.0 for rel in TAXONOMIC_RELATIONS})
    return penalties


@dataclass(frozen=True, slots=True)
class Fact:
    """``(relation, neighbour, outgoing)``: the entity is the subject of ``relation`` when ``outgoing``."""

    relation: str
    neighbour: str
    outgoing: bool

    def triple(self, entity: str) -> tuple[str, str, str]:
        """The KG fact, in its stored direction."""
        if self.outgoing:
            return entity, self.relation, self.neighbour
        return self.neighbour, self.relation, entity


@dataclass(frozen=True)
class DistinguishingConfig:
    """``relation_penalty`` overrides ``default_penalty`` per relation id; all penalties are in bits."""

    max_size: int = 3
    relation_penalty: Mapping[str, float] = field(default_factory=_default_penalties)
    default_penalty: float = 1.0
    excluded_relations: frozenset[str] = frozenset()
    hub_degree: int = 500
    hub_penalty: float = 2.0

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {self.max_size}")
        if self.hub_degree < 1:
            raise ValueError(f"hub_degree must be >= 1, got {self.hub_degree}")


class NotDistinguishable(ValueError):
    """No distinguishing set within the size limit: ``candidates`` are the entities the best attempt left,
    ``partial`` the facts it chose (they narrow the KG to ``candidates``)."""

    def __init__(self, entity: str, reason: str, candidates: Collection[str] = (),
                 partial: tuple[Fact, ...] = ()) -> None:
        self.entity = entity
        self.candidates = frozenset(candidates)
        self.partial = partial
        sample = ", ".join(sorted(self.candidates)[:5])
        more = f" (e.g. {sample})" if sample else ""
        super().__init__(f"{entity!r} is not distinguishable: {reason}{more}")


def candidate_facts(kg: KG, entity: str) -> list[Fact]:
    """Every fact about ``entity`` that could join a distinguishing set, in a fixed order (self-loops excluded)."""
    facts = [Fact(rel, obj, True) for rel, objs in kg.outgoing(entity).items() for obj in objs if obj != entity]
    facts += [Fact(rel, sub, False) for rel, subs in kg.incoming(entity).items() for sub in subs if sub != entity]
    facts.sort(key=lambda f: (f.relation, f.neighbour, not f.outgoing))
    return facts


def distinguishing_set(
    kg: KG,
    entity: str,
    config: DistinguishingConfig = DistinguishingConfig(),
    exclude: Collection[str] = (),
) -> tuple[Fact, ...]:
    """Greedy distinguishing set for ``entity``, never using a neighbour in ``exclude``.

    Raises :class:`NotDistinguishable` when the greedy selection cannot narrow the candidates to ``entity`` within
    ``config.max_size`` facts; the message says whether even the whole neighbourhood would not suffice.
    """
    if kg.degree(entity) == 0:
        raise NotDistinguishable(entity, "it occurs in no triple")
    excluded = set(exclude)
    facts = [f for f in candidate_facts(kg, entity)
             if f.relation not in config.excluded_relations and f.neighbour not in excluded]
    if not facts:
        raise NotDistinguishable(entity, "it has no usable facts (all excluded)")
    matches = {f: _matching(kg, f) for f in facts}
    candidates: frozenset[str] | None = None  # None: the whole KG
    chosen: list[Fact] = []
    while len(chosen) < config.max_size:
        best: tuple[float, Fact, frozenset[str]] | None = None
        for fact in facts:
            if fact in chosen:
                continue
            left = matches[fact] if candidates is None else candidates & matches[fact]
            if candidates is not None and len(left) == len(candidates):
                continue  # narrows nothing
            score = math.log2(len(left)) + _penalty(kg, fact, config)
            if best is None or score < best[0]:
                best = (score, fact, left)
        if best is None:
            break
        chosen.append(best[1])
        candidates = best[2]
        if len(candidates) == 1:
            return tuple(chosen)
    everything = _intersection(matches.values())
    if len(everything) > 1:
        raise NotDistinguishable(entity, f"all {len(facts)} usable facts together still match "
                                         f"{len(everything)} entities", everything - {entity}, tuple(chosen))
    assert candidates is not None
    raise NotDistinguishable(entity, f"greedy selection of at most {config.max_size} facts left "
                                     f"{len(candidates)} candidates", candidates - {entity}, tuple(chosen))


def convergent_sets(kg: KG, entity: str,
                    config: DistinguishingConfig = DistinguishingConfig()) -> list[tuple[Fact, ...]]:
    """Every distinguishing set a reasoning structure can state whole: one fact that singles ``entity`` out, or two
    facts of distinct relations that do together (neither alone), the two branches of a convergent structure (Neos
    App. A). Greedy selection finds one set, often of three facts or two of one relation (a country's two borders),
    which no structure states. In :func:`candidate_facts` order; excluded relations left out."""
    unique: dict[tuple[str, str], Fact] = {}  # a symmetric fact (a border) is stored both ways: once here
    for fact in candidate_facts(kg, entity):
        if fact.relation not in config.excluded_relations:
            unique.setdefault((fact.relation, fact.neighbour), fact)
    facts = list(unique.values())
    matches = {f: _matching(kg, f) for f in facts}
    singles = [f for f in facts if matches[f] == {entity}]
    pairs = [(a, b) for i, a in enumerate(facts) for b in facts[i + 1:]
             if a.relation != b.relation and a not in singles and b not in singles
             and matches[a] & matches[b] == {entity}]
    return [(f,) for f in singles] + pairs


def _matching(kg: KG, fact: Fact) -> frozenset[str]:
    """Terms that share ``fact`` with the entity (the entity itself included)."""
    if fact.outgoing:
        return kg.subjects(fact.relation, fact.neighbour)
    return kg.objects(fact.neighbour, fact.relation)


def _penalty(kg: KG, fact: Fact, config: DistinguishingConfig) -> float:
    penalty = config.relation_penalty.get(fact.relation, config.default_penalty)
    if kg.degree(fact.neighbour) >= config.hub_degree:
        penalty += config.hub_penalty
    return penalty


def _intersection(sets: Collection[frozenset[str]]) -> frozenset[str]:
    ordered = sorted(sets, key=len)
    result = ordered[0]
    for s in ordered[1:]:
        result = result & s
    return result
