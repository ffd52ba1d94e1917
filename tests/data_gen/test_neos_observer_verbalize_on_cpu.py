"""Blind grounding and verbalization on hand-made images and a hand-made KG, with hand-checked expectations."""


from PIL import Image

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.observer import Description, PaletteObserver, ground, palette
from data_gen.neos.verbalize import TemplateVerbalizer, check_coverage


def test_palette_orders_colours_by_area_and_reads_transparency_as_the_page(tmp_path, striped_png):
    red, white, clear = (210, 20, 40, 255), (255, 255, 255, 255), (0, 0, 0, 0)
    with Image.open(striped_png(tmp_path / "a.png", [(red, 12), (white, 7), (clear, 1)])) as im:
        assert palette(im) == ("red", "white")  # 5% transparent, read on white as served: red 60%, white 40%
    with Image.open(striped_png(tmp_path / "c.png", [(red, 6), (white, 4), (clear, 30)])) as im:
        assert palette(im) == ()  # 75% page: ("red", "white") from the opaque pixels until 2026-12-06
    with Image.open(striped_png(tmp_path / "b.png", [(red, 1), (white, 49)])) as im:
        assert palette(im) == ("white",)  # red covers 2% < MIN_SHARE


def test_grounding_accepts_only_a_description_no_distractor_shares(tmp_path, striped_png):
    red, white, blue = (210, 20, 40, 255), (255, 255, 255, 255), (0, 60, 170, 255)
    files = {
        "x": striped_png(tmp_path / "x.png", [(red, 5), (white, 3)]),
        "y": striped_png(tmp_path / "y.png", [(blue, 5), (white, 3)]),
        "z": striped_png(tmp_path / "z.png", [(red, 5), (white, 3)]),  # looks like x
    }
    images_of = lambda e: [(f"flag_{e}", files[e], "flag-icons")] if e in files else []
    observer = PaletteObserver()
    g = ground("y", {"x", "y", "z", "w"}, images_of, observer, withheld=())
    assert g is not None and g.image_id == "flag_y" and g.distractors == 3
    assert g.description == Description("national flag", ("blue", "white"))
    assert ground("x", {"x", "y", "z"}, images_of, observer, withheld=()) is None
    assert ground("x", {"x", "y"}, images_of, observer, withheld=()) is not None
    assert ground("w", {"w", "x"}, images_of, observer, withheld=()) is None  # no image at all


# A path: the flag shows Aland; B borders it and has the blue-white flag; C is B's capital.
KG_TOY = KG.from_triples([("country:a", "P47", "country:b"), ("country:b", "P47", "country:a"),
                          ("country:b", "P36", "city:c")])
STRUCTURE = Structure(
    branches=((Edge("country:a", "country:b", "P47", True), Edge("country:b", "city:c", "P36", True)),),
    tail=(), checkpoints=("country:b",))
KINDS = {"country:a": "country", "country:b": "country", "city:c": "city"}
LABELS = {"P47": "shares border with", "P36": "capital"}


def _verbalize():
    return TemplateVerbalizer().verbalize(STRUCTURE, KINDS, LABELS, ["national flag"],
                                          {"country:b": Description("national flag", ("dark blue", "white"))},
                                          ambiguous={"country:b"})


def test_template_question_names_no_entity_and_covers_every_step():
    v = _verbalize()
    # one question, the capital described from its country, the country from its colours and its neighbour; the
    # colours as the grounding check reads them: "dark blue" merged into blue, no area order
    assert v.question == (
        "Name the capital of a country whose national flag is mostly blue and white, and that shares a border with "
        "the country whose national flag is shown in the image.")
    assert v.spans == ("shares a border with the country", "capital of a country")
    assert check_coverage(v.question, STRUCTURE, v, withheld={"Aland", "Bora", "Cetown"}) is None


def test_coverage_rejects_leaks_missing_steps_and_wrong_direction():
    v = _verbalize()
    assert "names a path entity" in check_coverage(v.question.replace("image.", "image, Cetown."), STRUCTURE, v,
                                                   withheld={"Cetown"})
    dropped = v.question.replace(", and that shares a border with the country whose national flag is shown in the "
                                 "image", "")
    assert "not covered" in check_coverage(dropped, STRUCTURE, v, withheld=())
    # the capital step turned round (the country described as the capital's): the direction is lost
    turned = v.question.replace("Name the capital of a country", "Name the country whose capital is a country")
    assert "not covered" in check_coverage(turned, STRUCTURE, v, withheld=())


def test_wordless_images_are_described_once_and_words_still_withhold_names(tmp_path, striped_png):
    red, white = (210, 20, 40, 255), (255, 255, 255, 255)
    flag = striped_png(tmp_path / "flag.png", [(red, 5), (white, 3)])
    plain = PaletteObserver()
    first = plain.describe(flag, "flag-icons", {"Peru"})
    assert first == Description("national flag", ("red", "white"))
    assert plain.describe(flag, "flag-icons", {"Chile"}) is first  # made once, whatever is withheld
    # with image text the withheld names are taken out on every call: "Peru" is a path entity's name in one
    # structure, not in another
    read = PaletteObserver(ocr=lambda _: "PERU Lima")
    assert read.describe(flag, "flag-icons", {"Peru"}).text == ("Lima",)
    assert read.describe(flag, "flag-icons", {"Lima"}).text == ("PERU",)
