"""The wordnet adapter (and its WordNet parser) on the real wordnet-base package."""

from __future__ import annotations

import pytest

from data_gen.world.adapters import wordnet
from data_gen.world.adapters._wordnet_data import load_wordnet, page_title
from neos_core.world.model import to_record


@pytest.fixture(scope="module")
def sources(world_sources):
    return world_sources(*wordnet.SOURCES)


@pytest.fixture(scope="module")
def wn(sources):
    return load_wordnet(sources["wordnet-base"])


@pytest.fixture(scope="module")
def small(sources):
    return wordnet.contribute(sources, "small")


@pytest.fixture(scope="module")
def full(sources):
    return wordnet.contribute(sources, "full")


def _by_label(c, label):
    return [e for e in c.entities if e.label == label]


def test_parser_reads_cat(wn):
    cat = wn.sense("cat", 1)
    assert cat.id == "synset:02121620-n" and cat.lemmas == ("cat", "true cat")
    assert [wn.synsets[o].label for o in wn.hypernyms(cat.offset)] == ["feline"]
    assert cat.definition.startswith("feline mammal usually having thick soft fur")
    assert wn.lookup("geese") == wn.lookup("goose")  # noun.exc
    assert wn.lookup("fireworks") == wn.lookup("firework")  # suffix rule
    assert page_title(wn.sense("mercury", 2), wn) == "Mercury (Roman deity)"
    assert wn.sense("Mercury", 3).is_instance  # the planet


def test_full_cat_is_a_feline_with_a_page(full, wn):
    (cat,) = [e for e in full.entities if e.id == "synset:02121620-n"]
    assert cat.label == "cat" and cat.aliases == ["true cat"] and cat.kind == "synset"
    feline = wn.sense("feline", 1).id
    assert any(t.s == cat.id and t.p == "P279" and t.o == feline for t in full.triples)
    page = next(p for p in full.pages if p.entity_id == cat.id)
    assert page.title == "Cat" and "It is a kind of feline." in page.text


def test_full_meronyms_both_ways(full, wn):
    tree, trunk = wn.sense("tree", 1).id, wn.sense("trunk", 1).id
    facts = {(t.s, t.p, t.o) for t in full.triples}
    assert (tree, "P527", trunk) in facts and (trunk, "P361", tree) in facts


def test_small_is_the_closure_of_the_small_stamps(small, wn):
    ids = {e.id for e in small.entities}
    assert 200 <= len(ids) <= 600
    lion = wn.sense("lion", 1)
    assert lion.id in ids and wn.sense("entity", 1).id in ids
    for t in small.triples:  # closed: every relation stays inside the world
        assert t.s in ids and t.o in ids and not t.literal
    roots = {wn.sense("entity", 1).id}
    assert all(any(t.s == i and t.p in ("P279", "P31") for t in small.triples) for i in ids - roots)
    # the stamps adapter writes the pages of depicted synsets (they show its images)
    assert next(e for e in small.entities if e.id == lion.id).page_id is None
    assert wn.sense("big cat", 1).id in {p.entity_id for p in small.pages}


def test_full_leaves_out_places(full, wn):
    ids = {e.id for e in full.entities}
    assert wn.sense("France", 1).id not in ids
    assert 10_000 < len(ids) < 25_000


def test_deterministic(small, sources):
    again = wordnet.contribute(sources, "small")
    for name in ("entities", "pages", "triples", "relations"):
        assert [to_record(r) for r in getattr(again, name)] == [to_record(r) for r in getattr(small, name)]
