"""Offline backends on the small world: BM25 text/image search, resource ids, reverse image search."""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest
from PIL import Image

from neos_core.world.sources import default_cache_dir
from tool_server.offline.lexical import _BM25, snippet, tokens
from tool_server.offline.reverse import FEATURE_VERSION, FeatureTable
from tool_server.offline.world import OfflineWorld, resource_id

ORIGIN = "https://neos-world.invalid"


def feature_cache():
    """In the source cache beside the worlds, keyed (in the file name) by the world's content hash: ORB over every
    image is the slow part of startup, so test sessions share it as they share the built world."""
    return default_cache_dir() / "tool-server"


@pytest.fixture(scope="module")
def world(small_world):
    w = OfflineWorld.load(small_world, cache_dir=feature_cache())
    yield w
    w.close()


def test_text_search_ranks_the_right_pages(world):
    top = [h.page.url for h in world.text_search("capital of France", 10)]
    assert len(top) == 10
    assert {f"{ORIGIN}/wiki/France", f"{ORIGIN}/wiki/Paris"} & set(top[:3])
    hit = world.text_search("Mexico", 10)[0]
    assert hit.page.url == f"{ORIGIN}/wiki/Mexico" and "Mexico" in hit.snippet
    assert world.text_search("zzqxv unmatched", 10) == []


def test_bm25_scores_equal_bm25s_own_scoring():
    docs = [tokens(t) for t in ("Paris is the capital of France", "Mexico City", "the capital city of Mexico", "")]
    index = _BM25(docs)
    for query in (["capital"], ["mexico", "city", "mexico"], ["paris", "unknown"], ["unknown"], []):
        expected = index._bm25.get_scores(query)[: len(docs)] if index._bm25.get_tokens_ids(query) else 0
        np.testing.assert_allclose(index.scores(query), expected, rtol=1e-6)
    assert index.scores(["mexico", "city", "mexico"])[2] > index.scores(["mexico", "city"])[2] > 0  # repeats count


def test_snippet_is_the_sentence_sharing_most_query_terms():
    text = "Mexico is a country. Its capital is Mexico City, the largest city. It borders Guatemala."
    assert snippet(text, {"capital", "city"}) == "Its capital is Mexico City, the largest city."
    assert snippet(text, {"guatemala"}) == "It borders Guatemala."
    assert snippet(text, {"nothing"}) == "Mexico is a country."  # no overlap: the first sentence
    assert snippet(text, {"capital"}, max_chars=10) == "Its capit…"


def test_image_search_uses_caption_alt_and_source_page(world):
    found = world.image_search("flag of France", "the French national flag", 5)
    assert len(found) == 5 and "flag_fra" in [i.id for i in found[:2]]
    assert world.image_search("", "", 5) == []


def test_resource_ids_are_sha256_prefixes_and_resolve(world):
    url = f"{ORIGIN}/wiki/France"
    assert resource_id("page", url) == "page_" + hashlib.sha256(url.encode()).hexdigest()[:8]
    assert world.resolve(resource_id("page", url), "f") == url
    assert world.resolve(url, "f") == url
    flag = f"{ORIGIN}/media/flag_fra.png"
    assert world.resolve(resource_id("image", flag), "f") == flag


def _reverse(world, image):
    return asyncio.run(world.reverse_search(image, 5))


def test_reverse_search_survives_crops_and_rescaling(world):
    mex = Image.open(world.world.image_path("flag_mex")).convert("RGB")
    w, h = mex.size
    crop = mex.crop((int(0.1 * w), int(0.15 * h), int(0.7 * w), int(0.8 * h)))
    best = _reverse(world, crop)[0]
    assert (best.image_id, best.method) == ("flag_mex", "orb") and best.score >= 0.85
    small = Image.open(world.world.image_path("flag_esp")).convert("RGB").resize((w // 2, h // 2))
    assert _reverse(world, small)[0].image_id == "flag_esp"
    pages = [p.url for p in world.carriers("flag_mex")]
    assert pages[0] == f"{ORIGIN}/wiki/Mexico"


def test_reverse_search_finds_the_country_from_its_unlabelled_map(world):
    # A Neos entry image: the locator map without the name leads to the country's page all the same.
    fra = Image.open(world.world.image_path("map_fra_unlabelled")).convert("RGB")
    w, h = fra.size
    best = _reverse(world, fra.crop((int(0.1 * w), int(0.1 * h), int(0.9 * w), int(0.9 * h))))[0]
    assert best.image_id in ("map_fra_unlabelled", "map_fra")
    assert next(p.url for p in world.carriers(best.image_id)) == f"{ORIGIN}/wiki/France"


def test_a_transparent_image_is_served_and_indexed_on_white(world):
    # Nepal's flag is a pennant on a transparent page that stores black: FetchImage dropped the alpha channel until
    # 2026-12-06 (a black page) and the index still did after FetchImage flattened it onto white, so a served copy
    # was a different image to the index; both now read the page as white, and the served copy is found at once.
    served = world.load_pixels("flag_npl", max_pixels=10**7)
    assert served.mode == "RGB" and served.getpixel((0, 239)) == (255, 255, 255)
    best = _reverse(world, served)[0]
    assert (best.image_id, best.method) == ("flag_npl", "phash") and best.score == 1.0


def test_features_are_cached_on_disk(world, small_world):
    _reverse(world, Image.new("RGB", (64, 64), (255, 255, 255)))  # waits for the features
    # this version's file: the cache is shared with checkouts of other feature versions
    files = list((feature_cache() / "features").glob(f"{world.content_hash[:16]}-{FEATURE_VERSION}.npz"))
    assert len(files) == 1
    assert FeatureTable.load(files[0]).ids == list(world.world.images)


def test_a_closing_world_abandons_the_features_it_is_still_computing(small_world, tmp_path):
    """A server stopped (or refused a flag) while its features were computed waited for them before its process
    could exit: every test's server started without a cache paid ~10 s of CPU at its stop."""
    import threading

    from neos_core.world.store import World
    from tool_server.offline.reverse import FeaturesAbandoned

    stop = threading.Event()
    stop.set()
    images = World.load(small_world)
    paths = {i: images.image_path(i) for i in list(images.images)[:3]}
    with pytest.raises(FeaturesAbandoned, match="after 0 of 3 images"):
        FeatureTable.compute(paths, stop)
    assert FeatureTable.compute(paths, threading.Event()).ids == list(paths)
    world = OfflineWorld.load(small_world, cache_dir=tmp_path)  # an empty cache: computing ~1,000 images
    world.close()
    with pytest.raises(FeaturesAbandoned):
        world.wait_features()
    assert not list(tmp_path.rglob("*.npz"))  # nothing half-made is cached


def test_a_server_without_a_cache_dir_reads_its_features_from_the_source_cache(world, small_world, tmp_path,
                                                                                 monkeypatch):
    """Every eval run, tour and walkthrough (and many tests) started a server without ``--cache-dir``, which computed
    the features again each time; now the source cache holds them, by the world's content hash."""
    import os

    from tool_server.__main__ import parser
    from tool_server.assembly import load_world
    from tool_server.offline.world import features_path

    world.wait_features()
    target = features_path(tmp_path / "tool-server", world.content_hash)
    target.parent.mkdir(parents=True)
    os.link(features_path(feature_cache(), world.content_hash), target)
    monkeypatch.setenv("NEOS_WORLD_CACHE", str(tmp_path))
    monkeypatch.setattr(FeatureTable, "compute", lambda *a, **k: pytest.fail("computed, not read from the cache"))
    loaded = load_world(parser().parse_args(["--world", str(small_world)]))
    try:
        loaded.wait_features()
    finally:
        loaded.close()


def test_features_that_cannot_be_cached_are_still_served(tmp_path, caplog):
    """The default feature cache is the user's source cache: one that cannot be written (a read-only mount) warns and
    the server keeps the features in memory, as it did without ``--cache-dir``."""
    from tool_server.offline.reverse import load_or_compute

    image = tmp_path / "a.png"
    Image.new("RGB", (64, 64), (200, 30, 30)).save(image)
    (tmp_path / "file").write_text("not a directory")
    table = load_or_compute({"a": image}, tmp_path / "file" / "features.npz")
    assert table.ids == ["a"] and "not writable" in caplog.text
