"""BM25 (bm25s) over world pages and world images, built once at startup.

Each index is a weighted sum of per-field BM25 scores, so a match in a short, telling field (a page title, an image
caption) is not drowned by a long body: pages score ``BM25(title) + BM25(text)``; images score
``BM25(caption, alt, source title) + 0.3 * BM25(source page lead)``, for the query plus ``0.5 x`` the same for the goal
(the query says what to find, the goal what it is for).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from neos_core.world.model import Image, Page

_TOKEN = re.compile(r"\w\w+")
_STOP = frozenset(STOPWORDS_EN)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
GOAL_WEIGHT = 0.5
PAGE_LEAD_CHARS = 300
CONTEXT_WEIGHT = 0.3
SNIPPET_MEMO_TEXTS = 16_384  # pages whose split sentences stay memoised (a few KiB each; full world: 67k pages)


def tokens(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return [t for t in _TOKEN.findall(folded) if t not in _STOP]


@lru_cache(maxsize=SNIPPET_MEMO_TEXTS)
def _sentence_terms(text: str) -> tuple[list[str], dict[str, tuple[int, ...]]]:
    """A text's sentences (whitespace runs made single spaces), and for each token the sentences holding it.
    Memoised: tokenizing the sentences of every hit page again on every query was half the cost of a search; page
    texts are the same objects each time, so a lookup is one hash."""
    sentences = [" ".join(s.split()) for s in _SENTENCE.split(text) if s.strip()] or [" ".join(text.split())]
    where: dict[str, list[int]] = {}
    for i, sentence in enumerate(sentences):
        for token in set(tokens(sentence)):
            where.setdefault(token, []).append(i)
    return sentences, {t: tuple(ix) for t, ix in where.items()}


def snippet(text: str, query_terms: set[str], max_chars: int = 240) -> str:
    """The page sentence sharing most query terms (first sentence on ties or no overlap), clipped."""
    sentences, where = _sentence_terms(text)
    shared: dict[int, int] = {}
    for term in query_terms:
        for i in where.get(term, ()):
            shared[i] = shared.get(i, 0) + 1
    best = sentences[min(shared, key=lambda i: (-shared[i], i))] if shared else sentences[0]
    return best if len(best) <= max_chars else best[: max_chars - 1].rstrip() + "…"


class _Fields:
    """Weighted sum of BM25 scores over several fields of the same documents."""

    def __init__(self, fields: list[tuple[float, list[list[str]]]]) -> None:
        self._fields = [(w, _BM25(docs)) for w, docs in fields]

    def scores(self, query: list[str]) -> np.ndarray:
        return sum(w * index.scores(query) for w, index in self._fields)


class _BM25:
    def __init__(self, docs: list[list[str]]) -> None:
        self._n = len(docs)
        self._bm25 = bm25s.BM25()
        # bm25s cannot index an empty document list or empty documents; a placeholder token keeps indices aligned
        self._bm25.index([d or ["\x00"] for d in docs] or [["\x00"]], show_progress=False)

    def scores(self, query: list[str]) -> np.ndarray:
        """bm25s' scores (``get_scores``), summed with one ``bincount`` over the query tokens' postings instead of
        bm25s' ``np.add.at`` per token, which was the larger half of a search's cost."""
        ids = self._bm25.get_tokens_ids(query) if query and self._n else []
        if not ids:
            return np.zeros(self._n, np.float32)
        index = self._bm25.scores  # per token, its documents (indices) and their BM25 term scores (data)
        spans = [slice(index["indptr"][t], index["indptr"][t + 1]) for t in ids]
        docs = np.concatenate([index["indices"][s] for s in spans])
        weights = np.concatenate([index["data"][s] for s in spans])
        return np.bincount(docs, weights=weights, minlength=self._n)[: self._n].astype(np.float32)


def _top(scores: np.ndarray, k: int) -> list[int]:
    hits = np.flatnonzero(scores > 0)
    order = hits[np.lexsort((hits, -scores[hits]))]  # score desc, then index for determinism
    return [int(i) for i in order[:k]]


@dataclass(frozen=True, slots=True)
class TextHit:
    page: Page
    score: float
    snippet: str


class PageIndex:
    def __init__(self, pages: list[Page]) -> None:
        self._pages = pages
        self._bm25 = _Fields([(1.0, [tokens(p.title) for p in pages]), (1.0, [tokens(p.text) for p in pages])])

    def search(self, query: str, k: int = 10) -> list[TextHit]:
        q = tokens(query)
        scores, terms = self._bm25.scores(q), set(q)
        return [TextHit(self._pages[i], float(scores[i]), snippet(self._pages[i].text, terms)) for i in _top(scores, k)]


class ImageIndex:
    def __init__(self, images: list[Image], pages: dict[str, Page]) -> None:
        self._images = images
        meta, context = [], []
        for im in images:
            page = pages.get(im.page_id) if im.page_id else None
            meta.append(tokens(f"{im.caption} {im.alt} {page.title if page else ''}"))
            context.append(tokens(page.text[:PAGE_LEAD_CHARS]) if page else [])
        self._bm25 = _Fields([(1.0, meta), (CONTEXT_WEIGHT, context)])

    def search(self, query: str, goal: str, k: int = 5) -> list[Image]:
        scores = self._bm25.scores(tokens(query)) + GOAL_WEIGHT * self._bm25.scores(tokens(goal))
        return [self._images[i] for i in _top(scores, k)]
