"""The Neos closed-book probe: what a strong VLM answers with no tool call at all (issue 36; Neos, Sec. 3.3,
"filtering out textual shortcuts", taken one step further than its text-only probe).

:class:`ClosedBookSolver` solves a structure as a reader would, with what ``data_gen.common.closed_book`` says such a
model knows: from the entry images it recognises through the common facts, narrowing each checkpoint by the colours
of the images it knows. A structure it solves to the answer alone is rejected (``closed_book``): every task left
needs a tool call for at least one fact or image the model does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from data_gen.common.closed_book import RECOGNISED_KINDS, CommonKnowledge
from data_gen.kg import KG, Structure
from data_gen.neos.observer import Description


class ClosedBookSolver:
    """``kinds``: entity id -> kind; ``fits(entity, description)``: whether one of the entity's images fits a
    checkpoint's description as a reader reads it (the synthesizer's own reading)."""

    def __init__(self, kg: KG, kinds: Mapping[str, str], fits: Callable[[str, Description], bool]) -> None:
        self.knowledge = CommonKnowledge(kg, kinds)
        self.kinds = kinds
        self.fits = fits

    def solves(self, structure: Structure, entry_sources: Mapping[str, str],
               checkpoints: Mapping[str, Description]) -> bool:
        """Whether the answer is the only entity left when the structure is solved from common knowledge alone:
        every anchor recognised from its entry image (``entry_sources``: anchor -> image source), every step a
        common fact, every checkpoint an image the model knows."""
        if not all(self.knowledge.recognises(a, entry_sources.get(a)) for a in structure.anchors):
            return False
        reach: dict[str, set[str]] = {a: {a} for a in structure.anchors}
        for edge in structure.edges:
            step = self.knowledge.step(reach[edge.source], edge.relation, edge.forward)
            if step is None:
                return False
            if edge.target in checkpoints:
                if self.kinds.get(edge.target) not in RECOGNISED_KINDS:
                    return False
                step = {c for c in step if self.fits(c, checkpoints[edge.target])}
            reach[edge.target] = reach[edge.target] & step if edge.target in reach else step
        return reach[structure.answer] == {structure.answer}
