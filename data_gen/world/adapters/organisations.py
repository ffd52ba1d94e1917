"""International organisations whose member lists the country_converter package states completely (its
``country_data.tsv``, one column per organisation), so that "a country that is a member of the OECD" has the answers
a reader finds: the world holds every member, as it holds every element of mendeleev's table.

The table is read with the ``csv`` module (country_converter itself is not imported). Of its membership columns
the adapter takes the seven that list an organisation's members as a reader knows them in 2025 (the package's
release): OECD (38, with the year each joined), EU (27), EEA (30), UN (193, with the year each joined), APEC (21
members, Hong Kong and Taiwan among them: APEC says "member economies"), G7 (7) and CoE (the Council of Europe,
46). It leaves out

* G20: its 43 rows are the 19 member countries and every EU member state ("listing all EU member states as
  individual members", says the package's README); the real members are 19 countries, the EU and the African Union,
  so "Austria is a member of the G20" would be false;
* CIS: 8 rows, without Kyrgyzstan, a full member (the README: "as by 2019, excl. Turkmenistan"), so the list is
  not complete; WordNet's CIS stays, open (:mod:`data_gen.world.adapters.country_facts`);
* Schengen: an area, not an organisation, and its rows predate Croatia (2023), Bulgaria and Romania (2025) and
  count the Faroe Islands and Greenland, which are outside it;
* EURO: the euro area is the currency's (the world states each country's currency, world-countries); BRIC is an
  investment bank's acronym (the organisation is BRICS, with more members); BASIC a negotiating bloc; EU28,
  EU27_2007 and the other EU columns past states of the EU.

Facts: ``(country, P463 member of, organisation)`` for every member, and ``(organisation, P2124 member count, n)``
(a literal, every row of the column): the completeness marker that :mod:`data_gen.neos.open_world` reads (the world
holds the list completely where it holds that many members). A member that is no world country would leave the
count above the facts, and the list would read as open; none is missing in version 1.3.2. Each organisation's page
states the count and its members by their world names, with the year each joined where the table gives one.

The EU and the UN are WordNet organisations too: they keep WordNet's id, gloss and aliases (one entity, one page),
and the complete list wins: WordNet's EU of 2006 (15 members, the United Kingdom among them) would contradict it,
so :mod:`~data_gen.world.adapters.country_facts` gives none of its members (``COMPLETE_ELSEWHERE``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._prose import join_list
from data_gen.world.adapters._wordnet_data import load_wordnet
from data_gen.world.adapters.country_facts import COMPLETE_ELSEWHERE, add_entity
from data_gen.world.adapters.wildlife import country_names
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCES = ("country-converter", "world-countries", "wordnet-base")
TABLE = Path("country_converter/country_data.tsv")
SOURCE = "country-converter"


@dataclass(frozen=True)
class Organisation:
    column: str  # the table's column: a year (the member joined then) or the column's name per member row
    label: str
    aliases: tuple[str, ...] = ()


ORGANISATIONS: tuple[Organisation, ...] = (
    Organisation("OECD", "Organisation for Economic Co-operation and Development", ("OECD",)),
    Organisation("EU", "European Union"),
    Organisation("EEA", "European Economic Area", ("EEA",)),
    Organisation("UN", "United Nations"),
    Organisation("APEC", "Asia-Pacific Economic Cooperation", ("APEC",)),
    Organisation("G7", "Group of Seven", ("G7",)),
    Organisation("CoE", "Council of Europe"),
)


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    if size not in ("small", "full"):
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    names = country_names(sources["world-countries"])
    wn = load_wordnet(sources["wordnet-base"])
    out = Contribution(relations=relations({"P463", "P2124"}))
    for org, listed_members in memberships(sources["country-converter"] / TABLE).items():
        members = {c: year for c, year in listed_members.items() if c in names}
        listed = join_list([f"{names[c]} ({year})" if year else names[c]
                            for c, year in sorted(members.items(), key=lambda m: names[m[0]])])
        joined = " (with the year each joined)" if any(members.values()) else ""
        sentence = f"It has {len(listed_members)} members{joined}: {listed}."
        facts = [(c, "P463", None) for c in members]
        if org.label in COMPLETE_ELSEWHERE:  # one entity with WordNet's: its id, gloss and aliases
            synset = wn.synsets[wn.lookup(org.label)[0]]
            add_entity(out, wn, synset, "organization", facts, sentence)
            eid = out.entities[-1].id
        else:
            eid = f"organization:{slugify(org.column).lower()}"
            _add_page(out, eid, org, sentence)
            out.triples += [Triple(c, "P463", eid) for c in members]
        out.triples.append(Triple(eid, "P2124", str(len(listed_members)), literal=True))
    return out


def memberships(table: Path) -> dict[Organisation, dict[str, str]]:
    """Organisation -> {member country id (ISO3, as the world's): the year it joined, or "" where the table gives
    none}. :func:`contribute` states facts for the world's countries only and the count of every row, so a member
    that is no world country (none in 1.3.2) would leave the list open."""
    with table.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    out: dict[Organisation, dict[str, str]] = {}
    for org in ORGANISATIONS:
        cells = {f"country:{r['ISO3']}": (r.get(org.column) or "").strip() for r in rows}
        out[org] = {cid: (cell if cell.isdigit() else "") for cid, cell in cells.items() if cell}
    return out


def _add_page(out: Contribution, eid: str, org: Organisation, sentence: str) -> None:
    also = f" ({join_list(list(org.aliases))})" if org.aliases else ""
    page_id = slugify(org.label)
    out.pages.append(Page(page_id, page_url(page_id), org.label, f"{org.label}{also} is an international "
                          f"organisation. {sentence}", SOURCE, entity_id=eid))
    out.entities.append(Entity(eid, org.label, "organization", "international organisation", list(org.aliases),
                               page_id))
