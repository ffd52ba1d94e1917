"""The chemical elements adapter on the real mendeleev 1.3.0 and world-countries packages. Expectations are read off
the package's elements table (atomic number, discoverers, discovery location, name origin):

* 39 yttrium: "Johann Gadolin", "Finland"; 2 helium: "Sir William Ramsey, Nils Langet, P.T.Cleve", "Scotland/Sweden";
* 84 polonium: "Pierre and Marie Curie", "France", "Named for Poland, native country of Marie Curie.";
* 106 seaborgium: "Soviet Nuclear Research/ U. of Cal at Berkeley", "USSR/United States";
* 87 francium: "Marguerite Derey" (Perey in the literature), "France"; 6 carbon: "Known to the ancients";
* Davy: "Sir H. Davy" for boron, "Sir Humphrey Davy" for sodium, magnesium, potassium, calcium and barium."""

from __future__ import annotations

import pytest

from data_gen.world.adapters import elements


@pytest.fixture(scope="module")
def table(world_sources):
    return elements.contribute(world_sources(*elements.SOURCES), "small")


def _facts(contribution, subject):
    return {(t.p, t.o) for t in contribution.triples if t.s == subject}


def test_an_element_gets_its_place_of_discovery_and_its_discoverers(table):
    assert _facts(table, "element:y") == {("P189", "country:FIN"), ("P61", "person:gadolin")}
    # Scotland is today's United Kingdom; the misspelled Ramsey and Langet are joined to their right spelling
    assert _facts(table, "element:he") == {("P189", "country:GBR"), ("P189", "country:SWE"), ("P61", "person:ramsay"),
                                           ("P61", "person:langlet"), ("P61", "person:cleve")}


def test_a_pair_a_laboratory_the_ancients_and_the_ussr_give_no_fact(table):
    assert _facts(table, "element:po") == {("P189", "country:FRA"), ("P138", "country:POL")}  # the Curies
    assert _facts(table, "element:sg") == set()
    assert _facts(table, "element:c") == set()
    carbon = next(p for p in table.pages if p.entity_id == "element:c")
    assert carbon.text == ("Carbon (symbol C, atomic number 6) is a chemical element. It has been known since "
                           "antiquity. Name origin: Latin: carbo, (charcoal).")


def test_the_six_elements_named_after_a_country(table):
    assert {(t.s, t.o) for t in table.triples if t.p == "P138"} == {
        ("element:ga", "country:FRA"), ("element:ge", "country:DEU"), ("element:ru", "country:RUS"),
        ("element:po", "country:POL"), ("element:fr", "country:FRA"), ("element:nh", "country:JPN")}


def test_one_element_each_was_discovered_in_finland_romania_spain_and_japan(table):
    places = [t.o for t in table.triples if t.p == "P189"]
    assert {c: places.count(c) for c in ("country:FIN", "country:ROU", "country:ESP", "country:JPN")} == {
        "country:FIN": 1, "country:ROU": 1, "country:ESP": 1, "country:JPN": 1}
    assert len([e for e in table.entities if e.kind == "element"]) == 118


def test_a_person_joins_the_tables_spellings_and_states_the_elements(table):
    davy = next(e for e in table.entities if e.id == "person:davy")
    assert (davy.label, davy.kind, davy.aliases) == ("Humphrey Davy", "person", ["H. Davy"])
    page = next(p for p in table.pages if p.entity_id == "person:davy")
    assert page.text.endswith("co-discoverer of Boron, Sodium, Magnesium, Potassium, Calcium and Barium.")
    assert next(e for e in table.entities if e.id == "person:perey").label == "Marguerite Perey"
    yttrium = next(p for p in table.pages if p.entity_id == "element:y")
    assert "It was discovered in 1789 in Finland by Johann Gadolin." in yttrium.text


@pytest.mark.parametrize("text, people", [
    ("Sir H. Davy, J.L. Gay-Lussac, L.J. Thénard", ["H. Davy", "J.L. Gay-Lussac", "L.J. Thénard"]),
    ("Sir William Ramsay; M. W. Travers", ["William Ramsay", "M. W. Travers"]),
    ("G.T.Seaborg, S.G.Tompson, A.Ghiorso", ["G.T. Seaborg", "S.G. Thompson", "A. Ghiorso"]),
    ("A. Ghiorso, et al", []), ("Fausto and Juan José de Elhuyar", []), ("RIKEN", []), ("Known to the ancients.", []),
])
def test_discoverers_are_named_people_only(text, people):
    assert elements.discoverers(text) == people


def test_a_person_is_keyed_by_surname_and_a_place_by_todays_country():
    assert [elements.person_key(n) for n in ("H. Davy", "Humphrey Davy", "K. Street Jr.", "J.L. Gay-Lussac")] == [
        "davy", "davy", "street", "gay_lussac"]
    ids = {"United Kingdom": "country:GBR", "France": "country:FRA", "United States": "country:USA"}
    assert elements.countries_of("England/France", ids) == ["country:FRA", "country:GBR"]
    assert elements.countries_of("USSR/United States", ids) == []  # all or none
    assert elements.countries_of(None, ids) == []
