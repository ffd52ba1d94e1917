"""The stamps adapter (and the stamp catalogue) on the real tuxpaint-stamps-default and wordnet-base packages."""

from __future__ import annotations

import numpy as np
import pytest

from data_gen.world.adapters import stamps
from data_gen.world.adapters._stamp_catalog import STAMP_DIR, depict, load_stamps
from data_gen.world.adapters._wordnet_data import load_wordnet
from neos_core.world.model import Contribution, to_record


@pytest.fixture(scope="module")
def sources(world_sources):
    return world_sources(*stamps.SOURCES)


@pytest.fixture(scope="module")
def wn(sources):
    return load_wordnet(sources["wordnet-base"])


@pytest.fixture(scope="module")
def catalogue(sources, wn):
    return {d.stamp.path: d for d in depict(load_stamps(sources["tuxpaint-stamps-default"]), wn)}


@pytest.fixture(scope="module")
def small(sources):
    return stamps.contribute(sources, "small")


def test_lion_stamp(small, catalogue, sources, wn):
    lion = wn.sense("lion", 1).id
    (asset,) = [a for a in small.images if a.record.entity_id == lion]  # small: one stamp per synset
    stamp = next(d.stamp for d in catalogue.values() if d.stamp.image_id == asset.record.id)
    assert stamp.path in ("animals/mammals/cats/lion", "animals/mammals/cats/lion-2")
    txt = sources["tuxpaint-stamps-default"] / STAMP_DIR / f"{stamp.path}.txt"
    assert asset.record.caption == txt.read_text(encoding="utf-8").splitlines()[0] == "A lion."
    assert asset.record.alt == "lion"
    page = next(p for p in small.pages if p.entity_id == lion)
    assert asset.record.page_id == page.id == "Lion" and page.image_ids == [asset.record.id]
    assert "feline" in page.text
    facts = {(t.s, t.p, t.o) for t in small.triples}
    assert (lion, "P279", "x:category:animals/mammals/cats") in facts
    assert ("x:category:animals/mammals/cats", "P279", "x:category:animals/mammals") in facts
    pixels = np.asarray(asset.pixels)
    assert asset.pixels.mode == "RGB" and max(asset.pixels.size) <= stamps.MAX_SIDE and pixels.std() > 20


def test_planet_is_an_instance_in_its_category(small, wn):
    mercury = wn.sense("Mercury", 3)
    assert "planet" in mercury.definition
    asset = next(a for a in small.images if a.record.id == "stamp_1_mercury")
    assert asset.record.entity_id == mercury.id
    assert any(t.s == mercury.id and t.p == "P31" and t.o == "x:category:space/planets" for t in small.triples)


def test_ids_are_unique_and_short(catalogue):
    assert catalogue["animals/mammals/cats/lion"].stamp.image_id == "stamp_lion"
    assert catalogue["animals/mammals/cats/cartoon/lion"].stamp.image_id == "stamp_lion_cartoon"
    assert len({d.stamp.image_id for d in catalogue.values()}) == len(catalogue)


def test_matching_uses_the_category_domain(catalogue, wn):
    assert catalogue["animals/mammals/aquatic/dolphin"].synset.definition.startswith("any of various small toothed")
    assert catalogue["animals/fish/seahorse"].synset.label == "seahorse"  # the fish, not the walrus
    assert catalogue["animals/birds/cartoon/tux"].synset is None  # "Tux—the Linux mascot!": no WordNet noun
    assert not any(p.startswith(("symbols/alphabets/", "symbols/math/")) for p in catalogue)


def test_unnamed_stamp_gets_its_own_entity(catalogue):
    tux = catalogue["animals/birds/cartoon/tux"]
    out = Contribution()
    eid, page = stamps._own_concept(out, {}, tux)
    assert eid == "stamp:tux" and page.title == "Tux" and "Tux—the Linux mascot!" in page.text
    assert [(e.id, e.kind, e.page_id) for e in out.entities] == [("stamp:tux", "stamp", "Tux")]


def test_svg_only_stamp_rasterizes(catalogue):
    stamp = catalogue["food/fruit/cartoon/watermelon"].stamp  # sized in cm, no viewBox
    assert stamp.image_file.suffix == ".svg"
    pixels = stamps.load_pixels(stamp)
    assert max(pixels.size) == stamps.MAX_SIDE and np.asarray(pixels).std() > 20


def test_small_size_and_ids(small):
    assert 120 <= len(small.images) <= 200
    ids = [a.record.id for a in small.images]
    assert len(set(ids)) == len(ids) and all(i.startswith("stamp_") for i in ids)


def test_deterministic(small, sources):
    again = stamps.contribute(sources, "small")
    for name in ("entities", "pages", "triples", "relations"):
        assert [to_record(r) for r in getattr(again, name)] == [to_record(r) for r in getattr(small, name)]
    assert [to_record(a.record) for a in again.images] == [to_record(a.record) for a in small.images]
    assert all(a.pixels.tobytes() == b.pixels.tobytes() for a, b in zip(again.images, small.images))
