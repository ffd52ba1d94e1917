"""What the tools hand to an evidence interface, and the JSON it must answer with (Neos Appendix F, Figs 15-17).

The output models are strict (extra keys forbidden) because a model-backed MEI's answer is validated against them
before it reaches the policy; anything that does not validate goes through repair, retry, then the extractive
fallback. Both the model-backed and the extractive interface implement :class:`EvidenceInterface`.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- inputs -------------------------------------------------------------------------------------------------------
class ImageView(_Strict):
    """An image as the tool sees it: URL, metadata and (optionally) PNG bytes for pixel-grounded analysis."""

    url: str
    caption: str = ""
    alt: str = ""
    source_page_url: str | None = None
    png: bytes | None = Field(default=None, repr=False)


class PageView(_Strict):
    url: str
    title: str
    text: str
    images: list[ImageView] = []


class MEIContext(_Strict):
    """Where a call came from, so every MEI call can be joined to its trajectory and turn later (Neos §3.5)."""

    session_id: str
    turn: int | None = None
    tool: Literal["WebVisit", "ImageSearch", "ReverseImageSearch", "read_url", "t2i_search", "i2i_search"]


# ---- outputs (exact keys of the paper's MEI prompts) --------------------------------------------------------------
class RelevantImage(_Strict):
    alt: str
    url: str
    caption: str


class WebVisitEvidence(_Strict):
    rational: str
    evidence: str
    summary: str
    relevant_images: list[RelevantImage]


class ImageCandidate(_Strict):
    index: int = Field(ge=0)
    relevance: Literal["high", "medium", "low", "none"]
    caption: str


class ImageSearchEvidence(_Strict):
    rational: str
    candidates: list[ImageCandidate]


class MatchCandidate(_Strict):
    index: int = Field(ge=0)
    match_state: Literal["visual_match", "partial_match", "not_match", "insufficient_evidence"]
    caption: str


class ReverseImageEvidence(_Strict):
    rational: str
    candidates: list[MatchCandidate]


class EvidenceInterface(Protocol):
    """Implemented by the extractive default (no model) and by the OpenAI-compatible model client."""

    version: str

    async def web_visit(self, *, goal: str, page: PageView, ctx: MEIContext) -> WebVisitEvidence: ...

    async def image_search(
        self, *, goal: str, query: str, candidates: list[ImageView], ctx: MEIContext
    ) -> ImageSearchEvidence: ...

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView], ctx: MEIContext
    ) -> ReverseImageEvidence: ...
