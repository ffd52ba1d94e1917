"""Retrievability-aware visual expansion (App. A.1, Eq. 3): chunks of w(a) that describe visual content -> at most 5
image descriptions -> a referential-stability screen -> image search -> the retrievability rule with a consistency
judgment -> a t2i edge to a stably retrievable image, or an ambiguous image node with no t2i in-edge.

Offline defaults, **no model**, each named as such:

- :class:`OfflineVisualProposer`: a chunk is a sentence of the article or one of its figure captions/alt texts; it
  describes retrievable visual content when it names a visual kind the world holds (flag, map, logo, pictured
  stamp); the description is the caption/alt itself when it names the article's subject, else
  "<kind> of <subject>".
- :func:`offline_stability_screen`: a description is referentially stable when it names the subject (a specific
  referent) and a concrete visual kind; generic ones ("a picture") are dropped before search.
- :class:`OfflineConsistencyJudge`: two results show the same main visual content when they are the same image or
  images of the same kind whose blind descriptions (``data_gen.neos.observer.PaletteObserver``: kind + pixel
  palette) are equal; the judgment is positive when the chosen image is of the described kind and its source page is
  the article's or its caption names the subject.

**Searchers.** The paper takes ``K_img = 3`` results of one web image search per description; on the web the same
picture comes back from several sites, which is what ``M(d)`` counts. The world holds one copy of each picture, so one
result list can never hold two copies. Offline, ``K_img = 3`` searchers (the description as written, the subject
with the kind noun, and the chunk's own words) each contribute their top result through the real image search
backend (the tool server's ``t2i_search``): ``N(d)`` counts the valid results (query-matched: the metadata names the
subject; accessible: a world image), ``M(d)`` those showing the same content as the node (the most frequent valid
result). The rule itself (:func:`stably_retrievable`) is the paper's.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from data_gen.common.episode import found
from data_gen.modalsearch.graph import Relation
from data_gen.neos.observer import IMAGE_KINDS, PaletteObserver
from neos_core.world.model import Image, Page
from neos_core.world.store import World
from verl_ext.tools.client import ToolServerClient

K_IMG = 3
MAX_PROPOSALS = 5
# chunk word -> the image kinds (data_gen.neos.observer.IMAGE_KINDS values) it can mean
VISUAL_WORDS: dict[str, tuple[str, ...]] = {
    "flag": ("national flag", "flag"), "map": ("locator map",), "logo": ("logo",), "stamp": ("picture",),
    "pictured": ("picture",), "pictures": ("picture",),
}
_KIND_NOUN = {"national flag": "flag", "flag": "flag", "locator map": "map", "logo": "logo", "picture": "picture"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def stably_retrievable(n: int, m: int) -> bool:
    """Eq. 3: ``N(d) >= 2`` and ``M(d) >= max(2, ceil(N(d) / 2))``."""
    return n >= 2 and m >= max(2, math.ceil(n / 2))


@dataclass(frozen=True, slots=True)
class Proposal:
    description: str
    kinds: tuple[str, ...]  # image kinds the description can mean
    chunk: str


@dataclass(frozen=True, slots=True)
class ImageHit:
    url: str
    caption: str
    alt: str
    page_url: str | None
    page_title: str | None


class ImageSearch(Protocol):
    async def search(self, query: str) -> list[ImageHit]: ...


class ToolServerImageSearch:
    """The real image search backend: ``t2i_search`` of a running tool server, one session for the whole build."""

    def __init__(self, client: ToolServerClient) -> None:
        self.client = client
        self.session_id: str | None = None
        self.calls = 0

    async def search(self, query: str) -> list[ImageHit]:
        if self.session_id is None:
            self.session_id = (await self.client.open_session([])).session_id
        self.calls += 1
        result = await self.client.call(self.session_id, "t2i_search", {"query": query}, turn=0)
        return [ImageHit(r["url"], r.get("caption") or "", r.get("alt") or "", r.get("page_url"), r.get("page_title"))
                for r in result.records]

    async def close(self) -> None:
        if self.session_id is not None:
            await self.client.close_session(self.session_id)
            self.session_id = None


class OfflineVisualProposer:
    """Chunks naming a visual kind -> descriptions; see the module docstring. No model."""

    name = "offline_visual_chunk_proposer"

    def __init__(self, world: World) -> None:
        self.world = world

    def propose(self, page: Page) -> list[Proposal]:
        figures = [t for i in page.image_ids if i in self.world.images
                   and self.world.images[i].entity_id == page.entity_id  # another's figure: figure_relations
                   for t in (self.world.images[i].alt, self.world.images[i].caption) if t]
        out: dict[str, Proposal] = {}
        for chunk in [*figures, *_SENTENCE.split(page.text)]:
            words = {w.lower() for w in re.findall(r"[A-Za-z]+", chunk)}
            kinds = tuple(dict.fromkeys(k for w in sorted(words & VISUAL_WORDS.keys()) for k in VISUAL_WORDS[w]))
            if not kinds:
                continue
            named = found(page.title, chunk)
            description = chunk.strip() if named and len(chunk) <= 120 else f"{_KIND_NOUN[kinds[0]]} of {page.title}"
            out.setdefault(description, Proposal(description, kinds, chunk.strip()))
            if len(out) == MAX_PROPOSALS:
                break
        return list(out.values())


def figure_relations(world: World, page: Page) -> list[tuple[Image, Relation]]:
    """The images ``page`` shows of other entities (a state's page shows its country's flag), each as a t2i relation
    "is the <kind> shown on the page of {x}": read on the page itself, no image search. Unique when no other image on
    the page is of that kind; the page's own images are found by search (``assess``)."""
    shown = [world.images[i] for i in page.image_ids if i in world.images]
    kinds = Counter(IMAGE_KINDS.get(i.source, "image") for i in shown)
    out = []
    for image in shown:
        if image.entity_id is None or image.entity_id == page.entity_id:
            continue
        kind = IMAGE_KINDS.get(image.source, "image")
        out.append((image, Relation(f"is the {kind} shown on the page of {{x}}", unique=kinds[kind] == 1,
                                    source="page_figure")))
    return out


def offline_stability_screen(proposal: Proposal, subject: str) -> bool:
    """Specific referent (names the subject) and a concrete visual kind. No model."""
    return bool(proposal.kinds) and found(subject, proposal.description)


def searcher_queries(proposal: Proposal, subject: str) -> list[str]:
    """The ``K_img`` offline searchers' queries (see the module docstring)."""
    chunk_words = " ".join(w for w in re.findall(r"[A-Za-z]{3,}", proposal.chunk))[:200]
    queries = [proposal.description, f"{subject} {_KIND_NOUN[proposal.kinds[0]]}", chunk_words or subject]
    return queries[:K_IMG]


@dataclass(frozen=True, slots=True)
class Retrievability:
    n: int
    m: int
    node: Image | None  # the image the description lands on (most frequent valid result)
    consistent: bool  # the consistency judgment
    stable: bool


class OfflineConsistencyJudge:
    """Same-content and positive-judgment rules of the module docstring, from pixels and metadata. No model."""

    name = "offline_palette_consistency_judge"

    def __init__(self, world: World) -> None:
        self.world = world
        self._observer = PaletteObserver()

    def same_content(self, a: Image, b: Image) -> bool:
        if a.id == b.id:
            return True
        if IMAGE_KINDS.get(a.source) != IMAGE_KINDS.get(b.source):
            return False
        return self._describe(a) == self._describe(b) is not None

    def positive(self, image: Image, proposal: Proposal, page: Page) -> bool:
        return IMAGE_KINDS.get(image.source) in proposal.kinds and (
            image.page_id == page.id or found(page.title, image.caption))

    def _describe(self, image: Image):
        return self._observer.describe(self.world.image_path(image.id), image.source, ())


async def assess(proposal: Proposal, page: Page, search: ImageSearch, judge: OfflineConsistencyJudge,
                 world: World) -> Retrievability:
    """Run the searchers, count ``N(d)`` and ``M(d)``, judge consistency and apply Eq. 3."""
    results = await asyncio.gather(*(search.search(q) for q in searcher_queries(proposal, page.title)))
    valid = [world.image_by_url[h.url] for hits in results for h in hits[:1]
             if h.url in world.image_by_url and _query_matched(h, page.title)]
    if not valid:
        return Retrievability(0, 0, None, False, False)
    node = world.images[Counter(i.id for i in valid).most_common(1)[0][0]]
    m = sum(1 for i in valid if judge.same_content(node, i))
    consistent = judge.positive(node, proposal, page)
    return Retrievability(len(valid), m, node, consistent, consistent and stably_retrievable(len(valid), m))


def _query_matched(hit: ImageHit, subject: str) -> bool:
    return any(found(subject, t) for t in (hit.caption, hit.alt, hit.page_title or "") if t)

