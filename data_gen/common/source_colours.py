"""What an image's source says about its colours, so a colour clause the pixels suggest is kept only where the
source agrees (both pipelines: Neos checkpoint descriptions, :func:`source_disagrees`; ModalSearch colour answers,
:func:`source_excludes`).

The source texts of an image are its caption, its alt text and the sentences of its source page that speak of the
image ("Its brand colour is the sRGB hex triplet #ED1C24; its logo is drawn in that colour."). Colours are read from
them as a person reads colour words (near shades merged, as :meth:`Description.reading` does): named colours and
their common synonyms, and sRGB hex triplets named by their nearest colour in CIELAB. A source that names no colour
says nothing (None), and the pixels alone decide, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from data_gen.neos.observer import COLOURS, IMAGE_KINDS, SHADE_OF, nearest_colour
from neos_core.world.store import World

SYNONYMS: dict[str, str] = {
    "gold": "yellow", "golden": "yellow", "silver": "grey", "gray": "grey", "crimson": "red", "scarlet": "red",
    "maroon": "dark red", "navy": "dark blue", "azure": "light blue", "sky blue": "light blue", "violet": "purple",
}
_WORDS = sorted({*COLOURS, *SYNONYMS}, key=len, reverse=True)  # "light blue" before "blue"
_COLOUR_WORD = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, _WORDS)) + r")(?![\w-])", re.IGNORECASE)
_HEX = re.compile(r"#([0-9a-fA-F]{6})\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def merged(colour: str) -> str:
    """A colour word as a person matches it: synonyms and near shades become one colour."""
    name = SYNONYMS.get(colour.lower(), colour.lower())
    return SHADE_OF.get(name, name)


def stated_colours(texts: Iterable[str]) -> frozenset[str] | None:
    """The colours ``texts`` state (merged), or None when they state none."""
    found: set[str] = set()
    for text in texts:
        found |= {merged(m.group(1)) for m in _COLOUR_WORD.finditer(text)}
        for m in _HEX.finditer(text):
            found.add(merged(nearest_colour(tuple(int(m.group(1)[i:i + 2], 16) for i in (0, 2, 4)))))
    return frozenset(found) or None


def image_source_texts(world: World, image_id: str) -> list[str]:
    """The image's caption and alt, and the sentences of its source page that name its kind ("flag", "logo",
    "map", "picture") or speak of colour."""
    image = world.images[image_id]
    texts = [image.caption, image.alt]
    page = world.pages.get(image.page_id) if image.page_id else None
    if page is not None:
        kind = IMAGE_KINDS.get(image.source, "")
        words = {kind.split()[-1]} if kind else set()
        about = re.compile(r"\b(" + "|".join(sorted(words | {"colour", "color", "coloured", "colored"})) + r")s?\b",
                           re.IGNORECASE)
        texts += [s for s in _SENTENCE.split(page.text) if about.search(s)]
    return texts


def source_disagrees(colours: Sequence[str], stated: frozenset[str] | None) -> bool:
    """The source states colours and the description names none of them: a logo "drawn in #83B81A" (green) that
    the pixels read as "mostly white" (its background), a map "highlighted in red" whose red is too small to be
    named. A source that names only some of an image's colours (a caption's salient one) does not contradict the
    others, so one shared colour is agreement."""
    return stated is not None and bool(colours) and not stated & {merged(c) for c in colours}


def source_excludes(colour: str, stated: frozenset[str] | None) -> bool:
    """The source names a set of colours (two or more: "red, white and green") without ``colour``: a ModalSearch
    answer about areas ("which colour covers the largest area") the source contradicts. One stated colour is a
    salient one (a logo "drawn in green", a map "highlighted in red"), not the image's colours: it contradicts no
    area answer (the logo's white background, the map's blue sea)."""
    return stated is not None and len(stated) >= 2 and merged(colour) not in stated
