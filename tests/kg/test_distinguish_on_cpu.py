"""Distinguishing sets: unique by solve, greedy preferences, clear failures."""

import random

import pytest

from data_gen.kg import KG, DistinguishingConfig, Fact, NotDistinguishable, distinguishing_set


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
