import json
import shutil

import pytest

from neos_core.world.store import World, WorldError


def test_load_gives_lookups(small_world):
    world = World.load(small_world)
    page = world.pages["France"]
    assert world.page_by_url[page.url] is page and page.url.endswith("/wiki/France")
    assert world.image_path("flag_fra").is_file()
    with pytest.raises(KeyError, match="no image"):
        world.image_path("nope")


def test_missing_world_fails_clearly(tmp_path):
    with pytest.raises(WorldError, match="manifest.json is missing"):
        World.load(tmp_path)


@pytest.fixture
def copy(small_world, tmp_path):
    dest = tmp_path / "w"
    shutil.copytree(small_world, dest, ignore=shutil.ignore_patterns("images"))
    return dest


def test_wrong_format_version_fails_clearly(copy):
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["format_version"] = 999
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(WorldError, match="format 999"):
        World.load(copy)


def test_corrupt_or_truncated_records_fail_clearly(copy):
    lines = (copy / "pages.jsonl").read_text().splitlines(keepends=True)
    (copy / "pages.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(WorldError, match="manifest counts"):
        World.load(copy)
    (copy / "pages.jsonl").write_text("".join(lines[:2]) + '{"id": "x", "broken\n')
    with pytest.raises(WorldError, match="pages.jsonl:3 is corrupt"):
        World.load(copy)
    (copy / "pages.jsonl").write_text("".join(lines))
    (copy / "triples.jsonl").unlink()
    with pytest.raises(WorldError, match="triples.jsonl is missing"):
        World.load(copy)
