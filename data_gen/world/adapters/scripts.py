"""Scripts (writing systems) of the world's languages, from the Unicode CLDR data the babel package ships, as concept
answers a Neos question can end at: "the script of C" (Georgian for Georgian, Cyrillic for Kazakh).

CLDR's likely subtags give each language one script, the one it is most likely written in (``ka`` -> ``ka_Geor_GE``):
fact ``(language, P282, script)``, Wikidata's *writing system*. The world's languages are world-countries' (ISO
639-3 codes, ``lang:kat``); CLDR keys them by the shortest code, which its language aliases give (``kat`` -> ``ka``;
``cnr``, Montenegrin, -> ``sr_ME``; ``prs``, Dari, -> ``fa_AF``, whose language ``fa`` has the likely subtags). Read
from the language the fact is closed, since a reader finds one script, except where a language is written in
several: a language some territory has in a second script officially (CLDR's territory data: Serbian's
``sr_Latn`` in Serbia, Malay's Jawi ``ms_Arab`` in Brunei, Mongolian's ``mn_Mong`` in China) gets no fact
(:func:`writing_systems` says why), nor does one whose likely script is an ISO 15924 code for a combination or a
variant of scripts (:data:`COMBINED`: Japanese ``Jpan`` is Han, Hiragana and Katakana; CLDR's English names for them
repeat the language's, "Japanese", or qualify Han, "Simplified"), nor a collective code or a sign language CLDR has
no likely subtags for (Berber, Sami, New Zealand Sign Language). Read from the script it is open: Latin writes a
hundred of the world's languages and many more. Script names are CLDR's English ones ("Georgian", "Cyrillic"), and a
script's page states the languages the world has in it. Both sizes hold the same facts.
CLDR is read without running babel's code (``_cldr``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_gen.world.adapters._cldr import ENGLISH, GLOBAL, SOURCE, load_cldr
from data_gen.world.adapters._geo import load_world_countries
from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters.countries import language_labels
from data_gen.world.properties import WRITING_SYSTEM, relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("babel", "world-countries")
# ISO 15924 codes for a combination of scripts (Jpan: Han, Hiragana, Katakana; Kore: Hangul, Han; Hanb: Han,
# Bopomofo) or a variant of one (Hans, Hant: simplified and traditional Han)
COMBINED = frozenset({"Hanb", "Hans", "Hant", "Jpan", "Kore"})


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    babel, records = sources["babel"], load_world_countries(sources["world-countries"])
    cldr, english = load_cldr(babel / GLOBAL), load_cldr(babel / ENGLISH)
    written, _ = writing_systems([c for r in records for c in (r["languages"] or {})], cldr)
    labels = language_labels(records)
    languages: dict[str, list[str]] = defaultdict(list)  # script code -> its languages' codes
    for code, script in written.items():
        languages[script].append(code)
    version = cldr["cldr"]["version"]
    out = Contribution(relations=relations({WRITING_SYSTEM}))
    for script, codes in sorted(languages.items()):
        name = english["scripts"][script]
        eid, page_id = f"script:{script.lower()}", slugify(f"{name} script")
        names = sorted(labels[c] for c in codes)
        text = (f"The {name} script (ISO 15924 code {script}) is a writing system. According to Unicode CLDR {version} "
                f"(likely subtags), {join_list(names)} {'is' if len(names) == 1 else 'are'} written in the {name} "
                f"script.")
        out.pages.append(Page(page_id, page_url(page_id), f"{name} script", text, SOURCE, entity_id=eid))
        out.entities.append(Entity(eid, name, "script", f"script (ISO 15924 {script})", [f"{name} script"], page_id))
        out.triples += [Triple(f"lang:{c}", WRITING_SYSTEM, eid) for c in sorted(codes)]
    return out


def writing_systems(codes: list[str], cldr: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(ISO 639-3 code -> its one script, ISO 639-3 code -> why it has none) for the languages ``codes``."""
    aliases, likely = cldr["language_aliases"], cldr["likely_subtags"]
    several = {lang.split("_")[0] for spoken in cldr["territory_languages"].values()
               for lang, info in spoken.items() if "_" in lang and info["official_status"]}
    written: dict[str, str] = {}
    none: dict[str, str] = {}
    for code in sorted(set(codes)):
        tag = aliases.get(code, code)
        full = likely.get(tag) or likely.get(tag.split("_")[0])
        if full is None:
            none[code] = "no likely subtags"
        elif tag.split("_")[0] in several:
            none[code] = f"official in a second script ({tag.split('_')[0]})"
        elif (script := full.split("_")[1]) in COMBINED:
            none[code] = f"a combination or variant of scripts ({script})"
        else:
            written[code] = script
    return written, none
