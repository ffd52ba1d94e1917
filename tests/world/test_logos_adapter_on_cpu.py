"""The logos adapter on the real simple-icons package."""

from __future__ import annotations

import numpy as np
import pytest

from data_gen.world.adapters import logos
from neos_core.world.model import to_record


@pytest.fixture(scope="module")
def small(world_sources):
    return logos.contribute(world_sources(*logos.SOURCES), "small")


def test_github_logo_is_drawn_in_its_colour(small):
    asset = next(a for a in small.images if a.record.id == "logo_github")
    assert "GitHub" in asset.record.caption and asset.record.entity_id == "brand:github"
    assert asset.record.page_id == "GitHub"
    pixels = np.asarray(asset.pixels.convert("RGB"))
    assert pixels.shape == (logos.LOGO_SIDE, logos.LOGO_SIDE, 3)
    brand = np.all(np.abs(pixels.astype(int) - (0x18, 0x17, 0x17)) <= 8, axis=-1).mean()
    white = np.all(pixels == 255, axis=-1).mean()
    assert 0.2 < brand < 0.8 and white > 0.2  # the octocat disc in #181717 on white, with a margin
    assert tuple(pixels[0, 0]) == (255, 255, 255)


def test_github_facts_and_page(small):
    facts = {(t.p, t.o, t.literal) for t in small.triples if t.s == "brand:github"}
    assert facts == {("P31", "x:brand", False), ("P465", "181717", True), ("P856", "https://github.com", True)}
    page = next(p for p in small.pages if p.entity_id == "brand:github")
    assert page.image_ids == ["logo_github"] and "#181717" in page.text
    assert {r.id for r in small.relations} == {"P31", "P465", "P856"}


def test_small_is_the_well_known_list(small):
    brands = {e.id for e in small.entities if e.kind == "brand"}
    assert brands == {f"brand:{s}" for s in logos.WELL_KNOWN}
    assert 140 <= len(brands) <= 160 and len(small.images) == len(brands)
    assert "x:brand" in {e.id for e in small.entities}
    x = next(e for e in small.entities if e.id == "brand:x")
    assert "Twitter" in x.aliases


def test_official_website_only_on_the_brands_own_host():
    coke = logos.Brand("cocacola", "Coca-Cola", "D00013", "https://commons.wikimedia.org/wiki/File:Coca-Cola_logo.svg",
                       None, ())
    apple = logos.Brand("apple", "Apple", "000000", "https://www.apple.com", None, ())
    assert logos.official_website(coke) is None
    assert logos.official_website(apple) == "https://www.apple.com"


def test_light_colours_get_a_dark_background():
    assert logos.background("FFFFFF") == "#000000"
    assert logos.background("181717") == "#ffffff"
    assert logos.background("FFD700") == "#000000"  # gold: contrast 1.4 on white


def test_deterministic(world_sources, monkeypatch):
    monkeypatch.setattr(logos, "WELL_KNOWN", logos.WELL_KNOWN[:12])  # same code path, a twelfth of the drawing
    first, again = (logos.contribute(world_sources(*logos.SOURCES), "small") for _ in range(2))
    for name in ("entities", "pages", "triples", "relations"):
        assert [to_record(r) for r in getattr(again, name)] == [to_record(r) for r in getattr(first, name)]
    assert [to_record(a.record) for a in again.images] == [to_record(a.record) for a in first.images]
    assert all(a.pixels.tobytes() == b.pixels.tobytes() for a, b in zip(again.images, first.images))
