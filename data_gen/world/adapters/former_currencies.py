"""The currency a country used before its current one, from the Unicode CLDR data the babel package ships, as an
answer a Neos question can end at: "the currency C used before its current one" (the Croatian kuna for Croatia).

CLDR lists, per territory, the currencies that were legal tender there with the dates each was. A country gets a
fact ``(country, x:former_currency, currency)`` when CLDR gives it exactly one current legal tender (no end date)
and that currency replaced the one that ended last: the older one ended at most a year before the current one
began, or at most four years after it (a changeover: the German mark until 2002, the euro from 1999, the longest in
CLDR's rows). Two currencies legal tender side by side for decades were no change of currency (Norway's Swedish
krona until 1905, its krone from 1875; Cuba's convertible peso beside the peso), nor was one that ended years before
the current one began; neither gives a fact, nor does a country with two current currencies (Zimbabwe: the US dollar
and the ZiG). The
former currency is an entity of its own, named as CLDR's English names it ("Ghanaian Cedi (1979–2007)"), with a
page stating its dates; one the world already holds as a country's current currency (the Indian rupee, Nepal's
until 1966) gives no fact: its page, from world-countries, does not state it. Read from the country the fact is
closed (one currency ended last); read from the currency it is open (the French franc was France's and its
overseas departments'). Both sizes hold the same facts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from data_gen.world.adapters._cldr import ENGLISH, GLOBAL, SOURCE, load_cldr
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._geo import WORLD_COUNTRIES
from data_gen.world.properties import FORMER_CURRENCY, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("babel", "world-countries")
ENDED_BEFORE_DAYS = 366  # the former currency ended at most this long before the current one began
CHANGEOVER_DAYS = 4 * 365 + 1  # or at most this long after

Date = tuple[int, int, int]


@dataclass(frozen=True)
class Change:
    """One country's change of currency as CLDR dates it."""

    country: str  # world country id
    former: str  # ISO 4217 code
    ended: Date
    current: str
    started: Date


def changes(territory_currencies: Mapping[str, list], iso2: Mapping[str, str]) -> list[Change]:
    """The countries' last changes of currency (see the module docstring); ``iso2``: CLDR territory -> world id."""
    out = []
    for territory, entries in sorted(territory_currencies.items()):
        if territory not in iso2:
            continue
        current = [(code, start) for code, start, end, tender in entries if tender and end is None]
        ended = [(end, code) for code, _, end, tender in entries
                 if tender and end is not None and code not in {c for c, _ in current}]
        if len(current) != 1 or current[0][1] is None or not ended:
            continue
        end, former = max(ended)
        (code, start), = current
        if -ENDED_BEFORE_DAYS <= _days(end) - _days(start) <= CHANGEOVER_DAYS:
            out.append(Change(iso2[territory], former, end, code, start))
    return out


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    cldr, english = load_cldr(sources["babel"] / GLOBAL), load_cldr(sources["babel"] / ENGLISH)
    records = json.loads((sources["world-countries"] / WORLD_COUNTRIES).read_text(encoding="utf-8"))
    iso2 = {c["cca2"]: f"country:{c['cca3']}" for c in records}
    names = {f"country:{c['cca3']}": c["name"]["common"] for c in records}
    in_use = {c for r in records for c in r.get("currencies", {})}  # the world's own currency entities
    currency_names = english["currency_names"]
    version = cldr["cldr"]["version"]
    by_former: dict[str, list[Change]] = defaultdict(list)
    for change in changes(cldr["territory_currencies"], iso2):
        if change.former not in in_use and change.former in currency_names:
            by_former[change.former].append(change)
    out = Contribution(relations=relations({FORMER_CURRENCY}))
    for code, used in sorted(by_former.items()):
        label = currency_names[code]
        eid, page_id = f"currency:{code}", slugify(label)
        stated = join_list([f"{names[c.country]} until {_iso(c.ended)}, when the "
                            f"{currency_names.get(c.current, c.current)} (legal tender from {_iso(c.started)}) "
                            "replaced it" for c in used])
        text = (f"The {label} (ISO 4217 code {code}) is a former currency. According to Unicode CLDR {version}, it "
                f"was legal tender in {stated}.")
        out.pages.append(Page(page_id, page_url(page_id), label, text, SOURCE, entity_id=eid))
        of = join_list(sorted(names[c.country] for c in used))
        out.entities.append(Entity(eid, label, "currency", f"former currency of {of}", [], page_id))
        out.triples += [Triple(c.country, FORMER_CURRENCY, eid) for c in used]
    return out


def _days(day: Date) -> int:
    return date(*day).toordinal()


def _iso(day: Date) -> str:
    return date(*day).isoformat()
