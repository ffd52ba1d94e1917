"""The chemical elements and their discoverers (the mendeleev package's SQLite table), as answers a Neos question can
end at: "the chemical element that was discovered in Finland", "the person who discovered yttrium".

The table lists all 118 elements, so the elements discovered in one country are all in the world, as a reader
knows them (unlike a country's rivers or citizens): one element of a country in the world is one in reality. Per
element it states the discoverers (a comma-separated text), the discovery year and location, and the name's
origin. The adapter reads it with ``sqlite3`` (mendeleev itself is not imported) and gives

* ``(element, P189 location of discovery, country)`` for each place of the location ("England/France"), England,
  Scotland and Great Britain read as today's United Kingdom; an element with a place that is no world country
  ("USSR") gets none, so that no country's set of elements is partial;
* ``(element, P138 named after, country)`` where the name origin names a world country ("Latin: Germania
  (Germany)", "Named for Poland"): gallium, germanium, ruthenium, polonium, francium and nihonium, the six elements
  named after a country;
* ``(element, P61 discoverer or inventor, person)`` for each discoverer, only where every one is a named person:
  "Known to the ancients", a laboratory or institute, "et al" or a pair sharing a name ("Pierre and Marie Curie")
  give none, so that an element's discoverers in the world are all of them. People are keyed by surname, which
  joins the table's spellings of one person ("Sir H. Davy", "Sir Humphrey Davy"); a few of the table's misspelled
  names are corrected (:data:`SPELLING`, "Marguerite Derey" for Perey) so that an answer reads as a person writes it.

Pages state the symbol, atomic number, year, place, discoverers and name origin so that search finds them. Both
sizes hold all elements.
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters.wildlife import country_names
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("mendeleev", "world-countries")
DATABASE = Path("mendeleev/elements.db")
SOURCE = "mendeleev"
# the table's places that are no longer a country's common name
PLACES = {"England": "United Kingdom", "Scotland": "United Kingdom", "Great Britain": "United Kingdom"}
# the table's misspellings of discoverers' names, as the literature spells them
SPELLING = {"Sir William Ramsey": "William Ramsay", "Nils Langet": "Nils Langlet", "Joseph Priestly": "Joseph Priestley",
            "Fredrich Wöhler": "Friedrich Wöhler", "Fredrich Stromeyer": "Friedrich Stromeyer",
            "Fredrich Ernst Dorn": "Friedrich Ernst Dorn", "Fredrich Soddy": "Frederick Soddy",
            "G. Kirchoff": "G. Kirchhoff", "Gustov Kirchoff": "Gustav Kirchhoff",
            "C.F. Aver von Welsbach": "C.F. Auer von Welsbach", "Smithson Tenant": "Smithson Tennant",
            "S.Tenant": "S. Tennant", "A.F.Fourcory": "A.F. Fourcroy", "H.V.Collet-Descoltils": "H.V. Collet-Descotils",
            "Émillo Segrè": "Emilio Segrè", "E.Segré": "E. Segrè", "S.G.Tompson": "S.G. Thompson",
            "A.C.Wohl": "A.C. Wahl", "Marguerite Derey": "Marguerite Perey"}
# "Latin: Germania (Germany).", "Named for Poland, ...", "Named after the country of Japan.": the country an element
# is named after (a name that is no world country, "Thor" or "Ytterby", names none)
_NAMED_AFTER = re.compile(r"^(?:Latin: \w+ \((\w+)\)|Named (?:for|after) (?:the country of )?(\w+)\b)")
_NOT_PEOPLE = re.compile(r"ancients|Institute|Laborator|Research|RIKEN|Argonne|Calif|et al|\band\b")
_TITLES = ("Sir ",)


@dataclass(frozen=True)
class Element:
    number: int
    symbol: str
    name: str
    discoverers: str
    year: int | None
    location: str | None
    name_origin: str


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    names = country_names(sources["world-countries"])
    ids = {name: cid for cid, name in names.items()}
    out = Contribution(relations=relations({"P61", "P138", "P189"}))
    found: dict[str, list[str]] = defaultdict(list)  # person key -> the element names they discovered
    labels: dict[str, set[str]] = defaultdict(set)  # person key -> spellings
    for element in load_elements(sources["mendeleev"] / DATABASE):
        eid = f"element:{element.symbol.lower()}"
        places = countries_of(element.location, ids)
        people = discoverers(element.discoverers)
        out.triples += [Triple(eid, "P189", c) for c in places]
        namesake = named_after(element.name_origin, ids)
        if namesake:
            out.triples.append(Triple(eid, "P138", namesake))
        for person in people:
            key = person_key(person)
            found[key].append(element.name)
            labels[key].add(person)
            out.triples.append(Triple(eid, "P61", f"person:{key}"))
        _add_page(out, eid, element.name, "element", _element_text(element, people, [names[c] for c in places]),
                  f"chemical element {element.number} ({element.symbol})")
    for key, elements in sorted(found.items()):
        label, *aliases = sorted(labels[key], key=lambda s: (-len(s), s))
        _add_page(out, f"person:{key}", label, "person",
                  f"{label} is named by the mendeleev periodic table as the discoverer or a co-discoverer of "
                  f"{join_list(elements)}.", "discoverer of chemical elements", aliases)
    return out


def load_elements(db: Path) -> list[Element]:
    """The elements table's rows, by atomic number (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT atomic_number, symbol, name, discoverers, discovery_year, discovery_location, "
                            "name_origin FROM elements ORDER BY atomic_number").fetchall()
    return [Element(n, s, name, d or "", y, loc, origin or "") for n, s, name, d, y, loc, origin in rows]


def countries_of(location: str | None, ids: Mapping[str, str]) -> list[str]:
    """The country ids of "England/France"; [] when a place is no world country (all or none, see the docstring)."""
    if not location:
        return []
    places = [PLACES.get(p.strip(), p.strip()) for p in location.split("/")]
    if any(p not in ids for p in places):
        return []
    return sorted({ids[p] for p in places})


def named_after(origin: str, ids: Mapping[str, str]) -> str | None:
    """The id of the world country the name origin says the element is named after, if any."""
    match = _NAMED_AFTER.match(origin)
    name = match and (match.group(1) or match.group(2))
    return ids.get(name) if name else None


def discoverers(text: str) -> list[str]:
    """The named people of a discoverers text, spelled right and without titles; [] unless every one is a person."""
    if not text or _NOT_PEOPLE.search(text):
        return []
    out = []
    for part in re.split(r"[,;]", text):
        name = SPELLING.get(part.strip(), part.strip())
        name = next((name.removeprefix(t) for t in _TITLES if name.startswith(t)), name)
        out.append(re.sub(r"\.(?=[A-Z][a-z])", ". ", name))  # "G.T.Seaborg" -> "G.T. Seaborg"
    return out


def person_key(name: str) -> str:
    """The surname, lower-cased and ASCII-folded: "davy" for "Humphrey Davy" and "H. Davy", "street" for
    "K.Street Jr."."""
    words = [w for w in re.split(r"[\s.]+", name) if w and w != "Jr"]
    return slugify(words[-1]).lower()


def _element_text(element: Element, people: list[str], places: list[str]) -> str:
    head = f"{element.name} (symbol {element.symbol}, atomic number {element.number}) is a chemical element."
    if element.year is None:
        found = " It has been known since antiquity."
    else:
        where = f" in {join_list([_the(p) for p in places])}" if places else f" in {element.location}" if element.location else ""
        by = join_list(people) if people else element.discoverers.rstrip(".")
        found = f" It was discovered in {element.year}{where} by {by}."
    origin = f" Name origin: {element.name_origin.rstrip('.')}." if element.name_origin else ""
    return head + found + origin


def _the(country: str) -> str:
    """"the United Kingdom", "France"."""
    return f"the {country}" if country.startswith("United ") else country


def _add_page(out: Contribution, eid: str, label: str, kind: str, text: str, description: str,
              aliases: list[str] | None = None) -> None:
    page_id = slugify(label)
    out.pages.append(Page(page_id, page_url(page_id), label, text, SOURCE, entity_id=eid))
    out.entities.append(Entity(eid, label, kind, description, aliases or [], page_id))
