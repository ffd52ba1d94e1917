"""Neos's evidence dependence as rejection rules, on a hand-made world whose answers are worked out by hand: a
question survives only if dropping its entry image, or any visual checkpoint, leaves a reader more than one
answer; checkpoints must also be unique under a person's reading of colours; no answer fills more than its share."""

from pathlib import Path

import pytest
from PIL import Image

from data_gen.common.stats import answer_cap, diversity
from data_gen.kg import Edge, Structure
from data_gen.neos.observer import Description, PaletteObserver, ground
from data_gen.neos.strict_colours import strictly_unique_without_entry_image
from data_gen.neos.synth import SynthConfig, Synthesizer
from neos_core.world.model import Entity
from neos_core.world.model import Image as ImageRecord
from neos_core.world.model import Triple
from neos_core.world.store import World

RED, WHITE, BLUE, GREEN, YELLOW = (210, 20, 40), (255, 255, 255), (0, 60, 170), (0, 140, 70), (250, 210, 0)
DARK_BLUE = (0, 30, 90)


def _world(root: Path, flags: dict[str, list], triples: list[tuple[str, str, str]],
           striped_png) -> World:
    """Countries with flags (``flags``: code -> stripes) and currencies, nothing else."""
    entities, images = {}, {}
    for code, stripes in flags.items():
        eid = f"country:{code}"
        entities[eid] = Entity(eid, f"Land {code}", "country")
        striped_png(root / f"{code}.png", stripes)
        images[f"flag_{code}"] = ImageRecord(f"flag_{code}", f"https://w.invalid/{code}.png", f"{code}.png", "", "",
                                             "flag-icons", 10, 8, entity_id=eid)
    for _, _, o in triples:
        if o.startswith("currency:"):
            entities[o] = Entity(o, f"Coin {o[-1]}", "currency")
    return World(root, {}, entities, {}, images, [Triple(*t) for t in triples], {}, {}, {})


# A (red) borders B (blue over white) and C (green); the question: "the currency used in the country that borders
# the flag's country and whose flag is mostly blue and white".
PATH = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                            Edge("country:B", "currency:b", "P38", True)),), tail=(), checkpoints=("country:B",))
BASE = {"A": [(RED, 8)], "B": [(BLUE, 5), (WHITE, 3)], "C": [(GREEN, 8)]}
BASE_FACTS = [("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"),
              ("country:B", "P38", "currency:b"), ("country:C", "P38", "currency:c")]


def _filter(tmp_path, flags, facts, striped_png, closed_book=False):
    """PATH's candidate; borders and currencies are common knowledge, so the closed-book probe (on in the CLI)
    solves every PATH question whose images it recognises: off here, for the evidence rules that come before it."""
    synth = Synthesizer(_world(tmp_path, flags, facts, striped_png), seed=0, config=SynthConfig(
        closed_book=closed_book))
    return synth.candidate(PATH)


def test_the_image_is_decoration_when_the_description_alone_finds_the_answer(tmp_path, striped_png):
    # Only B has a blue-white flag among all countries that border one: the entry image adds nothing.
    cand = _filter(tmp_path, BASE, BASE_FACTS, striped_png)
    assert (cand.task, cand.filter) == (None, "entry_image_ablation")


def test_a_look_alike_elsewhere_makes_the_entry_image_needed(tmp_path, striped_png):
    # X (white over dark blue: the same colours to a person) borders Y and has its own currency: without the entry
    # image a reader has B and X left, {b, x}; with it, only B. The checkpoint is needed too: A borders B and C.
    flags = {**BASE, "X": [(WHITE, 5), (DARK_BLUE, 3)], "Y": [(YELLOW, 8)]}
    facts = BASE_FACTS + [("country:Y", "P47", "country:X"), ("country:X", "P38", "currency:x")]
    cand = _filter(tmp_path, flags, facts, striped_png)
    assert cand.filter is None and cand.task is not None and cand.task.answer_entity == "currency:b"
    assert cand.task.steps[0].checkpoint and "blue and white" in cand.task.question
    # a strong model recognises A's flag, knows A's neighbours and B's flag and currency: solved without a tool
    assert _filter(tmp_path, flags, facts, striped_png, closed_book=True).filter == "closed_book"


def test_a_checkpoint_the_relations_already_decide_is_rejected(tmp_path, striped_png):
    # A borders only B: "the country bordering A" is B without looking at its flag.
    flags = {**BASE, "X": [(WHITE, 5), (DARK_BLUE, 3)], "Y": [(YELLOW, 8)]}
    facts = [f for f in BASE_FACTS if f != ("country:A", "P47", "country:C")]
    facts += [("country:Y", "P47", "country:X"), ("country:X", "P38", "currency:x")]
    cand = _filter(tmp_path, flags, facts, striped_png)
    assert (cand.task, cand.filter) == (None, "checkpoint_ablation")


def test_the_strict_reading_ablation_finds_the_old_wording_and_not_the_new(tmp_path, striped_png):
    # A (red) borders B (dark blue over yellow) and C (white); Y (green) borders X (yellow over dark blue). Without
    # the entry image a person has B and X (the same colours to them): the image is needed. A reader who takes the
    # old wording's order at its word tells B's flag from X's.
    flags = {"A": [(RED, 8)], "B": [(DARK_BLUE, 5), (YELLOW, 3)], "C": [(WHITE, 8)],
             "X": [(YELLOW, 5), (DARK_BLUE, 3)], "Y": [(GREEN, 8)]}
    facts = [("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"), ("country:Y", "P47", "country:X"),
             ("country:B", "P38", "currency:b"), ("country:C", "P38", "currency:c"), ("country:X", "P38", "currency:x")]
    synth = Synthesizer(_world(tmp_path, flags, facts, striped_png), seed=0, config=SynthConfig(closed_book=False))
    cand = synth.candidate(PATH)
    assert cand.filter is None and "whose national flag is mostly blue and yellow" in cand.task.question
    assert not strictly_unique_without_entry_image(synth, cand.task)
    old = "its national flag is mostly dark blue and yellow (by decreasing area)"
    steps = [s.model_copy(update={"checkpoint_description": old}) if s.checkpoint else s for s in cand.task.steps]
    worded = cand.task.model_copy(update={"steps": steps, "question": f"Let B be ...; {old}. Which currency ...?"})
    assert strictly_unique_without_entry_image(synth, worded)


def test_colours_are_read_as_a_person_does_unordered_and_shades_merged(tmp_path, striped_png):
    blue_white = Description("national flag", ("blue", "white"))
    assert blue_white.matches(Description("national flag", ("white", "dark blue")))
    assert blue_white.matches(Description("national flag", ("light blue", "white")))
    assert not blue_white.matches(Description("national flag", ("blue", "white", "red")))
    assert not blue_white.matches(Description("locator map", ("blue", "white")))
    assert not blue_white.matches(None)
    # grounding: B's blue-white flag is not distinctive next to X's white-dark-blue one
    files = {"B": striped_png(tmp_path / "b.png", [(BLUE, 5), (WHITE, 3)]),
             "X": striped_png(tmp_path / "x.png", [(WHITE, 5), (DARK_BLUE, 3)])}
    images_of = lambda e: [(f"flag_{e}", files[e], "flag-icons")] if e in files else []
    assert ground("B", {"B", "X"}, images_of, PaletteObserver(), withheld=()) is None
    assert ground("B", {"B"}, images_of, PaletteObserver(), withheld=()) is not None


@pytest.mark.parametrize("limit, cap", [(None, 3), (10, 1), (60, 1), (100, 3), (1000, 3)])
def test_no_answer_above_three_percent_of_a_limited_run(limit, cap):
    assert answer_cap(limit) == cap
    if limit is not None and limit >= 34:
        assert cap / limit <= 0.03


def test_diversity_figures():
    d = diversity(["x", "x", "y", "z"], ["city", "city", "lang", "city"], ["capital", "border", "capital"],
                  ["p: a", "p: a", "p: b", "c: a"])
    assert d["distinct_answers"] == 3 and d["max_answer_share"] == 0.5 and d["top_answers"]["x"] == 2
    assert d["answer_types"] == {"city": 3, "lang": 1} and d["relations"] == {"capital": 2, "border": 1}
    assert d["distinct_skeletons"] == 3 and d["skeletons"]["p: a"] == 2


def test_colours_are_named_perceptually_and_only_with_a_margin():
    from data_gen.neos.observer import COLOURS, palette

    assert palette(Image.new("RGB", (10, 10), (180, 215, 244))) == ("light blue",)  # Eritrea's pale blue
    assert palette(Image.new("RGB", (10, 10), (238, 234, 222))) == ("white",)  # a map's off-white land
    between = (80, 40, 150)  # Delta E 16.1 from "purple", 16.7 from "blue"
    assert palette(Image.new("RGB", (10, 10), between)) == ()  # a person could say either: not described
    half = Image.new("RGB", (10, 10), COLOURS["red"])
    half.paste(between, (0, 0, 10, 2))  # 20% of one unclear colour: a region a person sees
    assert palette(half) == ()  # "mostly red" would leave it out; before 2026-12-06 this read ("red",)
    edges = Image.new("RGB", (10, 10), COLOURS["red"])
    for x in range(10):  # 20% unclear pixels spread over 20 colours (anti-aliased edges): tolerated
        edges.putpixel((x, 0), (75 + x, 40, 150))
        edges.putpixel((x, 1), (75 + x, 41, 151))
    assert palette(edges) == ("red",)


def test_near_shades_are_one_colour_before_min_share(striped_png, tmp_path):
    """A colour between two shades of one colour is that colour to a person, and a colour spread over shades, each
    under MIN_SHARE, is seen whole: Samoa's blue canton (between "blue" and "dark blue", a quarter of the flag) and
    Nepal's blue border (13% of the flag over several shades of blue, each under MIN_SHARE) read "red" and "red and
    white" before 2026-12-06, or nothing; two shades of one colour are never two colours."""
    from data_gen.neos.observer import COLOURS, MIN_SHARE, colour_shares, palette

    navy = (0, 45, 130)  # Delta E 15.3 from "blue", 16.3 from "dark blue": blue either way
    assert palette(Image.new("RGB", (10, 10), navy)) == ("blue",)
    canton = striped_png(tmp_path / "canton.png", [(COLOURS["red"], 15), (navy, 5)])
    assert palette(Image.open(canton)) == ("red", "blue")
    # 4% blue and 4% dark blue, each under MIN_SHARE (6%), are 8% of blue, named by its larger shade
    spread = striped_png(tmp_path / "spread.png", [(COLOURS["white"], 46), (COLOURS["blue"], 2),
                                                   (COLOURS["dark blue"], 2)])
    assert dict(colour_shares(Image.open(spread))) == pytest.approx({"white": 0.92, "blue": 0.08})
    assert 0.04 < MIN_SHARE
    # red and dark red, each a large area: one colour (a person counts the US flag's red once)
    two_reds = striped_png(tmp_path / "reds.png", [(COLOURS["red"], 6), (COLOURS["dark red"], 4),
                                                   (COLOURS["white"], 10)])
    assert dict(colour_shares(Image.open(two_reds))) == pytest.approx({"white": 0.5, "red": 0.5})


def test_a_colour_is_named_by_a_shade_only_when_its_pixels_clearly_are_that_shade(striped_png, tmp_path):
    """A person names a colour by its shade ("dark blue") only when it plainly is that shade; a colour between the
    colour and its shade, or shades mixed, is the colour. Before 2026-12-06 (evening) the merged colour took its
    largest shade's name, and the US flag read "dark red, white and dark blue"."""
    from data_gen.neos.observer import COLOURS, palette

    us_red = (189, 61, 68)  # the US flag's red: Delta E 21.9 from "dark red", 23.5 from "red": red to a person
    us_blue = (25, 47, 93)  # its canton: Delta E 13.7 from "dark blue", 40.0 from "blue": clearly navy
    us = striped_png(tmp_path / "us.png", [(us_red, 8), (COLOURS["white"], 7), (us_blue, 5)])
    assert palette(Image.open(us)) == ("red", "white", "dark blue")  # ("dark red", ...) before
    # 70% of the red pixels clearly dark red (the "dark red" anchor, Delta E 37.8 from "red"): two to one and more
    mostly_dark = striped_png(tmp_path / "dark.png", [(COLOURS["dark red"], 7), (COLOURS["red"], 3),
                                                      (COLOURS["white"], 10)])
    assert palette(Image.open(mostly_dark)) == ("dark red", "white")
    # half and half: the colour, which is true of both shades ("dark red" before, the larger shade by one row)
    mixed = striped_png(tmp_path / "mixed.png", [(COLOURS["dark red"], 6), (COLOURS["red"], 5),
                                                 (COLOURS["white"], 9)])
    assert palette(Image.open(mixed)) == ("red", "white")


def test_the_observer_reads_an_image_as_fetch_image_serves_it(striped_png, tmp_path, small_world):
    """FetchImage serves a transparent image flattened onto a white page; the observer reads those pixels, so the
    expert's check on the served image agrees with the description. A transparent area a person sees (6% or more)
    is the page, which the pixels cannot tell from a white part of the image: such an image gets no colours. Before
    2026-12-06 (evening) the observer read Nepal's opaque pixels (red, blue, white) and FetchImage dropped the alpha
    channel (black, red): the expert rejected each task checked on Nepal's flag."""
    from data_gen.neos.observer import COLOURS, palette
    from neos_core.world.store import World
    from tool_server.offline.pixels import decode_image

    def served(path):
        return decode_image(Path(path).read_bytes(), max_pixels=10**7)

    clear = (0, 0, 0, 0)  # transparent black, as Nepal's flag stores its page
    pennant = striped_png(tmp_path / "pennant.png", [((*COLOURS["red"], 255), 15), (clear, 5)])
    assert served(pennant).getpixel((0, 19)) == (255, 255, 255)  # the page, not the stored black
    assert palette(Image.open(pennant)) == ()  # 25% page: ("red",) before
    assert palette(served(pennant)) == ("red", "white")  # what a reader of the served pixels alone would say
    fringe = striped_png(tmp_path / "fringe.png", [((*COLOURS["red"], 255), 10), ((*COLOURS["blue"], 255), 9),
                                                   (clear, 1)])  # 5%: a soft edge, read on white
    assert palette(Image.open(fringe)) == ("red", "blue") == palette(served(fringe))

    world = World.load(small_world)
    for image_id, image in world.images.items():
        if image.source == "flag-icons":  # the only world images with an alpha channel
            with Image.open(world.image_path(image_id)) as im:
                described = palette(im)
            assert not described or described == palette(served(world.image_path(image_id))), image_id
    with Image.open(world.image_path("flag_npl")) as im:
        assert palette(im) == ()  # 64% transparent; ("red", "blue", "white") before
    assert palette(served(world.image_path("flag_npl"))) == ("white", "red")  # the page counted: not described


# "the diplomat, born in 1911, died in 1990, who is a citizen of ...": the noun that pins an open-world node
# is part of the compiled query. A borders B and C; Y borders X, whose flag reads as B's to a person.
CITIZEN = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                               Edge("country:B", "person:b", "P27", False)),), tail=(), checkpoints=("country:B",))
DIPLOMAT_1911 = "Vietnamese diplomat (1911-1990)"


def _citizens(tmp_path, striped_png, glosses: dict[str, str]) -> Synthesizer:
    """The look-alike world above, each of B, C and X with one citizen (``glosses``: country code -> the citizen's
    gloss), all diplomats."""
    flags = {**BASE, "X": [(WHITE, 5), (DARK_BLUE, 3)], "Y": [(YELLOW, 8)]}
    facts = BASE_FACTS + [("country:Y", "P47", "country:X"), ("country:X", "P38", "currency:x")]
    world = _world(tmp_path, flags, facts, striped_png)
    world.entities["occupation:diplomat"] = Entity("occupation:diplomat", "diplomat", "occupation")
    for code, gloss in glosses.items():
        person = f"person:{code.lower()}"
        world.entities[person] = Entity(person, f"Envoy {code}", "person", gloss)
        world.triples.extend([Triple(person, "P27", f"country:{code}"),
                              Triple(person, "P106", "occupation:diplomat")])
    return Synthesizer(world, seed=0)


def test_the_images_are_decoration_when_the_persons_dates_alone_single_them_out(tmp_path, striped_png):
    # Without the entry image a reader has B and X (same colours), their citizens b and x; but only b is a diplomat
    # born in 1911 who died in 1990, which the question states: the images add nothing. (Before the noun was part
    # of the ablation, {b, x} counted as two answers and the question was kept.)
    synth = _citizens(tmp_path, striped_png, {"B": DIPLOMAT_1911, "C": "Greek diplomat (1920-2001)",
                                              "X": "French diplomat (1920-2001)"})
    cand = synth.candidate(CITIZEN)
    assert (cand.task, cand.filter) == (None, "entry_image_ablation")


def test_a_persons_noun_shared_by_the_look_alikes_citizens_keeps_the_images_needed(tmp_path, striped_png):
    # The same noun for the citizens of B, C and X: without the entry image {b, x}, without the checkpoint {b, c}.
    synth = _citizens(tmp_path, striped_png, {"B": DIPLOMAT_1911, "C": DIPLOMAT_1911, "X": DIPLOMAT_1911})
    cand = synth.candidate(CITIZEN)
    assert cand.filter is None and cand.task is not None and cand.task.answer_entity == "person:b"
    assert "the diplomat, born in 1911, died in 1990, who is a citizen of a country whose national flag is mostly " \
           "blue and white" in cand.task.question.lower()
    assert cand.task.question.endswith("which diplomat is it?")


# "the organization of 2 members whose members include ...": an organisation whose members the world holds
# completely is pinned by its member count, which the evidence rules read as they read a person's noun.
MEMBERSHIP = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                                  Edge("country:B", "org:b", "P463", True)),), tail=(), checkpoints=("country:B",))


def _organisations(tmp_path, striped_png, members: dict[str, list[str]]) -> Synthesizer:
    """The look-alike world above with organisations (``members``: id -> member country codes), each stating its
    member count (P2124), so that every list is complete."""
    flags = {**BASE, "X": [(WHITE, 5), (DARK_BLUE, 3)], "Y": [(YELLOW, 8)]}
    facts = BASE_FACTS + [("country:Y", "P47", "country:X"), ("country:X", "P38", "currency:x")]
    world = _world(tmp_path, flags, facts, striped_png)
    for org, codes in members.items():
        world.entities[org] = Entity(org, f"Union {org[-1].upper()}", "organization")
        world.triples.append(Triple(org, "P2124", str(len(codes)), literal=True))
        world.triples.extend(Triple(f"country:{code}", "P463", org) for code in codes)
    return Synthesizer(world, seed=0)


def test_the_images_are_decoration_when_the_member_count_alone_singles_the_organisation_out(tmp_path, striped_png):
    # Without the entry image a reader has B and X, their organisations b (2 members) and x (3): only b has the
    # count the question states. (Before the ablation read organisation nouns, no candidate fitted the noun, so the
    # reader was left with no answer, and the question was kept.)
    synth = _organisations(tmp_path, striped_png, {"org:b": ["B", "A"], "org:x": ["X", "Y", "C"]})
    cand = synth.candidate(MEMBERSHIP)
    assert (cand.task, cand.filter) == (None, "entry_image_ablation")


def test_a_member_count_shared_by_the_look_alikes_organisations_keeps_the_images_needed(tmp_path, striped_png):
    synth = _organisations(tmp_path, striped_png, {"org:b": ["B", "A"], "org:x": ["X", "Y"], "org:c": ["C", "Y"]})
    cand = synth.candidate(MEMBERSHIP)
    assert cand.filter is None and cand.task is not None and cand.task.answer_entity == "org:b"
    assert "the organization of 2 members whose members include a country whose national flag" in cand.task.question
