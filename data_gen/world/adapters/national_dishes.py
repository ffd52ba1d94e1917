"""National dishes (the country-json package's per-country table), as answers a Neos question can end at: "the
national dish of C".

country-json names, per country, its national dish, several ("Couscous, Tagine"), a description ("sauerkraut
stew") or none. Only an entry naming exactly one dish gives a fact, ``(country, x:national_dish, dish)``: read from
the country it has one answer a reader can check on the dish's page. An entry naming several dishes gives none (no
dish is *the* national dish of Morocco), nor does a description (lower case: "fried pork and potato-based dish"
names no dish a reader could give as an answer) or a statement that there is none ("No officially announced
national dish"). A parenthetical is a gloss, not part of the name ("O'sh (pilaf)": O'sh, also Uzbekistan's). Read
from the dish the fact is open: neighbours claim one dish (Machboos is Bahrain's and Kuwait's), and the table's
several-dish entries name it for more countries, which the dish's page says.

The table's country names join the world's countries by world-countries' names (common, official, alternative
spellings, accents and case folded), four by their world-countries name (``_country_json``, "Turkey" is Türkiye):
England, Scotland, Wales and Northern Ireland are no world countries (the United Kingdom has its own entry), nor is
the Netherlands Antilles (dissolved in 2010) (``_country_json.misses``); of these only Scotland's, Wales's and Northern
Ireland's entries name exactly one dish. A dish whose name is a WordNet dish (a noun.food synset under *dish*:
couscous, "gulyas" for Gulyás) takes its lemmas as aliases and its gloss as description; no such synset is an entity
of the world (WordNet's foods the world holds, ``country_facts``, are none of the single national dishes), so no
dish duplicates one. Both sizes hold the same dishes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._country_json import SOURCE, country_id, country_ids, load_table
from data_gen.world.adapters._geo import fold
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._wordnet_data import Synset, WordNet, load_wordnet
from data_gen.world.adapters.country_facts import load_countries
from data_gen.world.properties import NATIONAL_DISH, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("country-json", "wordnet-base", "world-countries")
DISHES = Path("package/src/country-by-national-dish.json")
LEXFILE_FOOD = 13
DISH_SENSE = 2  # dish.n.02, "a particular item of prepared food"
# a description ("sauerkraut stew") or a statement that there is none ("No officially announced national dish")
_NO_NAME = re.compile(r"^(?:[a-z]|No\b)")
_PARTS = re.compile(r",(?![^(]*\))")  # commas outside parentheses: "Tum Mak Hoong (Som Tum, its Thai name)" is one


@dataclass(frozen=True)
class Dish:
    label: str
    gloss: str  # the table's parenthetical, "" if none


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    table = load_table(sources["country-json"], DISHES, "dish")
    countries = load_countries(sources["world-countries"])
    ids = country_ids(countries)
    names = {cid: name for cid, (name, _) in countries.items()}
    wn = load_wordnet(sources["wordnet-base"])
    national: dict[str, list[str]] = defaultdict(list)  # folded dish name -> countries naming it alone
    among: dict[str, list[str]] = defaultdict(list)  # folded dish name -> countries naming it among several
    first: dict[str, Dish] = {}
    for country, text in table:
        cid = country_id(country, ids)
        dishes = parse(text)
        if cid is None or not dishes:
            continue
        for dish in dishes:
            first.setdefault(fold(dish.label), dish)
            (national if len(dishes) == 1 else among)[fold(dish.label)].append(cid)
    out = Contribution(relations=relations({NATIONAL_DISH}))
    for key, cids in sorted(national.items()):
        dish = first[key]
        eid = f"dish:{slugify(dish.label).lower()}"
        synset = wordnet_dish(wn, dish.label)
        aliases = [a for a in synset.lemmas if fold(a) != key] if synset else []
        text = _text(dish, [names[c] for c in sorted(cids, key=names.get)],
                     [names[c] for c in sorted(among.get(key, []), key=names.get)], synset and synset.definition)
        page_id = slugify(dish.label)
        out.pages.append(Page(page_id, page_url(page_id), dish.label, text, SOURCE, entity_id=eid))
        description = synset.definition if synset else f"national dish of {join_list(sorted(names[c] for c in cids))}"
        out.entities.append(Entity(eid, dish.label, "dish", description, aliases, page_id))
        out.triples += [Triple(c, NATIONAL_DISH, eid) for c in cids]
    return out


def parse(text: str | None) -> list[Dish]:
    """The dishes an entry names ("Couscous, Tagine": two); [] for none, a description or a statement of none."""
    parts = [p.strip() for p in _PARTS.split(text or "") if p.strip()]
    if len(parts) == 1 and _NO_NAME.match(parts[0]):
        return []  # in a list of several, lower case is the table's loose spelling ("Kimchi, bulgogi")
    dishes = []
    for part in parts:
        label, _, gloss = part.partition(" (")
        dishes.append(Dish(label.strip(), gloss.rstrip(")").strip()))
    return dishes


def wordnet_dish(wn: WordNet, name: str) -> Synset | None:
    """The most frequent WordNet food sense of ``name`` that is a dish (under dish.n.02), or None."""
    dish = wn.sense("dish", DISH_SENSE).offset
    return next((wn.synsets[o] for o in wn.lookup(fold(name))
                 if wn.synsets[o].lexfile == LEXFILE_FOOD and wn.is_under(o, {dish})), None)


def _text(dish: Dish, of: list[str], among: list[str], definition: str | None) -> str:
    text = f"According to country-json, {dish.label} is the national dish of {join_list(of)}."
    if dish.gloss:
        text += f" It gives it as {dish.label} ({dish.gloss})."
    if among:
        text += f" It also names {dish.label} among the national dishes of {join_list(among)}."
    if definition:
        text += f" WordNet defines it as: {definition}."
    return text
