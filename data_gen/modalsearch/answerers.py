"""The answer-verification model M_v of App. A.6, offline: **programmatic answerers, no model**, named as such.

- :class:`PriorAnswerer` is the closed-book answerer for text terminal questions: it sees only the question's
  relation and answers with the value that relation most often takes in the world (a parametric-knowledge
  stand-in: it knows the distribution, not the article). Candidates it answers correctly are removed.
- :class:`PixelAnswerer` answers visual questions about an image it can see: it reads the named-colour palette
  of the pixels (``data_gen.neos.observer.colour_shares``) at the trial's reading size (``READ_SIDES``, one per trial),
  so ``C_with = T`` requires an answer stable across resolutions.
- :class:`BlindImageAnswerer` gets the same question without the image: it answers with the most frequent answer
  over world images of the same kind (a fixed sample of ``PRIOR_SAMPLE``, ordered by id hash; reading every
  image's pixels costs seconds per kind). Deterministic, so ``C_without`` is 0 or ``T``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from PIL import Image as PILImage

from data_gen.common.export import hash_unit
from data_gen.neos.observer import IMAGE_KINDS, colour_shares
from neos_core.world.store import World

T = 3
PRIOR_SAMPLE = 40
READ_SIDES = (48, 64, 96)  # one reading size per trial

# A rank by area is only an answer when a person sees it: its share differs from its neighbours' by this much
# (France's three equal stripes have no largest colour).
AREA_MARGIN = 0.03
Shares = tuple[tuple[str, float], ...]


def rank(shares: Shares, i: int) -> str | None:
    """The colour at rank ``i`` (negative from the end) when its area stands apart from its neighbours'."""
    if not -len(shares) <= i < len(shares):
        return None
    i %= len(shares)
    share = shares[i][1]
    neighbours = [shares[j][1] for j in (i - 1, i + 1) if 0 <= j < len(shares)]
    return shares[i][0] if all(abs(share - n) >= AREA_MARGIN for n in neighbours) else None


# A visual question: (id, question template with {REF}, answer from the colour shares or None when it does not apply)
VisualAsk = tuple[str, str, Callable[[Shares], str | None]]
VISUAL_QUESTIONS: tuple[VisualAsk, ...] = (
    ("colour_1", "Which colour covers the largest area of {REF}?", lambda p: rank(p, 0)),
    ("colour_2", "Which colour covers the second-largest area of {REF}?", lambda p: rank(p, 1)),
    ("colour_3", "Which colour covers the third-largest area of {REF}?", lambda p: rank(p, 2)),
    ("colour_last", "Of the colours that each cover at least 6% of {REF}, which covers the least area?",
     lambda p: rank(p, -1) if len(p) > 1 else None),
    ("colour_count", "How many colours each cover at least 6% of {REF}?", lambda p: str(len(p)) if p else None),
)


@lru_cache(maxsize=16384)
def read_palette(path: Path, side: int) -> Shares:
    with PILImage.open(path) as im:
        small = im.convert("RGBA")
        small.thumbnail((side, side))
        return colour_shares(small)


class PixelAnswerer:
    name = "programmatic_pixel_reader"

    def answer(self, path: Path, ask: VisualAsk, trial: int) -> str | None:
        return ask[2](read_palette(path, READ_SIDES[trial % len(READ_SIDES)]))


class BlindImageAnswerer:
    name = "programmatic_blind_prior"

    def __init__(self, world: World) -> None:
        self.world = world
        self._modes: dict[tuple[str, str], str | None] = {}

    def answer(self, image_kind: str, ask: VisualAsk) -> str | None:
        key = (image_kind, ask[0])
        if key not in self._modes:
            same = sorted((im.id for im in self.world.images.values() if IMAGE_KINDS.get(im.source) == image_kind),
                          key=lambda i: hash_unit(f"prior:{i}"))[:PRIOR_SAMPLE]
            answers = Counter(a for i in same
                              if (a := ask[2](read_palette(self.world.image_path(i), READ_SIDES[-1]))) is not None)
            self._modes[key] = answers.most_common(1)[0][0] if answers else None
        return self._modes[key]


class PriorAnswerer:
    name = "programmatic_closed_book_prior"

    def __init__(self, world: World) -> None:
        values: dict[str, Counter[str]] = {}
        for t in world.triples:
            label = t.o if t.literal else (world.entities[t.o].label if t.o in world.entities else t.o)
            values.setdefault(t.p, Counter())[label] += 1
        self._mode = {p: c.most_common(1)[0][0] for p, c in values.items()}

    def answer(self, relation: str) -> str | None:
        return self._mode.get(relation)
