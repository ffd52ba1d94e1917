"""What the tools hand to an evidence interface, and the JSON it must answer with (Neos Appendix F, Figs 15-17).

The output models are strict (extra keys forbidden) because a model-backed MEI's answer is validated against them
before it reaches the policy; anything that does not validate goes through repair, retry, then the extractive
fallback. Both the model-backed and the extractive interface implement :class:`EvidenceInterface`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

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
    # Similarity in [0, 1] between this candidate and the query image, computed by the reverse-search backend;
    # the extractive MEI maps it to a match_state (None: the backend could not compare -> insufficient_evidence).
    match_score: float | None = Field(default=None, ge=0.0, le=1.0)


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
    mei_version: str | None = None  # the version fixed for the session; None: not known yet (its first answer fixes it)


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


Outcome = Literal["extractive", "valid", "repaired", "retried", "fallback"]
E = TypeVar("E", WebVisitEvidence, ImageSearchEvidence, ReverseImageEvidence)


@dataclass(frozen=True, slots=True)
class MEICall(Generic[E]):
    """One logged MEI call: the evidence plus what the tool must hand back to the client (``call_id``, ``version``).

    Returned by value rather than kept as per-session "last call" state because one tool call may run several MEI
    calls concurrently under the same context (ImageSearch with several queries, WebVisit with several URLs).
    """

    evidence: E
    call_id: str
    version: str
    outcome: Outcome


class EvidenceInterface(Protocol):
    """Implemented by the extractive default (no model) and by the OpenAI-compatible model client."""

    version: str | None  # the active version new sessions are fixed to (None: a model MEI not heard from yet)

    def activate(self, version: str) -> None: ...

    async def web_visit(self, *, goal: str, page: PageView, ctx: MEIContext) -> MEICall[WebVisitEvidence]: ...

    async def image_search(
        self, *, goal: str, query: str, candidates: list[ImageView], ctx: MEIContext
    ) -> MEICall[ImageSearchEvidence]: ...

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView], ctx: MEIContext
    ) -> MEICall[ReverseImageEvidence]: ...

    def counters(self) -> dict[str, int]: ...

    async def close(self) -> None: ...
