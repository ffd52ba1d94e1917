"""The one :class:`EvidenceInterface` implementation: times, logs and counts every call of an evidence producer.

Producers (:class:`.extractive.ExtractiveMEI`, :class:`.client.ModelMEI`) only compute evidence; keeping logging
here means a call is logged exactly once, whichever producer (or fallback inside it) answered.

Versions (Neos §3.5: the MEI version is fixed within a trajectory): :attr:`LoggedInterface.version` is the active
version, the one new sessions are fixed to. It is set when a checkpoint is activated (:meth:`activate`, the tool
server's ``POST /admin/mei_version``), else it is the configured one, else the first version a model server reports.
A call carries its session's version in ``ctx.mei_version``; a model answer reported under another version is
refused (``mei_version_changed``, logged as an ``error`` and counted as ``version_mismatch``), so a trajectory's calls
never span two versions. A fallback answer is recorded under the session's version with outcome ``fallback``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Generic, Protocol, get_args

from ..errors import ToolError
from .log import MEILog, image_summary, page_summary
from .schema import (
    E,
    ImageSearchEvidence,
    ImageView,
    MEICall,
    MEIContext,
    Outcome,
    PageView,
    ReverseImageEvidence,
    WebVisitEvidence,
)


@dataclass(frozen=True, slots=True)
class Produced(Generic[E]):
    evidence: E
    outcome: Outcome
    attempts: list[str]
    messages: list[dict] | None = None  # what a model was sent (logged so the call can become an SFT example)
    version: str | None = None  # the version that served it, as its server reported it; None: the producer's


class Producer(Protocol):
    version: str

    async def web_visit(self, *, goal: str, page: PageView) -> Produced[WebVisitEvidence] | WebVisitEvidence: ...

    async def image_search(
        self, *, goal: str, query: str, candidates: list[ImageView]
    ) -> Produced[ImageSearchEvidence] | ImageSearchEvidence: ...

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView]
    ) -> Produced[ReverseImageEvidence] | ReverseImageEvidence: ...

    def counters(self) -> dict[str, int]: ...

    async def close(self) -> None: ...


class LoggedInterface:
    """``counters()``: ``calls``, one count per final outcome, ``error``, plus the producer's own counters."""

    def __init__(self, producer: Producer, log: MEILog, *, version: str | None = None, model: bool = False) -> None:
        self._producer = producer
        self.interface = "model" if model else "extractive"  # what answers: a trainable MEI, or the rule-based one
        self._log = log
        self._outcomes: Counter[str] = Counter()
        self._active = version
        self._activations = 0

    @property
    def version(self) -> str | None:
        """The active version: new sessions are fixed to it."""
        return self._active

    def activate(self, version: str) -> None:
        """A checkpoint was activated behind the producer: sessions created from now on use ``version``."""
        if not isinstance(version, str) or not version:
            raise ValueError(f"an MEI version is a non-empty string, got {version!r}")
        self._active = version
        self._activations += 1

    def _version_of(self, ctx: MEIContext) -> str:
        """The version a call is recorded under when no server reported one: the session's, else the active one."""
        return ctx.mei_version or self._active or self._producer.version

    async def _run(self, method: str, ctx: MEIContext, summary: dict, call) -> MEICall:
        start = time.perf_counter()
        try:
            produced = await call
        except Exception as e:
            self._outcomes["error"] += 1
            self._log.append(ctx=ctx, method=method, mei_version=self._version_of(ctx), outcome="error",
                             latency_s=time.perf_counter() - start, input=summary,
                             output={"error": f"{type(e).__name__}: {e}"})
            raise
        if not isinstance(produced, Produced):  # the extractive producer returns bare evidence
            produced = Produced(produced, "extractive", [])
        version = produced.version or self._version_of(ctx)
        if produced.outcome == "fallback":
            version = ctx.mei_version or version  # no model answer: the session's version; the outcome says the rest
        elif ctx.mei_version is not None and version != ctx.mei_version:
            self._outcomes["version_mismatch"] += 1
            message = f"the MEI answered as {version}, this session is fixed to {ctx.mei_version}"
            self._log.append(ctx=ctx, method=method, mei_version=version, outcome="error",
                             latency_s=time.perf_counter() - start, input=summary,
                             output={"error": f"version_mismatch: {message}"})
            raise ToolError("mei_version_changed", message)
        if self._active is None:
            self._active = version  # the first version a model server reported
        self._outcomes[produced.outcome] += 1
        call_id = self._log.append(
            ctx=ctx, method=method, mei_version=version, outcome=produced.outcome,
            latency_s=time.perf_counter() - start, input=summary,
            output=produced.evidence.model_dump(mode="json"), attempts=produced.attempts, messages=produced.messages,
        )
        return MEICall(produced.evidence, call_id, version, produced.outcome)

    async def web_visit(self, *, goal: str, page: PageView, ctx: MEIContext) -> MEICall[WebVisitEvidence]:
        summary = {"goal": goal, "page": page_summary(page)}
        return await self._run("web_visit", ctx, summary, self._producer.web_visit(goal=goal, page=page))

    async def image_search(
        self, *, goal: str, query: str, candidates: list[ImageView], ctx: MEIContext
    ) -> MEICall[ImageSearchEvidence]:
        summary = {"goal": goal, "query": query, "candidates": [image_summary(c) for c in candidates]}
        call = self._producer.image_search(goal=goal, query=query, candidates=candidates)
        return await self._run("image_search", ctx, summary, call)

    async def reverse_image_search(
        self, *, goal: str, query_image: ImageView, candidates: list[ImageView], ctx: MEIContext
    ) -> MEICall[ReverseImageEvidence]:
        summary = {"goal": goal, "query_image": image_summary(query_image),
                   "candidates": [image_summary(c) for c in candidates]}
        call = self._producer.reverse_image_search(goal=goal, query_image=query_image, candidates=candidates)
        return await self._run("reverse_image_search", ctx, summary, call)

    def counters(self) -> dict[str, int]:
        outcomes = {k: self._outcomes[k] for k in (*get_args(Outcome), "error")}
        return {"calls": sum(outcomes.values()), **outcomes, "version_mismatch": self._outcomes["version_mismatch"],
                "activations": self._activations, **self._producer.counters()}

    async def close(self) -> None:
        await self._producer.close()
        self._log.close()
