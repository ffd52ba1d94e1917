"""Distinguishing sets: unique by solve, greedy preferences, clear failures."""

import random

import pytest

from data_gen.kg import KG, DistinguishingConfig, Fact, NotDistinguishable, distinguishing_set
from data_gen.kg.distinguish import convergent_sets


def identified(kg: KG, entity: str, facts: tuple[Fact, ...]) -> set[str]:
    """What the facts' conjunction picks out when the neighbours are known constants."""
    constraints = [fact.triple("?e") for fact in facts]
    return kg.solve(constraints, {}, "?e")


def test_needs_two_facts_and_they_are_unique() -> None:
    kg = KG.from_triples([
        ("person:ana", "P19", "city:kita"), ("person:ben", "P19", "city:kita"),
        ("person:ana", "P54", "club:honda"), ("person:cy", "P54", "club:honda"),
    ])
    facts = distinguishing_set(kg, "person:ana")
    assert facts == (Fact("P19", "city:kita", True), Fact("P54", "club:honda", True))
    assert identified(kg, "person:ana", facts) == {"person:ana"}
    with pytest.raises(NotDistinguishable, match="greedy selection of at most 1") as err:
        distinguishing_set(kg, "person:ana", DistinguishingConfig(max_size=1))
    assert err.value.candidates == {"person:ben"}


def test_incoming_facts_count_too() -> None:
    kg = KG.from_triples([("work:chant", "P86", "person:ana"), ("person:ana", "P19", "city:kita"),
                          ("person:ben", "P19", "city:kita")])
    assert distinguishing_set(kg, "person:ana") == (Fact("P86", "work:chant", False),)


def test_twins_have_no_distinguishing_set() -> None:
    kg = KG.from_triples([("a", "P17", "x"), ("b", "P17", "x"), ("a", "P31", "t"), ("b", "P31", "t")])
    with pytest.raises(NotDistinguishable, match="all 2 usable facts together still match 2") as err:
        distinguishing_set(kg, "a")
    assert err.value.candidates == {"b"}


def test_unknown_entity_and_fully_excluded_neighbourhood() -> None:
    kg = KG.from_triples([("a", "P17", "x")])
    with pytest.raises(NotDistinguishable, match="no triple"):
        distinguishing_set(kg, "zzz")
    with pytest.raises(NotDistinguishable, match="all excluded"):
        distinguishing_set(kg, "a", exclude={"x"})
    with pytest.raises(NotDistinguishable, match="all excluded"):
        distinguishing_set(kg, "a", DistinguishingConfig(excluded_relations=frozenset({"P17"})))


TAXONOMY = KG.from_triples([
    ("e", "P31", "class:rare"),  # alone unique, but taxonomic
    ("e", "P131", "region:r"), ("f", "P131", "region:r"),
    ("e", "P17", "country:c"), ("g", "P17", "country:c"),
])


def test_taxonomic_link_loses_to_two_concrete_facts() -> None:
    assert distinguishing_set(TAXONOMY, "e") == (Fact("P131", "region:r", True), Fact("P17", "country:c", True))


def test_without_penalties_the_most_selective_fact_wins() -> None:
    config = DistinguishingConfig(relation_penalty={}, default_penalty=0.0)
    assert distinguishing_set(TAXONOMY, "e", config) == (Fact("P31", "class:rare", True),)


def test_hub_neighbour_is_down_weighted() -> None:
    # 'hub' has 6 triples; 'e' is unique through it, or through two quieter neighbours.
    triples = [(f"other{i}", "P17", "hub") for i in range(5)] + [("e", "P17", "hub")]
    triples += [("e", "P131", "r1"), ("f", "P131", "r1"), ("e", "P276", "r2"), ("g", "P276", "r2")]
    triples += [(f"other{i}", "P131", "r9") for i in range(5)]
    kg = KG.from_triples(triples)
    hubby = DistinguishingConfig(hub_degree=6, hub_penalty=3.0)
    assert distinguishing_set(kg, "e", hubby) == (Fact("P131", "r1", True), Fact("P276", "r2", True))
    assert distinguishing_set(kg, "e", DistinguishingConfig(hub_degree=7, hub_penalty=3.0)) == (
        Fact("P131", "r1", True), Fact("P17", "hub", True))


def test_exclude_neighbours() -> None:
    kg = KG.from_triples([("a", "P17", "x"), ("a", "P131", "y"), ("b", "P131", "y"), ("c", "P276", "a")])
    assert distinguishing_set(kg, "a") == (Fact("P17", "x", True),)
    assert distinguishing_set(kg, "a", exclude={"x"}) == (Fact("P276", "c", False),)


def test_random_graph_every_set_is_unique_and_every_failure_is_real() -> None:
    rng = random.Random(7)
    entities = [f"e{i}" for i in range(60)]
    values = [f"v{i}" for i in range(6)]  # a few shared objects, so some entities look alike
    triples = [(rng.choice(entities), rng.choice(["P17", "P31", "P131"]), rng.choice(entities + values))
               for _ in range(60)]
    kg = KG.from_triples(triples)
    found = failed = 0
    for entity in sorted(kg.terms()):
        try:
            facts = distinguishing_set(kg, entity, DistinguishingConfig(max_size=3))
        except NotDistinguishable as err:
            failed += 1
            assert entity not in err.candidates and err.candidates
            continue
        found += 1
        assert 1 <= len(facts) <= 3
        assert all(fact.triple(entity) in kg for fact in facts)
        assert identified(kg, entity, facts) == {entity}
    assert found > 30 and failed > 0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="max_size"):
        DistinguishingConfig(max_size=0)


def test_convergent_sets_are_the_ones_a_structure_can_state() -> None:
    # X borders B and C, B also Y, C also Z: the two borders single X out, the most selective start (B's two
    # neighbours against R's eight parts), so greedy selection takes them, one relation twice, which no convergent
    # structure states. R and C do it with distinct relations (Z lies outside R), R and B do not (Y lies in R); each
    # border is one fact, though the KG holds it both ways.
    borders = [("X", "B"), ("X", "C"), ("Y", "B"), ("Z", "C")]
    triples = [*((a, "P47", b) for a, b in borders), *((b, "P47", a) for a, b in borders),  # stored both ways
               ("X", "P361", "R"), ("Y", "P361", "R"), *(("W" + str(i), "P361", "R") for i in range(6))]
    kg = KG.from_triples(triples)
    assert distinguishing_set(kg, "X") == (Fact("P47", "B", True), Fact("P47", "C", True))
    assert convergent_sets(kg, "X") == [(Fact("P361", "R", True), Fact("P47", "C", True))]
    # a fact that singles X out alone is a set of its own and joins no pair; an excluded relation joins none
    kg = KG.from_triples([*triples, ("X", "P38", "coin")])
    assert convergent_sets(kg, "X") == [(Fact("P38", "coin", True),), (Fact("P361", "R", True), Fact("P47", "C", True))]
    assert convergent_sets(kg, "X", DistinguishingConfig(excluded_relations=frozenset({"P361", "P38"}))) == []


def test_a_failed_attempt_says_which_facts_it_took() -> None:
    kg = KG.from_triples([("a", "P17", "x"), ("b", "P17", "x"), ("a", "P31", "t"), ("b", "P31", "t")])
    with pytest.raises(NotDistinguishable) as err:
        distinguishing_set(kg, "a")
    assert err.value.partial == (Fact("P17", "x", True),)  # P31 would narrow nothing more
