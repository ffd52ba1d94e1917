"""The closed-book probe: what a strong VLM answers with no tool call at all (issue 36; Neos, Sec. 3.3, "filtering
out textual shortcuts", taken one step further than its text-only probe).

Such a model knows textbook geography: it recognises every country's national flag and locator map, so it needs no
search to name the country an entry image shows, nor to tell which country's flag or map fits a checkpoint's colour
words; and it knows each country's capital, currency, official languages, continent and region, demonym and
neighbours, and what each euro country used before the euro (the German mark). :class:`ClosedBookSolver` holds
exactly those facts of the world (``COMMON_RELATIONS``) and solves a
structure as a reader would, from the entry images it recognises through the common facts, narrowing each
checkpoint by the colours of the images it knows. A structure it solves to the answer alone is rejected
(``closed_book``): every task left needs a tool call for at least one fact or image this solver does not hold (a
chemical element's discoverer, a capital's time zone, a language's script, a subdivision's flag, the currency Ghana
used before its current cedi, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from data_gen.kg import KG, Structure
from data_gen.neos.observer import Description
from data_gen.world.properties import FORMER_CURRENCY

# Facts of a country a strong model states without searching, and the reverse reading of each (the country whose
# capital is X). P17 and P131 (a city's country, a subdivision's) are not among them: of a non-capital city or a
# subdivision the model knows too little to single it out.
COMMON_RELATIONS = frozenset({"P36", "P1376", "P38", "P37", "P30", "P361", "P1549", "P47"})
# Images of a country the model recognises: its national flag and its locator maps, labelled or not.
RECOGNISED_SOURCES = frozenset({"flag-icons", "world-atlas", "world-atlas-unlabelled"})
RECOGNISED_KINDS = frozenset({"country"})
# The euro changeover is textbook: a country's former currency is common where its currency is the euro.
EURO = "currency:EUR"


class ClosedBookSolver:
    """``kinds``: entity id -> kind; ``fits(entity, description)``: whether one of the entity's images fits a
    checkpoint's description as a reader reads it (the synthesizer's own reading)."""

    def __init__(self, kg: KG, kinds: Mapping[str, str], fits: Callable[[str, Description], bool]) -> None:
        self.kg = kg
        self.kinds = kinds
        self.fits = fits

    def solves(self, structure: Structure, entry_sources: Mapping[str, str],
               checkpoints: Mapping[str, Description]) -> bool:
        """Whether the answer is the only entity left when the structure is solved from common knowledge alone:
        every anchor recognised from its entry image (``entry_sources``: anchor -> image source), every step a
        common fact, every checkpoint an image the model knows."""
        if any(self.kinds.get(a) not in RECOGNISED_KINDS or entry_sources.get(a) not in RECOGNISED_SOURCES
               for a in structure.anchors):
            return False
        reach: dict[str, set[str]] = {a: {a} for a in structure.anchors}
        for edge in structure.edges:
            if edge.relation not in COMMON_RELATIONS and not self._textbook(edge.relation, edge.forward,
                                                                             reach[edge.source]):
                return False
            step: set[str] = set()
            for s in reach[edge.source]:
                step |= self.kg.objects(s, edge.relation) if edge.forward else self.kg.subjects(edge.relation, s)
            if edge.target in checkpoints:
                if self.kinds.get(edge.target) not in RECOGNISED_KINDS:
                    return False
                step = {c for c in step if self.fits(c, checkpoints[edge.target])}
            reach[edge.target] = reach[edge.target] & step if edge.target in reach else step
        return reach[structure.answer] == {structure.answer}

    def _textbook(self, relation: str, forward: bool, sources: set[str]) -> bool:
        """A step through a fact outside ``COMMON_RELATIONS`` the model still knows from every source it may start
        from: the former currency of euro countries."""
        return relation == FORMER_CURRENCY and forward and all(EURO in self.kg.objects(s, "P38") for s in sources)
