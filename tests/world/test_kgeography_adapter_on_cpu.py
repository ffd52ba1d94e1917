"""The kgeography adapter on the real kgeography-data package."""

from __future__ import annotations

import numpy as np
import pytest

from data_gen.world.adapters import kgeography
from neos_core.world.model import to_record


@pytest.fixture(scope="module")
def sources(world_sources):
    return world_sources(*kgeography.SOURCES)


@pytest.fixture(scope="module")
def small(sources):
    return kgeography.contribute(sources, "small")


@pytest.fixture(scope="module")
def full(sources):
    return kgeography.contribute(sources, "full")


def _facts(c, subject):
    return {(t.p, t.o, t.literal) for t in c.triples if t.s == subject}


def test_bavaria(small):
    eid = "subdivision:germany:bavaria"
    assert _facts(small, eid) == {("P131", "country:DEU", False), ("P36", "city:2867714", False)}  # GeoNames' Munich
    page = next(p for p in small.pages if p.entity_id == eid)
    assert page.title == "Bavaria" and "16 states of Germany" in page.text and "Munich" in page.text
    flag = next(a for a in small.images if a.record.id == "subflag_germany_bavaria")
    assert flag.record.caption == "Flag of Bavaria" and flag.record.entity_id == eid
    assert flag.record.page_id == page.id and page.image_ids == ["subflag_germany_bavaria"]
    pixels = np.asarray(flag.pixels)
    assert flag.pixels.mode == "RGB" and pixels.std() > 10  # lozenges of white and blue, not a blank


def test_a_capital_no_city_of_the_country_is_called_stays_the_maps_words(small, sources):
    # Assam's map names Dispur, which GeoNames' cities of 15,000 do not hold; Canberra is the Australian Capital
    # Territory's, in GeoNames as Canberra
    assert _facts(small, "subdivision:india:assam") >= {("P36", "Dispur", True)}
    matched = {c.division_id: c for c in kgeography.capitals(sources, "small")}
    assert "subdivision:india:assam" not in matched and len(matched) == 212  # of 219 capitals the small maps name
    act = matched["subdivision:australia:australian_capital_territory"]
    assert (act.division, act.described, act.city) == ("Australian Capital Territory", "one of the states of Australia",
                                                        2172517)


def test_small_covers_ten_countries(small):
    assert {t.o for t in small.triples if t.p == "P131"} == {
        "country:AUS", "country:BRA", "country:CAN", "country:CHN", "country:FRA", "country:DEU", "country:IND",
        "country:ITA", "country:JPN", "country:ESP",
    }
    assert 200 <= len(small.entities) <= 260  # 8+27+13+33+13+16+35+20+47+17 divisions


def test_maps_of_a_state_lie_in_that_state(full):
    goa = {e.id for e in full.entities if e.id.startswith("subdivision:goa:")}
    assert goa and all(("P131", "subdivision:india:goa", False) in _facts(full, eid) for eid in goa)
    assert ("P131", "country:IND", False) in _facts(full, "subdivision:india:goa")


def test_us_states_get_capital_and_flag_on_the_us_states_entity(full):
    # Austin, Texas (974,447 inhabitants), not the smaller Austin, Minnesota (24,563): the most populous of the name
    assert _facts(full, "us_state:texas") == {("P36", "city:4671654", False)}
    texas = next(e for e in full.entities if e.id == "us_state:texas")
    assert texas.kind == "us_state" and texas.page_id is None
    flag = next(a for a in full.images if a.record.entity_id == "us_state:texas")
    assert flag.record.page_id is None and flag.record.caption == "Flag of Texas"


def test_continent_maps_give_no_subdivisions(full):
    assert not any(e.id.startswith(("subdivision:world:", "subdivision:europe:")) for e in full.entities)
    assert len({e.id for e in full.entities}) == len(full.entities) > 3000


def test_deterministic(small, sources):
    again = kgeography.contribute(sources, "small")
    for name in ("entities", "pages", "triples", "relations"):
        assert [to_record(r) for r in getattr(again, name)] == [to_record(r) for r in getattr(small, name)]
    assert [to_record(a.record) for a in again.images] == [to_record(a.record) for a in small.images]


def test_a_country_one_map_divides_states_its_division_count(small, full):
    counts = {t.s: t.o for t in small.triples if t.p == "x:division_count"}
    assert all(t.literal for t in small.triples if t.p == "x:division_count")
    assert counts == {"country:AUS": "8", "country:BRA": "27", "country:CAN": "13", "country:CHN": "33",
                      "country:FRA": "13", "country:DEU": "16", "country:IND": "35", "country:ITA": "20",
                      "country:JPN": "47", "country:ESP": "17"}  # the small maps' divisions, as above
    in_full = {t.s: t.o for t in full.triples if t.p == "x:division_count"}
    # France (departments and regions), Spain (communities and provinces): two levels, no count; the US map's
    # states are the us_states adapter's
    assert in_full["country:DEU"] == "16" and not {"country:FRA", "country:ESP", "country:USA"} & in_full.keys()
