"""Each country's main religion (the country-json package's per-country table), as concept answers a Neos question
can end at: "the main religion of B" (Judaism for Israel).

country-json names one religion per country, the largest group, or none where no group holds most (China, the Czech
Republic, Estonia, Hong Kong, Japan, North and South Korea); fact ``(country, x:main_religion, religion)``, 225 of
them (Christianity 160, Islam 50, Buddhism 8, Folk Religions 3, Hinduism 3, Judaism 1). Two rows name Côte d'Ivoire
("Cote d'Ivoire": Christianity, "Ivory Coast": Islam), so it gets none; two name North Macedonia alike. Read from
the country it has one answer; read from the religion it is open (many countries share one), and a country without
the fact may be meant by a question, so both are decided in ``data_gen.neos.open_world``. Country names join as for
the national dishes (``_country_json``); its rows that join no world country are the Channel Islands
(Jersey and Guernsey are two world countries) and six regions ("Europe", "Sub-Saharan Africa", ...). Both sizes hold
the same facts.

The table's form of government (``country-by-government-type.json``) is left out: of its 39 labels the questions
that pass the evidence rules end at the rare ones, the source's own spellings of one form ("Federation
Constitutional Monarchy" for Australia, "Constitutional Monarchy, Federation" for Canada) or a dated one ("Socialistic
State" for Libya), none of which a reader would give as the answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._country_json import SOURCE, country_id, country_ids, load_table
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters.country_facts import load_countries
from data_gen.world.properties import MAIN_RELIGION, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("country-json", "world-countries")
RELIGIONS = Path("package/src/country-by-religion.json")


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    countries = load_countries(sources["world-countries"])
    ids = country_ids(countries)
    names = {cid: name for cid, (name, _) in countries.items()}
    stated: dict[str, set[str]] = defaultdict(set)  # country -> the religions its rows name
    for country, religion in load_table(sources["country-json"], RELIGIONS, "religion"):
        cid = country_id(country, ids)
        if religion and cid:
            stated[cid].add(religion)
    of: dict[str, list[str]] = defaultdict(list)  # religion -> its countries
    for cid, named in stated.items():
        if len(named) == 1:  # Côte d'Ivoire's two rows disagree (Christianity, Islam): no fact
            of[named.pop()].append(cid)
    out = Contribution(relations=relations({MAIN_RELIGION}))
    for religion, cids in sorted(of.items()):
        eid = f"religion:{slugify(religion).lower()}"
        listed = join_list(sorted(names[c] for c in cids))
        page_id = slugify(religion)
        out.pages.append(Page(page_id, page_url(page_id), religion,
                              f"According to country-json, {religion} is the main religion of {listed}.", SOURCE,
                              entity_id=eid))
        out.entities.append(Entity(eid, religion, "religion", f"main religion of {len(cids)} countries", [], page_id))
        out.triples += [Triple(c, MAIN_RELIGION, eid) for c in cids]
    return out
