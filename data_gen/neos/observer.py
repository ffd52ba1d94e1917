"""Step 5, blind visual grounding: describe an image without being told what it shows, then accept a visual
checkpoint only if that description singles it out among the entities the question leaves open at that step.

:class:`PaletteObserver` is the **offline default and uses no model**: its description is the image kind from the
world's image metadata (the image source, e.g. "national flag", never the caption, which names the entity), the
dominant named colours of the pixels in decreasing order of area, and (optionally) words read by OCR, minus any
withheld name. A VLM observer (``data_gen.neos.llm.VLMObserver``) plugs in through the :class:`Observer` protocol.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from tool_server.offline.pixels import flattened

# What each world image source depicts: the only metadata the observer reads (captions and alts carry names).
IMAGE_KINDS: dict[str, str] = {
    "flag-icons": "national flag",
    "kgeography-data": "flag",
    "world-atlas": "locator map",
    "world-atlas-unlabelled": "locator map",  # the same map without the name: after the labelled one, so a
    "us-atlas": "locator map",                 # checkpoint (the first image of its kind) keeps the labelled map
    "simple-icons": "logo",
    "tuxpaint-stamps-default": "picture",
    # a Wikidata KG's image statements (data_gen.neos.kg_world): flag, logo, locator map, image
    "wikidata:P41": "flag",
    "wikidata:P154": "logo",
    "wikidata:P242": "locator map",
    "wikidata:P18": "picture",
}
# Sources whose pixels print the depicted entity's name (the labelled locator maps): such an image cannot stand for
# its entity in a question, so it is never an entry image while the entity has another.
NAMED_SOURCES = frozenset({"world-atlas", "us-atlas"})
# A small named palette; each pixel goes to the nearest name.
COLOURS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0), "white": (255, 255, 255), "grey": (150, 150, 150), "red": (210, 20, 40),
    "dark red": (120, 20, 30), "orange": (250, 130, 10), "yellow": (250, 210, 0), "green": (0, 140, 70),
    "dark green": (0, 80, 40), "light blue": (170, 210, 240), "blue": (0, 60, 170), "dark blue": (0, 30, 90),
    "brown": (130, 80, 40), "purple": (120, 40, 140), "pink": (240, 140, 180),
}
# How a person reads a colour word when matching it against an image: near shades are one colour to them.
SHADE_OF: dict[str, str] = {"dark red": "red", "pink": "red", "dark green": "green", "light blue": "blue",
                            "dark blue": "blue", "brown": "orange"}
MIN_SHARE = 0.06  # colours covering less of the image are not mentioned
# A pixel is named only when its nearest name is clearly nearer than the next (CIELAB Delta E, where about 2.3 is
# just noticeable): a colour halfway between "blue" and "purple" is one a person might call either.
MARGIN_DELTA_E = 8.0
MAX_UNNAMED = 0.25  # an image with more unnamed (low-margin) pixels than this gets no colour words at all
# A colour is named by one of its shades ("dark blue", "pink") only when the pixels clearly of that shade (nearer it
# than the colour itself by MARGIN_DELTA_E) are at least this share of the colour's pixels: two to one over the rest
# of the colour. Otherwise the colour's own name, which is true of every shade of it.
SHADE_MAJORITY = 2 / 3
MAX_COLOURS = 4
SIDE = 96  # pixels are read at this long side


@dataclass(frozen=True, slots=True)
class Description:
    """What the observer says about one image; equal descriptions are indistinguishable to a solver."""

    kind: str
    colours: tuple[str, ...]
    text: tuple[str, ...] = ()
    # computed once: the evidence rules compare one description with thousands of candidates' images
    _reading: tuple[str, frozenset[str], tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        reading = self.kind, frozenset(SHADE_OF.get(c, c) for c in self.colours), tuple(w.lower() for w in self.text)
        object.__setattr__(self, "_reading", reading)

    def reading(self) -> tuple[str, frozenset[str], tuple[str, ...]]:
        """What a person checks an image against: the kind, the colours as an unordered set with near shades
        merged, and the words. Two images with the same reading cannot be told apart by a reader of the question,
        whatever the order or the shade the observer named."""
        return self._reading

    def matches(self, other: Description | None) -> bool:
        """A reader of ``self`` could take ``other``'s image for the one described."""
        return other is not None and other.reading() == self.reading()

    def stated(self) -> tuple[str, ...]:
        """The colours a question states: as :meth:`reading` takes them, near shades merged, in alphabetical order
        (no area order), so a reader who takes the words strictly learns no more than the grounding check used."""
        return merged(self.colours)

    def clause(self) -> str:
        """"national flag is mostly green and red": what follows "whose" in a question."""
        *rest, last = self.stated()
        out = f"{self.kind} is mostly {', '.join(rest)} and {last}" if rest else f"{self.kind} is mostly {last}"
        if self.text:
            out += f" and shows the words \"{' '.join(self.text)}\""
        return out

    def render(self) -> str:
        return f"its {self.clause()}"


def merged(colours: Iterable[str]) -> tuple[str, ...]:
    """Colour names as a person reads them: near shades merged (``SHADE_OF``), order dropped (alphabetical)."""
    return tuple(sorted({SHADE_OF.get(c, c) for c in colours}))


class Observer(Protocol):
    """Describes an image from its pixels and kind alone; ``withheld`` names must not appear in the description."""

    def describe(self, path: Path, source: str, withheld: Collection[str]) -> Description | None: ...


def lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB (0-255, shape (n, 3)) to CIELAB under D65: distances there follow what a person sees as different."""
    c = rgb.astype(np.float64) / 255.0
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    to_xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = linear @ to_xyz.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


_NAMES = list(COLOURS)
_REF_LAB = lab(np.asarray([COLOURS[n] for n in _NAMES]))
_COLOUR = np.asarray([SHADE_OF.get(n, n) for n in _NAMES])  # each name's colour, near shades merged
_BASE = np.asarray([_NAMES.index(c) for c in _COLOUR])  # the index of each name's colour


def nearest_colour(rgb: tuple[int, int, int]) -> str:
    """The palette name nearest to one sRGB colour in CIELAB; no margin: a colour a source states is named, not
    judged."""
    return _NAMES[int(np.argmin(((lab(np.asarray([rgb])) - _REF_LAB) ** 2).sum(-1)))]


def palette(pixels: Image.Image) -> tuple[str, ...]:
    """Named colours covering at least ``MIN_SHARE`` of the pixels as served, largest first (ties by name); see
    :func:`colour_shares`."""
    return tuple(name for name, _ in colour_shares(pixels))


def colour_shares(pixels: Image.Image) -> tuple[tuple[str, float], ...]:
    """``(name, share of the pixels)`` for the colours covering at least ``MIN_SHARE``, largest first (ties by
    name), of the image as served to a solver (:func:`as_served`). Each pixel takes its nearest name in CIELAB, and
    only with a margin of ``MARGIN_DELTA_E`` over the next name, unless both are shades of one colour (``SHADE_OF``:
    navy between "blue" and "dark blue" is blue to a person). Near shades are one colour: their pixels are summed
    before ``MIN_SHARE`` applies, so a colour spread over shades is seen (Nepal's blue border, every shade of it under
    ``MIN_SHARE`` and between two of them, read "red and white" until 2026-12-06) and never counted twice. The
    colour is named by a shade only when ``SHADE_MAJORITY`` of its pixels are clearly that shade (nearer it than the
    colour itself by ``MARGIN_DELTA_E``), else by the colour: the US flag's stripes, between red and dark red, are
    red (they read "dark red", the nearer shade, on 2026-12-06), its navy canton, clearly dark blue, stays dark
    blue. When more than ``MAX_UNNAMED`` of the pixels have no clear name, or one colour without a clear name covers
    ``MIN_SHARE`` (Samoa's blue canton, a quarter of its flag, once read "mostly red": a colour a person sees left
    out), the image gets no colours (empty); so does one whose transparent area covers ``MIN_SHARE``
    (:func:`as_served`). Edges and anti-aliasing spread their unclear pixels over many colours and stay
    tolerated."""
    im = as_served(pixels)
    if im is None:
        return ()
    im.thumbnail((SIDE, SIDE))
    rgb = np.asarray(im).reshape(-1, 3).astype(np.uint32)
    # flags, maps: few colours; one 24-bit key per pixel sorts as the rows do, ~100x faster than unique(axis=0)
    keys, counts = np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2], return_counts=True)
    colours = np.stack([keys >> 16, keys >> 8 & 255, keys & 255], axis=1)
    distance = np.sqrt(((lab(colours)[:, None, :] - _REF_LAB[None, :, :]) ** 2).sum(-1))
    order = np.argsort(distance, axis=1)[:, :2]
    two = np.take_along_axis(distance, order, axis=1)
    unclear = (two[:, 1] - two[:, 0] < MARGIN_DELTA_E) & (_COLOUR[order[:, 0]] != _COLOUR[order[:, 1]])
    n = len(rgb)
    if counts[unclear].sum() > MAX_UNNAMED * n or (counts[unclear] >= MIN_SHARE * n).any():
        return ()  # too much unnamed, or one unnamed colour a person sees as a region of its own
    nearest, base = order[:, 0], _BASE[order[:, 0]]
    clearly = distance[np.arange(len(colours)), base] - two[:, 0] >= MARGIN_DELTA_E  # a shade, not its colour
    named = np.where(clearly, nearest, base)
    share = np.bincount(named[~unclear], weights=counts[~unclear], minlength=len(_NAMES)) / n
    merged = {}
    for colour in np.unique(_BASE):
        shades = np.flatnonzero(_BASE == colour)
        top, total = shades[np.argmax(share[shades])], share[shades].sum()
        merged[int(top if share[top] >= SHADE_MAJORITY * total else colour)] = float(total)
    ranked = sorted((i for i, v in merged.items() if v >= MIN_SHARE), key=lambda i: (-merged[i], _NAMES[i]))
    return tuple((_NAMES[i], merged[i]) for i in ranked[:MAX_COLOURS])


def as_served(pixels: Image.Image) -> Image.Image | None:
    """The RGB pixels a solver sees of an image: FetchImage serves it flattened onto a white page
    (``tool_server.offline.pixels.flattened``), so the observer reads what the expert and a policy read. None when
    its transparent area (alpha under half) covers ``MIN_SHARE``: such an area is the page on the served image, and
    from the pixels alone a person cannot tell the page from a white part of the image (Nepal's pennant on white
    against Japan's white field), so its colours are ambiguous. Until 2026-12-06 the observer read only opaque
    pixels (Nepal: red, blue and white) and FetchImage dropped the alpha channel (black where transparent: "black
    and red"), and the expert rejected every task checked on Nepal's flag."""
    if pixels.has_transparency_data:
        alpha = np.asarray(pixels.convert("RGBA"))[..., 3]
        if (alpha < 128).mean() >= MIN_SHARE:
            return None
    return flattened(pixels)


def rapid_ocr() -> Callable[[bytes], str]:
    """The OCR the pipelines read image text with: PNG bytes -> recognised lines (RapidOCR, loaded on first use)."""
    from tool_server.mei.ocr import OCR

    return OCR().text_sync


class PaletteObserver:
    """Offline observer, no model: image kind from metadata + pixel palette (+ OCR words when ``ocr`` is given).

    ``ocr`` maps PNG bytes to recognised text (:func:`rapid_ocr` is the one we use).
    """

    def __init__(self, ocr: Callable[[bytes], str] | None = None) -> None:
        self._ocr = ocr
        self._wordless: dict[tuple[Path, str], Description | None] = {}

    def describe(self, path: Path, source: str, withheld: Collection[str]) -> Description | None:
        """An image without words has one description whatever is withheld: made once, not on each of the
        millions of calls a run's evidence rules make."""
        kind = IMAGE_KINDS.get(source)
        if kind is None:
            return None
        if (path, kind) in self._wordless:
            return self._wordless[path, kind]
        colours = _palette_of(path)
        words = self.read_text(path)
        description = Description(kind, colours, unnamed(words, withheld)) if colours else None
        if not words:
            self._wordless[path, kind] = description
        return description

    def read_text(self, path: Path) -> tuple[str, ...]:
        """OCR words of the image (none without OCR)."""
        return _ocr_words(self._ocr, path) if self._ocr is not None else ()


@lru_cache(maxsize=8192)
def _palette_of(path: Path) -> tuple[str, ...]:
    """Memoised: the same flag is a distractor for every neighbour of every seed."""
    with Image.open(path) as im:
        return palette(im)


def _ocr_words(ocr: Callable[[bytes], str], path: Path) -> tuple[str, ...]:
    return words_of(ocr(path.read_bytes()))


def words_of(text: str) -> tuple[str, ...]:
    """The words an observer reports from image text: runs of 3+ Latin letters."""
    return tuple(re.findall(r"[A-Za-z]{3,}", text))


def unnamed(words: Iterable[str], withheld: Collection[str]) -> tuple[str, ...]:
    """``words`` minus any word of a withheld name (any case): the description must not name a path entity. The
    withheld names are split only when there are words to check: the synthesizer describes each candidate image
    millions of times a run, almost all of them without image text (a flag), and splitting a structure's names
    on every call took a third of a 60-task run."""
    words = tuple(words)
    if not words:
        return ()
    blocked = {w.lower() for name in withheld for w in _WORD.findall(name)}
    return tuple(w for w in words if w.lower() not in blocked)


_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Grounding:
    """The accepted binding of a checkpoint: which image, the words the question uses, and the distractors it beat."""

    image_id: str
    description: Description
    distractors: int


def ground(
    checkpoint: str,
    candidates: Iterable[str],
    images_of: Callable[[str], list[tuple[str, Path, str]]],
    observer: Observer,
    withheld: Collection[str],
) -> Grounding | None:
    """Accept the first image of ``checkpoint`` whose blind description no other candidate's image also fits under
    a person's reading (:meth:`Description.matches`: colours unordered, near shades merged).

    ``images_of(entity)`` lists ``(image_id, path, source)``. A candidate without an image of the same kind cannot
    match (the question says which kind of image to look at). None: no image of the checkpoint is distinctive.
    """
    others = sorted(set(candidates) - {checkpoint})
    for image_id, path, source in images_of(checkpoint):
        mine = observer.describe(path, source, withheld)
        if mine is None:
            continue
        clash = any(
            mine.matches(observer.describe(p, s, withheld)) for other in others for _, p, s in images_of(other)
            if IMAGE_KINDS.get(s) == mine.kind
        )
        if not clash:
            return Grounding(image_id, mine, len(others))
    return None
