"""WordNet 3.0 noun synsets as KG concepts: label = first lemma, aliases = the other lemmas, description = gloss.

Facts: P279 subclass of (hypernym), P31 instance of (instance hypernym), P361 part of (part, member and substance
holonyms) and P527 has part(s) (the meronyms), each only between synsets of the world, which is closed under
hypernyms so every P279/P31 chain reaches ``entity``. Selection: ``small`` is the hypernym closure of what the small
set of Tux Paint stamps depicts (a few hundred); ``full`` adds every synset tagged at least once in WordNet's
semantic concordance (``index.noun``'s tagsense counts), again closed, leaving out instances in the location
lexicographer file (countries, cities, regions), which the geographic adapters own. The pages of stamp-depicted
synsets are written by ``stamps`` (a page shows only its own adapter's images); this adapter gives those entities
without a page.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._stamp_catalog import depict, load_stamps, select
from data_gen.world.adapters._wordnet_data import (
    HOLONYMS,
    HYPERNYM,
    INSTANCE_HYPERNYM,
    LEXFILE_LOCATION,
    MERONYMS,
    WordNet,
    load_wordnet,
    synset_entity,
    synset_page,
)
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Triple

SOURCES = ("wordnet-base", "tuxpaint-stamps-default")
_RELATIONS = ((HYPERNYM, "P279"), (INSTANCE_HYPERNYM, "P31"), *((s, "P361") for s in HOLONYMS),
              *((s, "P527") for s in MERONYMS))


def selection(wn: WordNet, depicted: set[str], size: str) -> set[str]:
    if size == "small":
        return wn.closure(depicted)
    if size != "full":
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    tagged = {off for off in wn.tagged_offsets()
              if not (wn.synsets[off].lexfile == LEXFILE_LOCATION and wn.synsets[off].is_instance)}
    return wn.closure(depicted | tagged)


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    wn = load_wordnet(sources["wordnet-base"])
    depicted = {d.synset.offset for d in select(depict(load_stamps(sources["tuxpaint-stamps-default"]), wn), size)
                if d.synset is not None}
    chosen = selection(wn, depicted, size)
    out = Contribution()
    facts: dict[tuple[str, str, str], None] = {}
    for offset in sorted(chosen):
        synset = wn.synsets[offset]
        if offset in depicted:
            out.entities.append(synset_entity(synset, None))
        else:
            page = synset_page(synset, wn)
            out.pages.append(page)
            out.entities.append(synset_entity(synset, page.id))
        for symbol, pid in _RELATIONS:
            for target in synset.targets(symbol):
                if target in chosen and target != offset:
                    facts[(synset.id, pid, wn.synsets[target].id)] = None
    out.triples = [Triple(s, p, o) for s, p, o in facts]
    out.relations = relations({t.p for t in out.triples})
    return out
