"""Former currencies (issue 36): the currency CLDR dates a country's one current currency as replacing. Hand-made
CLDR rows for the rule, then babel 2.19.0's CLDR 49 rows as the build reads them (checked by hand in its
``global.dat``: Croatia's kuna until 2023-01-14, the euro from 2023-01-01)."""

import pytest

from data_gen.kg import Edge
from data_gen.neos.open_world import CLOSED_WORLD, OPEN_WORLD, PARTIAL
from data_gen.neos.verbalize import relation_phrase
from data_gen.world.adapters import former_currencies
from data_gen.world.adapters.former_currencies import Change, changes
from data_gen.world.properties import FORMER_CURRENCY
from neos_core.world.sources import SourceCache

ISO2 = {"HR": "country:HRV", "NO": "country:NOR", "ZW": "country:ZWE", "GH": "country:GHA", "FR": "country:FRA"}


def test_the_currency_the_current_one_replaced():
    rows = {
        # the kuna ended two weeks after the euro began; the older dinars ended earlier
        "HR": [("YUN", (1990, 1, 1), (1991, 12, 23), True), ("HRK", (1994, 5, 30), (2023, 1, 14), True),
               ("EUR", (2023, 1, 1), None, True)],
        # the krona ended in 1905, thirty years after the krone began: side by side, no change of currency
        "NO": [("SEK", (1873, 5, 27), (1905, 6, 7), True), ("NOK", (1875, 1, 1), None, True)],
        # two current currencies: "its current one" names neither
        "ZW": [("ZWL", (2009, 2, 2), (2024, 8, 31), True), ("USD", (2009, 4, 12), None, True),
               ("ZWG", (2024, 6, 25), None, True)],
        # the old cedi ended at most a year before the new one began (364 days after it), and a row that was never
        # legal tender does not count
        "GH": [("GHC", (1979, 3, 9), (2007, 12, 31), True), ("GHP", (2007, 1, 1), (2008, 2, 1), False),
               ("GHS", (2008, 12, 30), None, True)],
        "XX": [("AAA", (1900, 1, 1), (2000, 1, 1), True), ("BBB", (2000, 1, 1), None, True)],  # no world country
        # the old franc ended 1,462 days (four years and a day) after the new one began: one day too many
        "FR": [("FRX", (1990, 1, 1), (2004, 1, 2), True), ("FRN", (2000, 1, 1), None, True)],
    }
    assert changes(rows, ISO2) == [Change("country:GHA", "GHC", (2007, 12, 31), "GHS", (2008, 12, 30)),
                                   Change("country:HRV", "HRK", (2023, 1, 14), "EUR", (2023, 1, 1))]


@pytest.fixture(scope="module")
def out():
    cache = SourceCache()
    return former_currencies.contribute({n: cache.resolve(n).root for n in former_currencies.SOURCES}, "small")


def test_cldr_49_facts(out):
    facts = {(t.s, t.o) for t in out.triples}
    assert ("country:HRV", "currency:HRK") in facts and ("country:DEU", "currency:DEM") in facts
    assert not {t for t in out.triples if t.s in ("country:NOR", "country:ZWE", "country:CUB", "country:CPV")}
    # Nepal used the Indian rupee until 1966: the rupee is India's current currency, whose page does not say so
    assert not {t for t in out.triples if t.s == "country:NPL"}
    franc = next(e for e in out.entities if e.id == "currency:FRF")
    assert franc.label == "French Franc" and franc.kind == "currency"
    # France, French Guiana, Guadeloupe, Martinique, Mayotte, Réunion, Saint Barthélemy, Saint Martin, Saint Pierre
    # and Miquelon, the French Southern and Antarctic Lands
    assert sum(t.o == "currency:FRF" for t in out.triples) == 10
    page = next(p for p in out.pages if p.entity_id == "currency:HRK")
    assert "Croatia until 2023-01-14, when the Euro (legal tender from 2023-01-01) replaced it" in page.text
    assert {t.p for t in out.triples} == {FORMER_CURRENCY}


def test_read_from_the_country_it_is_closed_and_partial_from_the_currency_open():
    assert (FORMER_CURRENCY, True) in CLOSED_WORLD and (FORMER_CURRENCY, True) in PARTIAL
    assert (FORMER_CURRENCY, False) in OPEN_WORLD
    edge = Edge("country:HRV", "currency:HRK", FORMER_CURRENCY, forward=True)
    assert relation_phrase(edge, "former currency", "the country") == "that is the former currency of the country"
