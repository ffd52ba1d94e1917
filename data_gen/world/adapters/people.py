"""People WordNet names, as answers a Neos question can end at: their country of citizenship and their occupation.

WordNet glosses a person by nationality, occupation and dates: "Jamaican singer who popularized reggae
(1945-1981)", "United States writer and humorist ... (1835-1910)". A person (an instance synset of the person
lexicographer file) joins the world when

* the gloss opens with the English demonym or the common name of exactly one world country ("Jamaican",
  "United States"; world-countries gives both): fact ``(person, P27 country of citizenship, country)``;
* the gloss ends with the dates, born 1900 or later: a "Greek philosopher (469-399 BC)" or an "English poet" of
  1600 was no citizen of today's Greece or United Kingdom, the countries of the world;
* fact ``(person, P106 occupation, occupation)`` for each instance hypernym ("singer"), an ``occupation`` entity.

A person is labelled by the first lemma that is a full name ("Bob Marley", not "Marley"). Both sizes hold the same
people: about 370, WordNet's only.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._geo import WORLD_COUNTRIES
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._wordnet_data import INSTANCE_HYPERNYM, Synset, WordNet, load_wordnet
from data_gen.world.adapters.country_facts import add_entity, entity_id
from data_gen.world.properties import relations
from neos_core.world.model import Contribution

SOURCES = ("wordnet-base", "world-countries")
LEXFILE_PERSON = 18  # noun.person
BORN_SINCE = 1900
# "(1945-1981)", "(born 1930)" closing the gloss: the birth year and the death year (a Wikidata description writes
# an en dash, "(1900\u20131983)"; data_gen.neos.open_world reads both)
DATES = re.compile(r"\((?:born )?(\d{4})(?:[-\u2013](\d{4}))?\)$")
_LEAD_WORDS = 3  # the longest country name a gloss opens with that matters here ("United States", "South Korean")


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    wn = load_wordnet(sources["wordnet-base"])
    leads, names = country_leads(sources["world-countries"])
    found = people(wn, leads)
    out = Contribution(relations=relations({"P27", "P106"}))
    held: dict[str, list[str]] = defaultdict(list)
    for offset, (country, born) in sorted(found.items()):
        synset = wn.synsets[offset]
        jobs = synset.targets(INSTANCE_HYPERNYM)
        label = full_name(synset)
        for job in jobs:
            held[job].append(label)
        add_entity(out, wn, synset, "person",
                   [(None, "P27", country), *((None, "P106", entity_id("occupation", wn.synsets[j])) for j in jobs)],
                   f"Country of citizenship: {names[country]}. Occupation: "
                   f"{join_list([wn.synsets[j].label for j in jobs])}. Born in {born}.", label=label)
    for job, holders in sorted(held.items()):
        add_entity(out, wn, wn.synsets[job], "occupation", [],
                   f"People with this occupation: {join_list(sorted(holders))}.")
    return out


def country_leads(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(the words a gloss may open with -> the one country id they name, country id -> common name): English
    demonyms and common names; words naming two countries ("Congolese") name none."""
    records = json.loads((root / WORLD_COUNTRIES).read_text(encoding="utf-8"))
    owners: dict[str, set[str]] = defaultdict(set)
    names = {}
    for c in records:
        cid = f"country:{c['cca3']}"
        names[cid] = c["name"]["common"]
        demonyms = ((c.get("demonyms") or {}).get("eng") or {}).values()
        for word in {c["name"]["common"], *demonyms}:
            owners[word].add(cid)
    return {word: ids.pop() for word, ids in owners.items() if len(ids) == 1}, names


def people(wn: WordNet, leads: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    """Person offset -> (its country id, its birth year), for the people the module docstring admits."""
    out = {}
    for offset, synset in wn.synsets.items():
        if synset.lexfile != LEXFILE_PERSON or not synset.is_instance:
            continue
        dates = DATES.search(synset.definition)
        words = synset.definition.split()
        country = next((leads[" ".join(words[:n])] for n in range(_LEAD_WORDS, 0, -1)
                        if " ".join(words[:n]) in leads), None)
        if country and dates and int(dates.group(1)) >= BORN_SINCE:
            out[offset] = (country, int(dates.group(1)))
    return out


def full_name(synset: Synset) -> str:
    """The first lemma of two words or more ("Bob Marley"), else the first ("Marley")."""
    return next((lemma for lemma in synset.lemmas if " " in lemma), synset.label)
