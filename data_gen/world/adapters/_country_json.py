"""The country-json package's per-country tables and their join to the world's countries, shared by the
``national_dishes`` and ``religions`` adapters.

The table's country names join the world's countries by world-countries' names (common, official, alternative
spellings, accents and case folded), four by their world-countries name (:data:`RENAMED`, "Turkey" is Türkiye).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._geo import fold

SOURCE = "country-json"
# the table's names world-countries spells otherwise
RENAMED = {"Turkey": "Türkiye", "Fiji Islands": "Fiji", "The Democratic Republic of Congo": "DR Congo",
           "Micronesia (country)": "Micronesia"}


def load_table(root: Path, table: Path, field: str) -> list[tuple[str, str | None]]:
    """(country name, the row's ``field`` or None) per row of one of country-json's tables."""
    return [(row["country"], row[field]) for row in json.loads((root / table).read_text(encoding="utf-8"))]


def country_ids(countries: Mapping[str, tuple[str, list[str]]]) -> dict[str, str]:
    """Folded name -> country id, for names that world-countries gives one country only."""
    owners: dict[str, set[str]] = defaultdict(set)
    for cid, (_, all_names) in countries.items():
        for name in all_names:
            owners[fold(name)].add(cid)
    return {name: cids.pop() for name, cids in owners.items() if len(cids) == 1}


def country_id(name: str, ids: Mapping[str, str]) -> str | None:
    """The world country a name of the table names (``ids``: :func:`country_ids`), or None."""
    return ids.get(fold(RENAMED.get(name, name)))


def misses(table: list[tuple[str, str | None]], ids: Mapping[str, str]) -> list[str]:
    """The table's country names that join no world country."""
    return [country for country, _ in table if country_id(country, ids) is None]
