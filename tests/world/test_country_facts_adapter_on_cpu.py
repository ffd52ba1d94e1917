"""The country_facts adapter on the real wordnet-base and world-countries packages. Expectations are WordNet 3.0's
own pointers, read off data.noun: Germany (08766988) is a member (#m) of the European Union (08173515) and NATO
(08174398) and has the members (%m) German and Sorbian; the Danube (09263087) is part (#p) of Germany, Austria,
Czechoslovakia, Hungary, Serbia and Montenegro, Romania, Bulgaria and Ukraine; Kilimanjaro (09325963) of Tanzania;
Albanian (09689958) is a member of Albania; Cameroon the volcano (09173623) is part of Cameroon."""

from __future__ import annotations

import pytest

from data_gen.world.adapters import country_facts
from data_gen.world.adapters._wordnet_data import load_wordnet


@pytest.fixture(scope="module")
def sources(world_sources):
    return world_sources(*country_facts.SOURCES)


@pytest.fixture(scope="module")
def contribution(sources):
    return country_facts.contribute(sources, "small")


@pytest.fixture(scope="module")
def facts(contribution):
    return {(t.s, t.p, t.o) for t in contribution.triples}


def test_a_country_is_its_wordnet_country_not_the_island_or_the_capital_of_its_name(sources):
    wn = load_wordnet(sources["wordnet-base"])
    chosen = country_facts.country_synsets(wn, country_facts.load_countries(sources["world-countries"]))
    assert chosen["08766988"] == "country:DEU"
    assert chosen["08888676"] == "country:IRL" and "08859173" not in chosen  # Ireland the island
    assert chosen["08929243"] == "country:KWT" and "08929555" not in chosen  # Kuwait the capital
    assert len(set(chosen.values())) == len(chosen)  # one place per country


def test_a_country_yields_its_organisation_memberships(facts):
    # NATO; the EU's complete list is the organisations adapter's (COMPLETE_ELSEWHERE), WordNet's is not stated
    assert {(s, o) for s, p, o in facts if s == "country:DEU" and p == "P463"} == {
        ("country:DEU", "organization:08174398")}


def test_an_organisation_page_lists_every_member_by_its_world_name(contribution):
    nato = next(p for p in contribution.pages if p.entity_id == "organization:08174398")
    entity = next(e for e in contribution.entities if e.id == "organization:08174398")
    assert entity.label == "North Atlantic Treaty Organization" and entity.kind == "organization"
    assert "Its member countries are Belgium, Bulgaria, Canada, Denmark, France, Germany" in nato.text
    assert nato.text.endswith("Türkiye, United Kingdom and United States.")  # world-countries' names


def test_a_river_lies_in_the_world_countries_of_its_part_holonyms(contribution, facts):
    danube = {o for s, p, o in facts if s == "river:09263087"}
    assert danube == {"country:AUT", "country:BGR", "country:DEU", "country:HUN", "country:ROU", "country:UKR"}
    assert {p for s, p, o in facts if s == "river:09263087"} == {"x:river_in"}
    assert ("mountain:09325963", "x:mountain_in", "country:TZA") in facts
    page = next(p for p in contribution.pages if p.entity_id == "river:09263087")
    assert page.text.endswith("It is a river in Austria, Bulgaria, Germany, Hungary, Romania and Ukraine.")


def test_a_feature_named_like_its_country_is_left_out(contribution):
    assert not any(e.id.endswith(":09173623") for e in contribution.entities)  # "the volcano in Cameroon"


def test_a_nationality_names_the_natives_of_one_country(contribution, facts):
    assert ("country:ALB", "P1549", "nationality:09689958") in facts
    assert {o for s, p, o in facts if s == "country:DEU" and p == "P1549"} == {
        "nationality:09747722", "nationality:09751403"}  # German, Sorbian
    albanian = next(e for e in contribution.entities if e.id == "nationality:09689958")
    assert albanian.label == "Albanian" and albanian.kind == "nationality"


def test_every_fact_is_between_world_entities_with_declared_relations(contribution):
    ids = {e.id for e in contribution.entities}
    declared = {r.id for r in contribution.relations}
    for t in contribution.triples:
        assert (t.s in ids or t.s.startswith("country:")) and (t.o in ids or t.o.startswith("country:"))
        assert t.p in declared and not t.literal
