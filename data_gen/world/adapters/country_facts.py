"""What WordNet knows about the world's countries: the international organisations they belong to, the natural
features that lie in them, the names of their natives and the foods and artifacts it associates with them. Each is
a new kind of entity a Neos question can end at.

* organisations (kind ``organization``): WordNet's member meronyms of a group (NATO's members are Belgium, Canada,
  ...) and, the other way, a country's member holonyms; fact ``(country, P463 member of, organisation)``;
* natural features (kinds ``river``, ``mountain``, ``volcano``, ``lake``, ``island``, ``desert``, ``waterfall``,
  ``mountain range``): instances whose part holonym is a country (the Danube is part of Germany, Austria, ...);
  fact ``(feature, x:<kind>_in, country)`` (:data:`data_gen.world.properties.FEATURE_RELATIONS`); the feature's
  kind is its instance hypernym;
* nationalities (kind ``nationality``): people synsets that are members of a country ("Albanian, a native or
  inhabitant of Albania"); fact ``(country, P1549 demonym, nationality)``;
* foods and artifacts (kinds ``food``, ``artifact``): synsets whose WordNet region domain (pointer ``;r``) is one
  country (paella: Spain; the khukuri: Nepal); fact ``(thing, x:<kind>_associated_with, country)``
  (:data:`data_gen.world.properties.CULTURE_RELATIONS`). The United Kingdom and the United States are left out:
  WordNet files British and American English usage there ("boot: British term for the luggage compartment"),
  not things of those countries.

WordNet names a country by its own lemmas; a country of the world is the one whose world-countries name (common,
official or an alternative spelling) is such a lemma. A name can be several WordNet places (Ireland the island and
the country, Kuwait the country and its capital): the one that is a country (under WordNet's *country* concepts)
wins, else the one with the most pointers. Every fact is between entities of the world, and each entity's page
states its facts with the world's country names, so a reader can verify every hop. Both sizes hold the same facts:
they are few (about 500 entities) and only WordNet's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._geo import WORLD_COUNTRIES, fold
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._wordnet_data import (
    INSTANCE_HYPERNYM,
    LEXFILE_LOCATION,
    Synset,
    WordNet,
    load_wordnet,
    page_title,
)
from data_gen.world.properties import CULTURE_RELATIONS, FEATURE_RELATIONS, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("wordnet-base", "world-countries")

LEXFILE_GROUP = 14  # noun.group: organisations
LEXFILE_OBJECT = 17  # noun.object: rivers, mountains, lakes
LEXFILE_PERSON = 18  # noun.person: nationalities
CULTURE_KINDS = {6: "artifact", 13: "food"}  # noun.artifact, noun.food
REGION_DOMAIN = ";r"
USAGE_REGIONS = ("country:GBR", "country:USA")
# a natural feature's instance hypernym (its first lemma) -> the entity kind
FEATURE_KINDS: dict[str, str] = {  # the kinds of FEATURE_RELATIONS
    "river": "river", "mountain peak": "mountain", "mountain": "mountain", "volcano": "volcano", "lake": "lake",
    "island": "island", "desert": "desert", "waterfall": "waterfall", "range": "mountain range",
}
# organisations whose complete member list data_gen.world.adapters.organisations states, with this WordNet entity's
# id, gloss and aliases: WordNet's partial list (2006: the EU of 15, the United Kingdom among them) would contradict
# it, so this adapter gives none of their entities or facts
COMPLETE_ELSEWHERE = frozenset({"European Union", "United Nations"})
# WordNet's country concepts: "state, nation, country" (the polity) and "country, state, land" (its territory)
_COUNTRY_SENSES = (1, 2)


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    wn, countries, of_synset = wordnet_countries(sources, size)
    labels = {cid: name for cid, (name, _) in countries.items()}
    out = Contribution(relations=relations({"P463", "P1549", *FEATURE_RELATIONS.values(),
                                            *CULTURE_RELATIONS.values()}))
    for org, members in sorted(organisations(wn, of_synset).items()):
        if wn.synsets[org].label in COMPLETE_ELSEWHERE:
            continue
        add_entity(out, wn, wn.synsets[org], "organization", [(c, "P463", None) for c in members],
                   f"Its member countries are {join_list(sorted(labels[c] for c in members))}.")
    for feature, (kind, located) in sorted(features(wn, of_synset, countries).items()):
        add_entity(out, wn, wn.synsets[feature], kind, [(None, FEATURE_RELATIONS[kind], c) for c in located],
                   f"It is a {kind} in {join_list(sorted(labels[c] for c in located))}.")
    for people, country in sorted(nationalities(wn, of_synset).items()):
        synset = wn.synsets[people]
        add_entity(out, wn, synset, "nationality", [(country, "P1549", None)],
             f"{synset.label} is what a native of {labels[country]} is called.")
    for thing, (kind, country) in sorted(cultural_things(wn, of_synset).items()):
        add_entity(out, wn, wn.synsets[thing], kind, [(None, CULTURE_RELATIONS[kind], country)],
                   f"WordNet associates it with {labels[country]}.")
    return out


def wordnet_countries(sources: Mapping[str, Path], size: str
                      ) -> tuple[WordNet, dict[str, tuple[str, list[str]]], dict[str, str]]:
    """What every adapter of WordNet facts about the world's countries starts from: WordNet, the countries
    (:func:`load_countries`) and each country's WordNet place (:func:`country_synsets`)."""
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    wn = load_wordnet(sources["wordnet-base"])
    countries = load_countries(sources["world-countries"])
    return wn, countries, country_synsets(wn, countries)


def load_countries(root: Path) -> dict[str, tuple[str, list[str]]]:
    """country id -> (common name, every name world-countries gives it)."""
    records = json.loads((root / WORLD_COUNTRIES).read_text(encoding="utf-8"))
    return {f"country:{c['cca3']}": (c["name"]["common"],
                                     [c["name"]["common"], c["name"]["official"], *c["altSpellings"]])
            for c in records}


def country_synsets(wn: WordNet, countries: Mapping[str, tuple[str, list[str]]]) -> dict[str, str]:
    """WordNet place offset -> world country id, one place per country (see the module docstring)."""
    owners: dict[str, set[str]] = defaultdict(set)
    for cid, (_, names) in countries.items():
        for name in names:
            owners[fold(name)].add(cid)
    political = {wn.sense("country", n).offset for n in _COUNTRY_SENSES}
    candidates: dict[str, list[str]] = defaultdict(list)
    for offset, synset in wn.synsets.items():
        if synset.lexfile != LEXFILE_LOCATION or not synset.is_instance:
            continue
        named = set().union(*(owners.get(fold(lemma), set()) for lemma in synset.lemmas))
        if len(named) == 1:
            candidates[named.pop()].append(offset)
    chosen = {}
    for cid, offsets in candidates.items():
        best = max(offsets, key=lambda o: (wn.is_under(o, political), len(wn.synsets[o].pointers), o))
        chosen[best] = cid
    return chosen


def organisations(wn: WordNet, of_synset: Mapping[str, str]) -> dict[str, set[str]]:
    """Organisation offset -> its member countries (at least two: one member identifies nothing)."""
    members: dict[str, set[str]] = defaultdict(set)
    for offset, synset in wn.synsets.items():
        if synset.lexfile == LEXFILE_GROUP:
            members[offset] |= {of_synset[t] for t in synset.targets("%m") if t in of_synset}
    for offset, cid in of_synset.items():
        for org in wn.synsets[offset].targets("#m"):
            if wn.synsets[org].lexfile == LEXFILE_GROUP:
                members[org].add(cid)
    return {org: found for org, found in members.items() if len(found) >= 2}


def features(wn: WordNet, of_synset: Mapping[str, str], countries: Mapping[str, tuple[str, list[str]]]
             ) -> dict[str, tuple[str, set[str]]]:
    """Natural feature offset -> (its kind, the countries it is part of). A feature named like a country (Cuba the
    island) is left out: "the island that lies in Cuba" would name its answer."""
    names = {fold(name) for _, all_names in countries.values() for name in all_names}
    out = {}
    for offset, synset in wn.synsets.items():
        if synset.lexfile not in (LEXFILE_OBJECT, LEXFILE_LOCATION) or names & {fold(x) for x in synset.lemmas}:
            continue
        located = {of_synset[t] for t in synset.targets("#p") if t in of_synset}
        kinds = [FEATURE_KINDS.get(wn.synsets[h].label) for h in synset.targets(INSTANCE_HYPERNYM)]
        if located and kinds and kinds[0]:
            out[offset] = (kinds[0], located)
    return out


def nationalities(wn: WordNet, of_synset: Mapping[str, str]) -> dict[str, str]:
    """Nationality offset -> the one country its people are natives of."""
    out = {}
    for offset, synset in wn.synsets.items():
        if synset.lexfile == LEXFILE_PERSON:
            homes = {of_synset[t] for t in synset.targets("#m") if t in of_synset}
            if len(homes) == 1:
                out[offset] = homes.pop()
    return out


def cultural_things(wn: WordNet, of_synset: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Food or artifact offset -> (its kind, the one country of its region domain), usage regions left out."""
    out = {}
    for offset, synset in wn.synsets.items():
        regions = {of_synset[t] for t in synset.targets(REGION_DOMAIN) if t in of_synset}
        if synset.lexfile in CULTURE_KINDS and len(regions) == 1 and not regions & set(USAGE_REGIONS):
            out[offset] = (CULTURE_KINDS[synset.lexfile], regions.pop())
    return out


def entity_id(kind: str, synset: Synset) -> str:
    return f"{kind.replace(' ', '_')}:{synset.offset}"


def add_entity(out: Contribution, wn: WordNet, synset: Synset, kind: str,
               facts: list[tuple[str | None, str, str | None]], sentence: str, label: str | None = None) -> None:
    """The entity, its page (gloss, then ``sentence`` with its facts) and its facts; ``None`` in a fact is the
    entity itself. ``label``: one of the synset's lemmas, its first by default."""
    eid = entity_id(kind, synset)
    title = page_title(synset, wn)
    name = label or synset.label
    # a lemma that also names another WordNet noun is no alias: "Europe" (the continent) and "EU" (europium)
    # are lemmas of the European Union's synset
    aliases = [a for a in synset.lemmas if a != name and not set(wn.lookup(a)) - {synset.offset}]
    also = f" (also {join_list(aliases)})" if aliases else ""
    text = f"{name}{also} is defined in WordNet as: {synset.definition}. {sentence}"
    page_id = slugify(title)
    out.pages.append(Page(page_id, page_url(page_id), title, text, "wordnet-base", entity_id=eid))
    out.entities.append(Entity(eid, name, kind, synset.definition, aliases, page_id))
    out.triples += [Triple(s or eid, p, o or eid) for s, p, o in facts]
