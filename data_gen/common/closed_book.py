"""What a strong VLM knows with no tool call at all (issue 36), shared by both pipelines' closed-book probes
(``data_gen.neos.closed_book`` rejects the Neos structures it solves; ``data_gen.modalsearch.closed_book`` keeps a
ModalSearch question out of the search-required share when it solves it).

Such a model knows textbook geography: it recognises every country's national flag and locator map, so it needs no
search to name the country an entry image shows, nor to tell which country's flag or map fits a checkpoint's colour
words; and it knows each country's capital, currency, official languages, continent and region, demonym and
neighbours, its calling code, Internet domain and official name, and what each euro country used before the euro
(the German mark). :class:`CommonKnowledge` holds exactly those facts of the world; everything else (a chemical
element's discoverer, a capital's time zone or airport, a language's script, a country's highest or lowest point
where WordNet does not name it, a subdivision's flag, the currency Ghana used before its current cedi, a population
as of a year, ...) needs a tool call.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from data_gen.kg import KG
from data_gen.world.properties import FORMER_CURRENCY

# Facts of a country a strong model states without searching, and the reverse reading of each (the country whose
# capital is X). P17 and P131 (a city's country, a subdivision's) are not among them: of a non-capital city or a
# subdivision the model knows too little to single it out.
COMMON_RELATIONS = frozenset({"P36", "P1376", "P38", "P37", "P30", "P361", "P1549", "P47"})
# Values of a country the model states as well (literals, outside the KG): calling code, Internet domain, official
# name, demonym. A population or an area as of a year is not among them: the figure is the article's.
COMMON_VALUES = frozenset({"P474", "P78", "P1448", "P1549"})
# Images of a country the model recognises: its national flag and its locator maps, labelled or not.
RECOGNISED_SOURCES = frozenset({"flag-icons", "world-atlas", "world-atlas-unlabelled"})
RECOGNISED_KINDS = frozenset({"country"})
# The euro changeover is textbook: a country's former currency is common where its currency is the euro.
EURO = "currency:EUR"


class CommonKnowledge:
    """The world's common-knowledge facts (``kg``) and images; ``kinds``: entity id -> kind."""

    def __init__(self, kg: KG, kinds: Mapping[str, str]) -> None:
        self.kg = kg
        self.kinds = kinds

    def recognises(self, entity: str, source: str | None) -> bool:
        """Whether the model names ``entity`` from its image of ``source`` at sight."""
        return self.kinds.get(entity) in RECOGNISED_KINDS and source in RECOGNISED_SOURCES

    def step(self, sources: Set[str], relation: str, forward: bool) -> set[str] | None:
        """The entities one ``relation`` fact leads to from ``sources`` (``forward``: sources are its subjects);
        None when the model does not know that fact of every source."""
        if relation not in COMMON_RELATIONS and not self._textbook(relation, forward, sources):
            return None
        reached: set[str] = set()
        for s in sources:
            reached |= self.kg.objects(s, relation) if forward else self.kg.subjects(relation, s)
        return reached

    def knows_value(self, entity: str, relation: str) -> bool:
        """Whether the model states the literal ``relation`` value of ``entity`` (a country's calling code)."""
        return relation in COMMON_VALUES and self.kinds.get(entity) in RECOGNISED_KINDS

    def knows(self, entity: str, relation: str, literal: bool) -> bool:
        """Whether the model states ``entity``'s ``relation`` fact, a value or an entity, without a search."""
        return self.knows_value(entity, relation) if literal else self.step({entity}, relation, True) is not None

    def _textbook(self, relation: str, forward: bool, sources: Set[str]) -> bool:
        """A fact outside ``COMMON_RELATIONS`` the model still knows of every source it may start from: the former
        currency of euro countries."""
        return relation == FORMER_CURRENCY and forward and all(EURO in self.kg.objects(s, "P38") for s in sources)
