"""The default evidence interface: no model, only lexical ranking and OCR, so the tool server runs anywhere.

- WebVisit: boilerplate lines are dropped, the text is cut into passages (paragraphs; long ones into sentence
  windows), passages are ranked against the goal with BM25 (bm25s) and the best ones are quoted verbatim, in page
  order, as ``evidence``. Page images whose caption/alt (or, failing that, OCR text) share goal terms are returned.
- ImageSearch: relevance from the share ``s`` of goal terms found in a candidate's caption, alt and OCR text:
  ``high`` if s >= 0.5, ``medium`` if s >= 0.25, ``low`` if s > 0, else ``none``; candidates ranked by s.
- ReverseImageSearch: ``match_state`` from the backend's ``match_score``: >= 0.85 ``visual_match``,
  >= 0.6 ``partial_match``, below ``not_match``, no score ``insufficient_evidence``.

OCR runs only when pixels are present and metadata alone did not already decide (a WebVisit image with no goal term
in its caption/alt; an ImageSearch candidate below ``high``). Every ``rational`` says the answer is extractive.
"""

from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN_PLUS

from tool_server.pools import heavy_pool

from .ocr import OCR
from .schema import (
    ImageCandidate,
    ImageSearchEvidence,
    ImageView,
    MatchCandidate,
    PageView,
    RelevantImage,
    ReverseImageEvidence,
    WebVisitEvidence,
)

VERSION = "extractive-1"

HIGH, MEDIUM = 0.5, 0.25
VISUAL_MATCH, PARTIAL_MATCH = 0.85, 0.6
MAX_PAGE_IMAGES = 15  # WebVisit returns at most 15 page-image references (Neos Table 9)

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_STOP = frozenset(STOPWORDS_EN_PLUS)  # the larger list: it has question words, which goals are full of
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_BOILERPLATE = re.compile(
    r"^(skip to (main )?content|jump to (navigation|search|content)|main menu|menu|navigation|search|home|"
    r"log ?in|log ?out|sign (in|up|out)|register|subscribe( now)?|share( this( page| article)?)?|advertisement|"
    r"sponsored( content)?|back to top|cookie (settings|preferences|policy)|privacy( policy)?|"
    r"terms( of (use|service))?|"
    r"(all rights reserved|copyright|©).*|.*\b(accept|allow|use)s? (all )?cookies\b.*)\W*$",
    re.IGNORECASE,
)
# a match starts only where a whitespace run starts: from every space of a long run, "\s+" rescanned the rest of the
# run (a line of 20,000 spaces took 1.9 s of the event loop, and a page's text may hold 200,000)
_NAV_SEPARATORS = re.compile(r"(?<!\s)\s+[|·•»]\s+")


def terms(text: str) -> list[str]:
    """Lower-cased word tokens without English stop words (the same tokens BM25 ranks with)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def is_boilerplate(line: str) -> bool:
    """Navigation, cookie, sharing and footer lines; also menu rows like ``Home | News | Contact``."""
    stripped = line.strip()
    if _BOILERPLATE.match(stripped):
        return True
    parts = _NAV_SEPARATORS.split(stripped)
    return len(parts) >= 3 and all(len(p.split()) <= 3 for p in parts)


def passages(text: str, *, max_chars: int = 600) -> list[str]:
    """Paragraphs (blank-line separated, boilerplate lines removed); longer ones packed into sentence windows."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        kept = " ".join(line.strip() for line in block.splitlines() if line.strip() and not is_boilerplate(line))
        if not kept:
            continue
        if len(kept) <= max_chars:
            out.append(kept)
            continue
        window = ""
        for sentence in _SENTENCE_END.split(kept):
            if window and len(window) + 1 + len(sentence) > max_chars:
                out.append(window)
                window = sentence
            else:
                window = f"{window} {sentence}".strip()
        if window:
            out.append(window)
    return out


def rank_passages(goal_terms: list[str], text: str, top: int) -> tuple[list[str], list[int]]:
    """The page's passages and the indexes of the ``top`` that BM25 scores above 0 for the goal, best first."""
    chunks = passages(text)
    if not goal_terms or not chunks:
        return chunks, []
    retriever = bm25s.BM25()
    retriever.index([terms(c) for c in chunks], show_progress=False)
    scores = np.asarray(retriever.get_scores(goal_terms), dtype=float)
    return chunks, [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0][:top]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class _Overlap:
    matched: frozenset[str]
    share: float
    ocr_text: str


class ExtractiveMEI:
    """Producer of extractive evidence; wrapped by :class:`tool_server.mei.interface.LoggedInterface`."""

    version = VERSION

    def __init__(self, *, ocr: OCR | None = None, top_passages: int = 3, max_evidence_chars: int = 2000) -> None:
        self._ocr = ocr
        self._top = top_passages
        self._max_evidence = max_evidence_chars
        self._ranking: ThreadPoolExecutor | None = None  # started on first use (after a --workers fork)

    async def _ranked(self, goal_terms: list[str], text: str) -> tuple[list[str], list[int]]:
        """:func:`rank_passages` on this producer's pool: ~35 ms for a 200,000-character page, which every session
        waited for when it ran on the event loop."""
        if self._ranking is None:
            self._ranking = heavy_pool("extractive", max(1, (os.cpu_count() or 1) // 2))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._ranking, rank_passages, goal_terms, text, self._top)

    async def _overlap(self, goal_terms: set[str], image: ImageView, *, ocr_unless_share: float) -> _Overlap:
        meta = set(terms(f"{image.caption} {image.alt}"))
        matched = goal_terms & meta
        share = len(matched) / len(goal_terms) if goal_terms else 0.0
        ocr_text = ""
        if self._ocr is not None and image.png is not None and share < ocr_unless_share and goal_terms:
            ocr_text = await self._ocr.text(image.png)
            squashed = re.sub(r"\W+", "", ocr_text.lower())  # OCR often drops spaces between words
            matched = matched | {t for t in goal_terms if len(t) >= 3 and t in squashed}
            share = len(matched) / len(goal_terms)
        return _Overlap(frozenset(matched), share, ocr_text)

    @staticmethod
    def _caption(image: ImageView, ocr_text: str, n: int = 200) -> str:
        caption = image.caption or image.alt
        if ocr_text:
            caption = f"{caption} (text in image: {ocr_text})".strip()
        return _clip(" ".join(caption.split()), n)

    async def web_visit(self, *, goal: str, page: PageView) -> WebVisitEvidence:
        goal_terms = terms(goal)
        chunks, ranked = await self._ranked(goal_terms, page.text)
        if not goal_terms or not chunks:
            why = "the goal has no content words" if not goal_terms else "the page has no body text"
            return WebVisitEvidence(
                rational=f"Extractive evidence (no model): nothing extracted because {why}.",
                evidence="",
                summary="",
                relevant_images=[],
            )
        goal_set = set(goal_terms)
        images: list[tuple[float, RelevantImage]] = []
        for image in page.images:
            ov = await self._overlap(goal_set, image, ocr_unless_share=1e-9)  # OCR only if metadata matched nothing
            if ov.matched:
                caption = self._caption(image, ov.ocr_text)
                images.append((ov.share, RelevantImage(alt=image.alt, url=image.url, caption=caption)))
        images.sort(key=lambda pair: -pair[0])  # stable: page order among equals
        relevant = [img for _, img in images[:MAX_PAGE_IMAGES]]
        if not ranked:
            return WebVisitEvidence(
                rational=(
                    f"Extractive evidence (no model): none of the {len(chunks)} passages of the page contains a goal "
                    "term, so the page gives no direct evidence."
                ),
                evidence="",
                summary="",
                relevant_images=relevant,
            )
        evidence = _clip("\n\n".join(chunks[i] for i in sorted(ranked)), self._max_evidence)
        best = chunks[ranked[0]]
        hit_terms = sorted(goal_set & set(terms(" ".join(chunks[i] for i in ranked))))
        first_sentence = _SENTENCE_END.split(best, maxsplit=1)[0]
        return WebVisitEvidence(
            rational=(
                f"Extractive evidence (no model): the page was split into {len(chunks)} passages and ranked against "
                f"the goal with BM25; the {len(ranked)} best-matching passages are quoted verbatim in page order. "
                f"Goal terms found: {', '.join(hit_terms)}."
            ),
            evidence=evidence,
            summary=_clip(f"{page.title}: {first_sentence}", 300),
            relevant_images=relevant,
        )

    async def image_search(self, *, goal: str, query: str, candidates: list[ImageView]) -> ImageSearchEvidence:
        goal_set = set(terms(goal)) or set(terms(query))
        scored: list[tuple[float, ImageCandidate]] = []
        for index, image in enumerate(candidates):
            ov = await self._overlap(goal_set, image, ocr_unless_share=HIGH)
            s = ov.share
            level = "high" if s >= HIGH else "medium" if s >= MEDIUM else "low" if s > 0 else "none"
            caption = self._caption(image, ov.ocr_text)
            scored.append((s, ImageCandidate(index=index, relevance=level, caption=caption)))
        scored.sort(key=lambda pair: -pair[0])
        return ImageSearchEvidence(
            rational=(
                "Extractive relevance (no model; pixels read only through OCR): share of goal terms found in each "
                f"candidate's caption, alt and OCR text: high >= {HIGH}, medium >= {MEDIUM}, low > 0, none otherwise."
            ),
            candidates=[c for _, c in scored],
        )

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView]
    ) -> ReverseImageEvidence:
        out = []
        for index, image in enumerate(candidates):
            score = image.match_score
            state = (
                "insufficient_evidence"
                if score is None
                else "visual_match"
                if score >= VISUAL_MATCH
                else "partial_match"
                if score >= PARTIAL_MATCH
                else "not_match"
            )
            out.append(MatchCandidate(index=index, match_state=state, caption=self._caption(image, "")))
        return ReverseImageEvidence(
            rational=(
                "Extractive match states (no model) from the reverse-search backend's match scores: visual_match >= "
                f"{VISUAL_MATCH}, partial_match >= {PARTIAL_MATCH}, not_match below, insufficient_evidence "
                "without a score."
            ),
            candidates=out,
        )

    def counters(self) -> dict[str, int]:
        if self._ocr is None:
            return {"ocr_calls": 0, "ocr_disk_hits": 0, "ocr_disk_errors": 0}
        return {"ocr_calls": self._ocr.calls, "ocr_disk_hits": self._ocr.disk_hits,
                "ocr_disk_errors": self._ocr.disk_errors}

    async def close(self) -> None:
        return None
