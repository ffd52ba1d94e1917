"""Merge rules of the builder, on hand-made contributions."""

import pytest

from data_gen.world.builder import BuildError, _check_contribution, _merge, _Merged, _resolve_pages
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Relation


def page(pid, eid):
    return Page(pid, "", pid, "text", "test", entity_id=eid)


def image(iid, page_id, eid):
    return ImageAsset(Image(iid, "", "", "cap", "alt", "test", 1, 1, page_id, eid), None)


def test_same_title_from_two_adapters_and_within_one():
    first = Contribution(
        entities=[Entity("region:antarctica", "Antarctica", "continent", page_id="Antarctica"),
                  Entity("country:ATA", "Antarctica", "country", page_id="Antarctica")],
        pages=[page("Antarctica", "region:antarctica"), page("Antarctica", "country:ATA")],
        images=[image("map_ata", "Antarctica", "country:ATA")],
    )
    second = Contribution(
        entities=[Entity("us_state:georgia", "Georgia", "us_state", page_id="Antarctica")],
        pages=[page("Antarctica", "us_state:georgia")],
    )
    merged = _Merged()
    for index, c in enumerate((first, second)):
        _check_contribution(f"a{index}", c)
        _merge(merged, index, f"a{index}", c)
    pages = _resolve_pages(merged)
    assert list(pages) == ["Antarctica", "Antarctica_(country)", "Antarctica_(us_state)"]
    assert merged.entities["region:antarctica"].page_id == "Antarctica"
    assert merged.entities["country:ATA"].page_id == "Antarctica_(country)"
    assert merged.entities["us_state:georgia"].page_id == "Antarctica_(us_state)"
    assert merged.images["map_ata"].page_id == "Antarctica_(country)"
    assert pages["Antarctica_(country)"].url.endswith("/wiki/Antarctica_(country)")


def test_duplicate_entities_merge_first_wins_and_kind_conflicts_fail():
    merged = _Merged()
    _merge(merged, 0, "a", Contribution(entities=[Entity("x:cat", "cat", "synset", "", ["puss"])]))
    _merge(merged, 1, "b", Contribution(entities=[Entity("x:cat", "Cat", "synset", "feline", ["kitty", "cat"])]))
    cat = merged.entities["x:cat"]
    assert (cat.label, cat.description, cat.aliases) == ("cat", "feline", ["puss", "Cat", "kitty"])
    with pytest.raises(BuildError, match="is a 'synset' in an earlier adapter but a 'stamp'"):
        _merge(merged, 2, "c", Contribution(entities=[Entity("x:cat", "cat", "stamp")]))


def test_conflicting_relation_labels_and_duplicate_images_fail():
    merged = _Merged()
    _merge(merged, 0, "a", Contribution(relations=[Relation("P31", "instance of", True)], images=[image("i", None, None)]))
    with pytest.raises(BuildError, match="relation 'P31'"):
        _merge(merged, 1, "b", Contribution(relations=[Relation("P31", "is a", True)]))
    with pytest.raises(BuildError, match="image id 'i'"):
        _merge(merged, 1, "b", Contribution(images=[image("i", None, None)]))


@pytest.mark.parametrize(
    "contribution, message",
    [
        (Contribution(entities=[Entity("nonamespace", "x", "k")]), "not namespaced"),
        (Contribution(entities=[Entity("k:a", "x", "k", page_id="P")]), "points at page 'P'"),
        (Contribution(images=[image("bad id", None, None)]), "not URL-safe"),
        (Contribution(pages=[Page("P", "", "P", "", "s", image_ids=["gone"])]), "shows images"),
    ],
)
def test_contribution_checks(contribution, message):
    with pytest.raises(BuildError, match=message):
        _check_contribution("t", contribution)
