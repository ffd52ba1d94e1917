"""Colour words a person would agree with (issue 36): questions state a checkpoint's colours as the grounding check
reads them (near shades merged, no area order), so a reader who takes the words literally learns nothing more; the
strict-reading ablation finds the old wording's leaks ("mostly dark blue and yellow (by decreasing area)") and none
in the new. Hand-made world, answers worked out by hand."""

from pathlib import Path

from data_gen.kg import Edge, Structure
from data_gen.neos.observer import Description
from data_gen.neos.strict_colours import StrictDescription, strict_reading, strictly_unique_without_entry_image
from data_gen.neos.synth import SynthConfig, Synthesizer
from data_gen.world.model import Entity
from data_gen.world.model import Image as ImageRecord
from data_gen.world.model import Triple
from data_gen.world.store import World

RED, WHITE, DARK_BLUE, YELLOW, GREEN = (210, 20, 40), (255, 255, 255), (0, 30, 90), (250, 210, 0), (0, 140, 70)


def test_the_stated_colours_are_merged_and_unordered():
    d = Description("national flag", ("dark blue", "yellow"))
    assert d.render() == "its national flag is mostly blue and yellow"
    assert Description("locator map", ("white", "light blue", "red")).clause() == \
        "locator map is mostly blue, red and white"


def test_the_literal_reading_takes_shades_and_order_at_their_word():
    old = strict_reading("its national flag is mostly dark blue and yellow (by decreasing area)")
    assert old == StrictDescription("national flag", ("dark blue", "yellow"), (), ordered=True)
    assert old.matches(Description("national flag", ("dark blue", "yellow")))
    assert not old.matches(Description("national flag", ("yellow", "dark blue")))  # the order stated
    assert not old.matches(Description("national flag", ("blue", "yellow")))  # the shade stated
    new = strict_reading("a country whose national flag is mostly blue and yellow, and that ...")
    assert new == StrictDescription("national flag", ("blue", "yellow"), ())
    assert new.matches(Description("national flag", ("yellow", "dark blue")))
    assert strict_reading("whose flag is striped") is None


def _world(root: Path, striped_png) -> World:
    """A (red) borders B (dark blue over yellow) and C (white); Y (green) borders X (yellow over dark blue); B, C
    and X have currencies b, c and x. A reader who takes the order at its word tells B's flag from X's."""
    flags = {"A": [(RED, 8)], "B": [(DARK_BLUE, 5), (YELLOW, 3)], "C": [(WHITE, 8)], "X": [(YELLOW, 5), (DARK_BLUE, 3)],
             "Y": [(GREEN, 8)]}
    entities, images = {}, {}
    for code, stripes in flags.items():
        eid = f"country:{code}"
        entities[eid] = Entity(eid, f"Land {code}", "country")
        striped_png(root / f"{code}.png", stripes)
        images[f"flag_{code}"] = ImageRecord(f"flag_{code}", f"https://w.invalid/{code}.png", f"{code}.png", "", "",
                                             "flag-icons", 10, 8, entity_id=eid)
    facts = [("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"), ("country:Y", "P47", "country:X"),
             ("country:B", "P38", "currency:b"), ("country:C", "P38", "currency:c"), ("country:X", "P38", "currency:x")]
    entities |= {f"currency:{c}": Entity(f"currency:{c}", f"Coin {c}", "currency") for c in "bcx"}
    return World(root, {}, entities, {}, images, [Triple(*t) for t in facts], {}, {}, {})


PATH = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                            Edge("country:B", "currency:b", "P38", True)),), tail=(), checkpoints=("country:B",))


def test_the_ablation_finds_the_old_wording_and_not_the_new(tmp_path, striped_png):
    synth = Synthesizer(_world(tmp_path, striped_png), seed=0, config=SynthConfig(closed_book=False))
    cand = synth.candidate(PATH)
    # without the entry image a person has B and X (the same colours to them): the image is needed
    assert cand.filter is None and "whose national flag is mostly blue and yellow" in cand.task.question
    assert not strictly_unique_without_entry_image(synth, cand.task)
    # the same task worded as before: "dark blue and yellow (by decreasing area)" fits B's flag only
    old = "its national flag is mostly dark blue and yellow (by decreasing area)"
    steps = [s.model_copy(update={"checkpoint_description": old}) if s.checkpoint else s for s in cand.task.steps]
    worded = cand.task.model_copy(update={"steps": steps, "question": f"Let B be ...; {old}. Which currency ...?"})
    assert strictly_unique_without_entry_image(synth, worded)
