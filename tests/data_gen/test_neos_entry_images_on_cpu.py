"""A Neos entry image is a national flag or an unlabelled locator map (never the labelled map, which prints the
anchor's name), chosen per anchor from the run's seed; the verbalizer and the entry-image ablation follow the chosen
image's kind. Hand-made worlds whose choices and answers are worked out by hand."""

from pathlib import Path

from data_gen.kg import Edge, Structure
from data_gen.neos.synth import SynthConfig, Synthesizer
from neos_core.world.model import Entity, Triple
from neos_core.world.model import Image as ImageRecord
from neos_core.world.store import World

RED, WHITE, BLUE, GREEN, YELLOW = (210, 20, 40), (255, 255, 255), (0, 60, 170), (0, 140, 70), (250, 210, 0)
DARK_BLUE = (0, 30, 90)
SOURCES = {"flag": "flag-icons", "map": "world-atlas", "map_unlabelled": "world-atlas-unlabelled"}


def _world(root: Path, images: dict[str, dict[str, list]], triples: list[tuple[str, str, str]], striped_png) -> World:
    """Countries (``images``: code -> {"flag" | "map" | "map_unlabelled": stripes}) and currencies."""
    entities, records = {}, {}
    for code, kinds in images.items():
        eid = f"country:{code}"
        entities[eid] = Entity(eid, f"Land {code}", "country")
        for kind, stripes in kinds.items():
            image_id = f"{kind}_{code}"
            striped_png(root / f"{image_id}.png", stripes)
            records[image_id] = ImageRecord(image_id, f"https://w.invalid/{image_id}.png", f"{image_id}.png", "", "",
                                            SOURCES[kind], 10, 8, entity_id=eid)
    for _, _, o in triples:
        if o.startswith("currency:"):
            entities[o] = Entity(o, f"Coin {o[-1]}", "currency")
    return World(root, {}, entities, {}, records, [Triple(*t) for t in triples], {}, {}, {})


def test_the_entry_image_is_an_unnamed_image_chosen_by_seed_and_anchor(tmp_path, striped_png):
    every = {"flag": [(RED, 8)], "map": [(WHITE, 8)], "map_unlabelled": [(WHITE, 8)]}
    codes = [f"K{i}" for i in range(20)]
    world = _world(tmp_path, {**{c: every for c in codes}, "M": {"map": [(WHITE, 8)]}, "F": {"flag": [(RED, 8)]}},
                   [], striped_png)
    chosen = {c: Synthesizer(world, seed=0).entry_image(f"country:{c}")[0] for c in codes}
    assert chosen == {c: Synthesizer(world, seed=0).entry_image(f"country:{c}")[0] for c in codes}  # deterministic
    assert {i.split("_")[0] for i in chosen.values()} == {"flag", "map"}  # a run mixes both kinds
    assert all(i in (f"flag_{c}", f"map_unlabelled_{c}") for c, i in chosen.items())  # never the labelled map
    # sha256("0:country:K0") and sha256("2:country:K0") taken mod 2 over [flag, unlabelled map]: 0 and 1
    assert Synthesizer(world, seed=0).entry_image("country:K0")[0] == "flag_K0"
    assert Synthesizer(world, seed=2).entry_image("country:K0")[0] == "map_unlabelled_K0"
    # an anchor with one unnamed image always gets it; one with only the labelled map keeps it (nothing else)
    assert Synthesizer(world, seed=2).entry_image("country:F")[0] == "flag_F"
    assert Synthesizer(world, seed=2).entry_image("country:M")[0] == "map_M"


# A borders B (blue over white) and C (green); Y borders X (white over dark blue, the same colours to a person).
# The question: "the currency used in the country that borders A and whose flag is mostly blue and white".
PATH = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                            Edge("country:B", "currency:b", "P38", True)),), tail=(), checkpoints=("country:B",))
FACTS = [("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"), ("country:B", "P38", "currency:b"),
         ("country:C", "P38", "currency:c"), ("country:Y", "P47", "country:X"), ("country:X", "P38", "currency:x")]
FLAGS = {"A": [(RED, 8)], "B": [(BLUE, 5), (WHITE, 3)], "C": [(GREEN, 8)], "X": [(WHITE, 5), (DARK_BLUE, 3)],
         "Y": [(YELLOW, 8)]}
MAP = [(BLUE, 4), (WHITE, 4)]


def _candidate(tmp_path, striped_png, mapped: set[str], seed: int):
    images = {c: {"flag": s, **({"map_unlabelled": MAP} if c in mapped else {})} for c, s in FLAGS.items()}
    # the closed-book probe off: it would solve PATH from the recognised map (test_neos_evidence_rules_on_cpu.py)
    return Synthesizer(_world(tmp_path, images, FACTS, striped_png), seed=seed,
                       config=SynthConfig(closed_book=False)).candidate(PATH)


def test_a_map_entry_is_verbalized_as_a_locator_map_and_shipped_as_the_unlabelled_image(tmp_path, striped_png):
    # seed 2 picks A's map. Without it a reader knows "a country with a locator map": A, X or Y; from Y the path
    # reaches X and currency x, so the map is needed ({b, x} without it, {b} with it).
    cand = _candidate(tmp_path, striped_png, {"A", "X", "Y"}, seed=2)
    assert cand.filter is None and cand.task.answer_entity == "currency:b"
    assert "the country whose locator map is shown in the image" in cand.task.question
    assert [e.image_id for e in cand.task.entry_images] == ["map_unlabelled_A"]


def test_the_entry_image_ablation_reads_the_chosen_images_kind(tmp_path, striped_png):
    # Only A and X have locator maps, and X borders nothing: a map entry leaves a reader A alone, so the map is
    # decoration (rejected); a flag entry (seed 0) leaves every flagged country, Y among them, so the flag is needed.
    assert _candidate(tmp_path, striped_png, {"A", "X"}, seed=2).filter == "entry_image_ablation"
    flag = _candidate(tmp_path, striped_png, {"A", "X"}, seed=0)
    assert flag.filter is None and [e.image_id for e in flag.task.entry_images] == ["flag_A"]
    assert "whose national flag is shown in the image" in flag.task.question
