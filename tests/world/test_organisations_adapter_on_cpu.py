"""The organisations adapter on the real country_converter 1.3.2, world-countries and WordNet packages. Expectations
are read off the package's country_data.tsv by hand:

* member rows per column: OECD 38, EU 27, EEA 30, UN 193, APEC 21, G7 7, CoE 46 (G20 43, CIS 8, Schengen 28: left
  out, see the adapter's docstring);
* Austria (AUT): OECD 1961, EU, EEA, Schengen, EURO 1999, UN 1955, G20, CoE; Chile (CHL): OECD 2010, UN 1945, APEC;
  Israel (ISR): OECD 2010, UN 1949; Hong Kong (HKG) and Taiwan (TWN): APEC only; Kyrgyzstan (KGZ): UN 1992, no CIS.
"""

from __future__ import annotations

import pytest

from data_gen.kg import KG
from data_gen.kg.distinguish import NotDistinguishable, distinguishing_set
from data_gen.world.adapters import country_facts, organisations

EU, UN = "organization:08173515", "organization:08295580"  # WordNet's synsets, whose ids the adapter keeps


@pytest.fixture(scope="module")
def table(world_sources):
    return organisations.contribute(world_sources(*organisations.SOURCES), "small")


def _members(contribution, org):
    return {t.s for t in contribution.triples if t.p == "P463" and t.o == org}


def test_every_organisation_states_its_complete_member_list_and_its_count(table):
    counts = {t.s: t.o for t in table.triples if t.p == "P2124"}
    assert counts == {"organization:oecd": "38", EU: "27", "organization:eea": "30", UN: "193",
                      "organization:apec": "21", "organization:g7": "7", "organization:coe": "46"}
    assert all(t.literal for t in table.triples if t.p == "P2124")
    for org, count in counts.items():  # every row is a world country: the count is the facts'
        assert len(_members(table, org)) == int(count)


def test_a_countrys_memberships_leave_out_g20_schengen_the_euro_and_the_cis(table):
    def of(country):
        return {t.o for t in table.triples if t.p == "P463" and t.s == country}

    assert of("country:AUT") == {"organization:oecd", EU, "organization:eea", UN, "organization:coe"}
    assert of("country:CHL") == {"organization:oecd", UN, "organization:apec"}
    assert of("country:HKG") == of("country:TWN") == {"organization:apec"}
    assert of("country:KGZ") == {UN}


def test_pages_state_the_members_by_world_name_with_the_year_each_joined(table):
    pages = {p.entity_id: p.text for p in table.pages}
    assert pages["organization:oecd"].startswith(
        "Organisation for Economic Co-operation and Development (OECD) is an international organisation. It has 38 "
        "members (with the year each joined): Australia (1971), Austria (1961),")
    assert "Chile (2010)" in pages["organization:oecd"] and "Israel (2010)" in pages["organization:oecd"]
    assert "Kyrgyzstan (1992)" in pages[UN] and "Switzerland (2002)" in pages[UN]
    assert "It has 21 members: Australia, Brunei, Canada," in pages["organization:apec"]


def test_the_eu_and_the_un_are_wordnets_entities_and_the_complete_list_wins(table, world_sources):
    eu = next(e for e in table.entities if e.id == EU)
    assert eu.label == "European Union" and "EEC" in eu.aliases
    assert "Europe" not in eu.aliases and "EU" not in eu.aliases  # the continent, europium: other WordNet nouns
    assert next(p for p in table.pages if p.entity_id == EU).text.startswith(
        "European Union (also European Community, EC, European Economic Community, EEC and Common Market) is defined "
        "in WordNet as: an international organization of European countries")
    assert "country:GBR" not in _members(table, EU) and len(_members(table, EU)) == 27
    # WordNet's EU of 2006 (15, the United Kingdom among them) gives no entity and no fact any more; NATO stays
    wordnet = country_facts.contribute(world_sources(*country_facts.SOURCES), "small")
    assert EU not in {e.id for e in wordnet.entities} and not _members(wordnet, EU)
    assert len(_members(wordnet, "organization:08174398")) == 17  # NATO, as WordNet lists it


def test_membership_alone_tells_no_organisation_but_apec_from_the_un(table):
    """Why no organisation ends a task on the small world: every member of the OECD, the EU, the EEA, the G7 and the
    Council of Europe is a UN member, so no set of membership facts singles one out (the UN always matches too);
    APEC is singled out by Hong Kong or Taiwan, which are no UN members."""
    kg = KG.from_triples((t.s, t.p, t.o) for t in table.triples if not t.literal)
    for org in ("organization:oecd", EU, "organization:eea", "organization:g7", "organization:coe"):
        with pytest.raises(NotDistinguishable) as caught:
            distinguishing_set(kg, org)
        assert UN in caught.value.candidates
    assert [f.neighbour for f in distinguishing_set(kg, "organization:apec")] == ["country:HKG"]
