"""Fact lines: a page states the facts that later adapters add about its entity.

An adapter writes the pages of its own entities; a fact it adds about another adapter's entity (a country's national
dish, a capital's time zone, a language's script) is stated only on its own page ("According to country-json, Dal
bhat is the national dish of Nepal."). Mention linking then links the dish's page to the country's, never the
country's to the dish's, so a reader (and ModalSearch's graph, which follows page links) starting at the country
never reaches the dish, and the country's page gives no evidence sentence for "the national dish of Nepal". The
builder therefore appends one line per such relation to the subject's page, in the style of the countries' facts
paragraph: ``National dish: Dal bhat.`` The object is named by its page title ("Latin script", not the label
"Latin", which the Latin language's page shares and so links neither). An airport's adapter gives the airport's page
and the fact ``(airport, P931, city)``: the line goes on the object's page instead, the city's (``Airport, the transport
hub that serves it: Lengpui Airport.``), so a reader at the capital finds its airport; likewise a division's country
(``Administrative territorial entities located in it: ...``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from data_gen.world.adapters._prose import join_list
from data_gen.world.properties import (
    AIRPORT_CITY,
    FORMER_CURRENCY,
    HIGHEST_POINT,
    LOWEST_POINT,
    MAIN_RELIGION,
    NATIONAL_DISH,
    TIME_ZONE,
    WRITING_SYSTEM,
)
from neos_core.world.model import Entity, Page, Relation, Triple

# Relations whose adapter adds the fact to an entity another adapter gives the page of.
STATED_ON_SUBJECT = (NATIONAL_DISH, MAIN_RELIGION, FORMER_CURRENCY, TIME_ZONE, WRITING_SYSTEM, HIGHEST_POINT,
                     LOWEST_POINT)
# Relations whose adapter gives the subject's page: the line goes on the object's page, under this heading (in the
# relation label's words, which a goal-directed page visit ranks by). A country's page lists its divisions
# (KGeography's, the U.S. states): "the region of Japan whose flag is ..." is read from Japan's page, not found by a
# search that the pages naming Japan crowd.
STATED_ON_OBJECT = {AIRPORT_CITY: "airport, the transport hub that serves it",
                    "P131": "administrative territorial entities located in it"}


def state_facts(pages: Mapping[str, Page], entities: Mapping[str, Entity], triples: Iterable[Triple],
                relations: Mapping[str, Relation]) -> int:
    """Append the fact lines to the subjects' pages (the objects' for ``STATED_ON_OBJECT``; in place, in the tables'
    order); returns how many lines were written. A fact whose subject or object has no page is left out: there is no
    page to state it on, or none to name."""
    order = [*STATED_ON_SUBJECT, *STATED_ON_OBJECT]
    titles: dict[tuple[str, str], list[str]] = defaultdict(list)  # (page stating it, relation) -> named page titles
    for t in triples:
        if t.literal or t.p not in order:
            continue
        subject, obj = entities.get(t.s), entities.get(t.o)
        if subject is None or obj is None or subject.page_id not in pages or obj.page_id not in pages:
            continue
        on, named = (obj, subject) if t.p in STATED_ON_OBJECT else (subject, obj)
        titles[(on.page_id, t.p)].append(pages[named.page_id].title)
    for (page_id, relation), names in sorted(titles.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        label = STATED_ON_OBJECT.get(relation) or relations[relation].label
        pages[page_id].text += f" {label[:1].upper()}{label[1:]}: {join_list(sorted(set(names)))}."
    return len(titles)
