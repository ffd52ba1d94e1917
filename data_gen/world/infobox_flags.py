"""Infobox flags: a subdivision's page shows its country's national flag, a subdivision capital's page its
subdivision's flag.

A real article on a state carries the flag of the country it lies in (the infobox's "Country" row), and one on a
state capital the state's flag (its "State" row); an adapter gives only its own entities' images, so the builder adds
the flag (the ``flag-icons`` or KGeography image, caption "Flag of Germany", "Flag of Bavaria") to the page of every
subdivision located (P131) in exactly one country and of every city that is the capital (P1376) of exactly one
subdivision. This is what gives ModalSearch an image on a page that depicts another entity than the page's: the
state's article shows a flag, the flag shows the country (ModalSearcher §3.1: visual evidence linking two entities).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from neos_core.world.model import Entity, Image, Page, Triple

SUBDIVISION_KINDS = frozenset({"subdivision", "us_state"})
FLAG_SOURCES = frozenset({"flag-icons", "kgeography-data"})
# relation -> (the subject kinds whose page shows the flag, the object kinds whose flag it shows)
ROWS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "P131": (SUBDIVISION_KINDS, frozenset({"country"})),
    "P1376": (frozenset({"city"}), SUBDIVISION_KINDS),
}


def show_infobox_flags(pages: Mapping[str, Page], entities: Mapping[str, Entity], images: Iterable[Image],
                       triples: Iterable[Triple]) -> int:
    """Append the flags to the pages (in place, after the page's own images, in ``ROWS`` order); returns how many
    flags were added. A subject with none or several objects of a row (a comarca lies in Catalonia, not a country)
    gets none for it; an object without a flag, none."""
    flag = {i.entity_id: i.id for i in images if i.source in FLAG_SOURCES and i.entity_id}
    objects: dict[tuple[str, str], set[str]] = defaultdict(set)
    for t in triples:
        row = ROWS.get(t.p)
        if row is None or t.literal or t.s not in entities or t.o not in entities:
            continue
        if entities[t.s].kind in row[0] and entities[t.o].kind in row[1]:
            objects[(t.s, t.p)].add(t.o)
    shown = 0
    for (subject, relation), found in sorted(objects.items(), key=lambda kv: (list(ROWS).index(kv[0][1]), kv[0])):
        page = pages.get(entities[subject].page_id or "")
        image_id = flag.get(next(iter(found))) if len(found) == 1 else None
        if page is not None and image_id is not None and image_id not in page.image_ids:
            page.image_ids.append(image_id)
            shown += 1
    return shown
