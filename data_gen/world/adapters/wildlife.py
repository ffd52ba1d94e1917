"""Animals and plants WordNet's glosses place in one country, as answers a Neos question can end at.

WordNet has no pointer from a species to where it lives, but its glosses say it: "nocturnal flightless bird of New
Zealand" (the kiwi), "extinct heavy flightless bird of Mauritius" (the dodo), "pine native to Japan". A synset of
the animal or plant lexicographer file joins the world when its gloss names exactly one world country (by its
common name, whole words) and names it right after "of", "native to", "found in" or "endemic to"; fact
``(thing, x:<kind>_found_in, country)`` (:data:`data_gen.world.properties.WILDLIFE_RELATIONS`). Genera, families
and orders are left out ("genus Dioon"): they are groups, not a thing found somewhere. Both sizes hold the same
synsets (about 110 animals and 170 plants), WordNet's only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._geo import WORLD_COUNTRIES
from data_gen.world.adapters._wordnet_data import WordNet, load_wordnet
from data_gen.world.adapters.country_facts import add_entity
from data_gen.world.properties import WILDLIFE_RELATIONS, relations
from neos_core.world.model import Contribution

SOURCES = ("wordnet-base", "world-countries")
WILDLIFE_KINDS = {5: "animal", 20: "plant"}  # noun.animal, noun.plant
_GROUPS = ("genus ", "family ", "order ", "subfamily ", "suborder ", "class ", "phylum ", "division ")
_PLACED = r"\b(?:of|native to|found in|endemic to)\s+"


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    wn = load_wordnet(sources["wordnet-base"])
    names = country_names(sources["world-countries"])
    out = Contribution(relations=relations(set(WILDLIFE_RELATIONS.values())))
    for offset, (kind, country) in sorted(placed(wn, names).items()):
        add_entity(out, wn, wn.synsets[offset], kind, [(None, WILDLIFE_RELATIONS[kind], country)],
                   f"It is {'an' if kind == 'animal' else 'a'} {kind} found in {names[country]}.")
    return out


def country_names(root: Path) -> dict[str, str]:
    """country id -> common name (world-countries)."""
    records = json.loads((root / WORLD_COUNTRIES).read_text(encoding="utf-8"))
    return {f"country:{c['cca3']}": c["name"]["common"] for c in records}


def placed(wn: WordNet, names: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Animal or plant offset -> (its kind, the one country its gloss places it in; see the module docstring)."""
    ids = {name: cid for cid, name in names.items()}
    alternatives = "|".join(re.escape(n) for n in sorted(ids, key=len, reverse=True))
    named, after = re.compile(rf"\b({alternatives})\b"), re.compile(rf"{_PLACED}({alternatives})\b")
    out = {}
    for offset, synset in wn.synsets.items():
        if synset.lexfile not in WILDLIFE_KINDS or synset.label.lower().startswith(_GROUPS):
            continue
        countries = set(named.findall(synset.definition))
        if len(countries) == 1 and after.search(synset.definition):
            out[offset] = (WILDLIFE_KINDS[synset.lexfile], ids[countries.pop()])
    return out
