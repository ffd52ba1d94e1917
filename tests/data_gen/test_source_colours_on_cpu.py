"""Colours an image's source states, read as a person reads them, and the agreement rule a colour clause must pass
(hand-computed cases from the world's own source texts), and the Neos synthesizer rejecting a checkpoint whose
source disagrees."""

import pytest

from data_gen.common.source_colours import image_source_texts, source_disagrees, stated_colours
from data_gen.neos.observer import PaletteObserver
from data_gen.neos.synth import Synthesizer
from neos_core.world.store import World


@pytest.mark.parametrize("texts, expected", [
    (["Its brand colour is the sRGB hex triplet #83B81A; its logo is drawn in that colour."], {"green"}),
    (["Its brand colour is the sRGB hex triplet #000000."], {"black"}),
    (["locator map of Aruba, highlighted in red"], {"red"}),
    (["A great blue heron.", "heron"], {"blue"}),  # a name that states a colour is still a statement
    (["Gold and dark blue stripes", "a navy field"], {"yellow", "blue"}),  # synonyms and shades merged
    (["Flag of France", "national flag of France"], None),  # says nothing about colours
    (["A blue-collar worker; redbook"], None),  # parts of words are not colour words
])
def test_stated_colours(texts, expected):
    assert stated_colours(texts) == (frozenset(expected) if expected is not None else None)


def test_a_clause_must_name_a_colour_the_source_states():
    assert source_disagrees(("white",), frozenset({"green"}))  # the logo's background, not its ink
    assert not source_disagrees(("white", "black"), frozenset({"black"}))
    assert not source_disagrees(("light blue", "dark red"), frozenset({"red"}))  # dark red reads as red
    assert not source_disagrees(("white",), None) and not source_disagrees((), frozenset({"red"}))


def test_the_synthesizer_rejects_checkpoints_whose_source_disagrees(small_world):
    world = World.load(small_world)
    synth = Synthesizer(world, seed=0)
    observer = PaletteObserver()
    # the first is at seed 126 (Oceania, Australia's locator map); before the open-world rule at seed 13 (Northern
    # Europe through "the class that A is an instance of", which that rule now rejects)
    for seed in synth.seeds()[:200]:
        rejected = [c for c in synth.synthesize(seed).candidates if c.filter == "source_colours"]
        if rejected:
            break
    else:
        raise AssertionError("no source_colours rejection in 200 seeds of the small world")
    image_id = rejected[0].detail.split(":", 1)[0]
    seen = observer.describe(world.image_path(image_id), world.images[image_id].source, ())
    assert source_disagrees(seen.colours, stated_colours(image_source_texts(world, image_id)))
