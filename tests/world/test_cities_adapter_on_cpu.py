"""The cities adapter on the real sources: the small world's national and subdivision capitals."""

from __future__ import annotations

import pytest

from data_gen.world.adapters import cities


@pytest.fixture(scope="module")
def small(world_sources):
    return cities.contribute(world_sources(*cities.SOURCES), "small")


def _facts(c, subject):
    return {(t.p, t.o) for t in c.triples if t.s == subject and not t.literal}


def test_a_subdivision_capital_is_a_city_that_states_its_subdivision(small):
    munich = next(e for e in small.entities if e.label == "Munich")
    assert munich.id == "city:2867714" and munich.description == "capital of Bavaria"
    assert _facts(small, munich.id) == {("P31", "x:city"), ("P17", "country:DEU"),
                                        ("P1376", "subdivision:germany:bavaria")}
    page = next(p for p in small.pages if p.entity_id == munich.id)
    assert page.text.startswith("Munich is a city in Germany. It is the capital of Bavaria, one of the states of "
                                "Germany. Population: 1,505,005 (GeoNames).")


def test_a_national_capital_that_is_a_subdivisions_too_states_both(small):
    berlin = next(e for e in small.entities if e.label == "Berlin")
    assert berlin.description == "capital of Germany and Berlin"
    assert {o for p, o in _facts(small, berlin.id) if p == "P1376"} == {"country:DEU", "subdivision:germany:berlin"}


def test_the_larger_of_two_cities_of_one_name_comes_first(small):
    # Victoria, British Columbia (289,625) before Victoria, Seychelles (22,881): the builder gives it the bare title
    victorias = [e.description for e in small.entities if e.label == "Victoria"]
    assert victorias == ["capital of British Columbia", "capital of Seychelles"]
    assert sum(e.kind == "city" for e in small.entities) == 448  # 243 national capitals, 205 of subdivisions only
