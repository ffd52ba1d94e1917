"""Open-world relations: facts whose object set a reader knows to be open, so that "the person who is a citizen of
C" has one answer only because the KG holds one Spanish person, not under a person's reading of the question.

A node reached only through such relations must be pinned by more that a reader can check (:func:`pinning`): a
person by the occupation and the dates the sources state ("the film maker, born in 1900, died in 1983, who is a
citizen of C"), an organisation whose member list the world holds completely by its member count ("the organization
of 21 members that has C as a member": C is a member of many organisations, of few with 21 members;
:func:`organisation_noun`); anything else is rejected (``open_world``). Two member countries cannot pin an
organisation: a convergent structure constrains its merge node through two distinct relations (Neos, App. A).

Whether a relation is open can depend on the entity it is read from: an organisation's members (P463 read from the
organisation) are open for WordNet's organisations (WordNet, 2006, lists some) and closed for those whose member
count the world states and whose members it holds, all of them (country_converter's lists); so are a country's
divisions (P131 read from the country): open in general, closed for a country that one KGeography map divides, whose
division count the world states and whose divisions it holds ("the state of Germany whose flag is ...":
:data:`COMPLETE_LISTS`, :func:`complete_lists`). Relations the world holds
completely (every country's borders, languages, currencies, region and continent from world-countries) or whose
object a reader expects to be one (a capital, a demonym) are closed: one answer in the KG is one in reality. So are
the chemical elements' facts (mendeleev): the world holds all 118, so "the chemical element that was discovered in
Finland" has the answers a reader finds, and the discoverers of an element are all listed or none is. A country's
national dish and main religion are closed as the source names one (country-json), the countries of a dish or a
religion open, and a language's script closed (CLDR's likely subtags give one; languages written officially in
two get none), the languages of a script open; a capital's time zone (CLDR's metazone) closed, its cities open; an
airport's city closed, and a capital's airports closed where the world gives it any (it holds all of them); a
country's highest and lowest points (the Factbook's) closed, the countries of a point open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from data_gen.kg import KG, Structure
from data_gen.world.adapters.people import DATES
from data_gen.world.properties import (
    AIRPORT_CITY,
    CULTURE_RELATIONS,
    DIVISION_COUNT,
    FEATURE_RELATIONS,
    FORMER_CURRENCY,
    HIGHEST_POINT,
    LANDMARK_RELATION,
    LOWEST_POINT,
    MAIN_RELIGION,
    NATIONAL_DISH,
    TIME_ZONE,
    WILDLIFE_RELATIONS,
    WRITING_SYSTEM,
)
from neos_core.world.store import World

# (relation, forward) -> why its object set is open; ``forward``: the edge reaches the fact's object (Edge.forward).
OPEN_WORLD: dict[tuple[str, bool], str] = {
    ("P27", False): "a country has millions of citizens; the world holds WordNet's few",
    ("P106", False): "many people share an occupation",
    ("P106", True): "a person may have several occupations; WordNet lists its instance hypernyms only",
    ("P17", False): "a country holds many cities; the world holds few per country",
    ("P131", False): "a country has many subdivisions; the world's list may be partial",
    ("P463", True): "a country is a member of many organisations; the world holds fifteen",
    ("P463", False): "an organisation has many members; WordNet (2006) lists some",  # but see COMPLETE_LISTS
    ("P31", True): "an entity is an instance of many classes",
    ("P31", False): "a class has many instances",
    ("P279", True): "a class has many superclasses",
    ("P279", False): "a class has many subclasses",
    ("P35", False): "one monarch may head several states (the Commonwealth realms)",
    ("P112", True): "a company may have several founders",
    ("P112", False): "a person may found several companies",
    ("P159", False): "a city hosts many headquarters",
    ("P61", False): "a person may discover several elements, and mendeleev leaves out those found by a team or a pair",
    **{(rel, False): f"a country has many {kind}s; the world holds WordNet's few"
       for kind, rel in FEATURE_RELATIONS.items()},
    **{(rel, True): f"a {kind} may lie on a border or cross it" for kind, rel in FEATURE_RELATIONS.items()},
    **{(rel, False): f"a country has many {kind}s; the world holds those WordNet's glosses place there"
       for kind, rel in WILDLIFE_RELATIONS.items()},
    **{(rel, True): "a species may range over several countries" for rel in WILDLIFE_RELATIONS.values()},
    (LANDMARK_RELATION, False): "a country or a city has many landmarks",
    **{(rel, False): f"a country has many {kind}s of its own" for kind, rel in CULTURE_RELATIONS.items()},
    **{(rel, True): f"a {kind} may belong to several countries' ways" for kind, rel in CULTURE_RELATIONS.items()},
    (NATIONAL_DISH, False): "neighbours claim one dish (country-json: couscous for Algeria, Mauritania, Morocco and "
                            "Tunisia)",
    (MAIN_RELIGION, False): "a religion is the main one of many countries",
    (WRITING_SYSTEM, False): "a script writes many languages (Cyrillic: Russian, Ukrainian, Bulgarian and more)",
    (TIME_ZONE, False): "many cities keep one time zone (34 capitals keep Central European Time)",
    **{(rel, False): "a summit or a lake on a border is the point of both countries, which the Factbook may spell two "
                     "ways (Mont Nimba, Monts Nimba)" for rel in (HIGHEST_POINT, LOWEST_POINT)},
    (FORMER_CURRENCY, False): "several countries used one currency before their own (the French franc: France and "
                              "its overseas departments)",
}

# (relation, forward) -> why one object in the KG is one in reality: a reader expects one, or the world holds them all.
CLOSED_WORLD: dict[tuple[str, bool], str] = {
    ("P36", True): "a country has one capital (two where the world lists two: 'a capital')",
    ("P36", False): "a city is the capital of one country",
    ("P1376", True): "a city is the capital of one country",
    ("P1376", False): "a country has one capital (two where the world lists two)",
    ("P47", True): "the world holds every country's land borders (world-countries)",
    ("P47", False): "the world holds every country's land borders (world-countries)",
    ("P37", True): "the world holds each country's official languages (world-countries)",
    ("P37", False): "the world holds the countries of each official language (world-countries)",
    ("P38", True): "the world holds each country's currencies (world-countries)",
    ("P38", False): "the world holds the countries using each currency (world-countries)",
    ("P30", True): "the world holds each country's continent (world-countries)",
    ("P30", False): "the world holds the countries of each continent (world-countries)",
    ("P361", True): "a country lies in one UN region, a region in one continent",
    ("P361", False): "the world holds the countries of each UN region (world-countries)",
    ("P17", True): "a city lies in one country",
    ("P131", True): "a subdivision lies in one country",
    ("P27", True): "a person is read as a citizen of one country (the gloss's)",
    ("P1549", True): "one nationality names a country's natives",
    ("P1549", False): "a nationality names the natives of one country",
    ("P35", True): "a state has one head of state",
    ("P159", True): "a company has one headquarters",
    (LANDMARK_RELATION, True): "a building stands in one place",
    ("P189", True): "the world holds every element's places of discovery (mendeleev; all or none)",
    ("P189", False): "the world holds all 118 chemical elements and where each was discovered (mendeleev)",
    ("P138", True): "an element is named after one thing",
    ("P138", False): "the world holds all 118 chemical elements; six are named after a country",
    ("P61", True): "the world holds all of an element's discoverers where it holds any (mendeleev)",
    (NATIONAL_DISH, True): "country-json names one national dish for the country (entries naming several give none)",
    (MAIN_RELIGION, True): "a country's main religion is its largest group, one (country-json)",
    (WRITING_SYSTEM, True): "CLDR's likely subtags give a language one script; those a territory has officially in a "
                            "second (Serbian in Latin) get none",
    (TIME_ZONE, True): "a city's zone keeps one CLDR metazone at a time",
    (FORMER_CURRENCY, True): "CLDR dates one currency that the country's one current currency replaced",
    (AIRPORT_CITY, True): "airportsdata files an airport under one city",
    (HIGHEST_POINT, True): "the CIA World Factbook names one highest point per country",
    (LOWEST_POINT, True): "the CIA World Factbook names one lowest point per country",
    (AIRPORT_CITY, False): "the world holds every airport of a capital where it holds any, the list checked against "
                           "country-json (data_gen.world.adapters.airports)",
}

# (relation, forward) -> why the world lacks the fact for some subjects that have it in reality: closed read from one
# subject the world gives it for, but "the national dish of C", C any of Finland and Norway, is Norway's only
# because country-json names several dishes for Finland. A step through one from a set of candidates that includes
# a subject without the fact is open (:func:`unlisted`).
PARTIAL: dict[tuple[str, bool], str] = {
    ("P1549", True): "WordNet names the natives of 157 of the 250 countries (no Surinamese)",
    (NATIONAL_DISH, True): "country-json names one national dish for 72 countries; the others have one, several or "
                           "none in reality",
    (MAIN_RELIGION, True): "country-json names none where no group holds most (the Czech Republic, Estonia)",
    (WRITING_SYSTEM, True): "CLDR gives no one script for 16 of the world's 153 languages (Serbian: Cyrillic and "
                            "Latin; Japanese: Han and kana; sign languages)",
    (TIME_ZONE, True): "the world gives capitals only a time zone, and not Amman's or Damascus's (no CLDR metazone)",
    (FORMER_CURRENCY, True): "the world gives a former currency only where CLDR dates the current one replacing it, "
                             "and not where that currency is another country's current one (Nepal's Indian rupee)",
    (HIGHEST_POINT, True): "the world gives no highest point where the Factbook's is unnamed (Benin) or WordNet names "
                           "it (Kilimanjaro: textbook, left out)",
    (LOWEST_POINT, True): "the world gives no lowest point at sea level (the coast's sea), unnamed or named by WordNet "
                          "(the Dead Sea: textbook, left out)",
    (AIRPORT_CITY, False): "the world gives airports only to capitals whose list both sources agree on (none to "
                           "Vienna, whose airport airportsdata files under Schwechat)",
}

# (relation, forward) of OPEN_WORLD -> why it is closed after all when read from an entity whose list the world holds
# completely (:func:`complete_lists`): "a country that is a member of the OECD" has the answers a reader finds.
COMPLETE_LISTS: dict[tuple[str, bool], str] = {
    ("P463", False): "the world holds every member of an organisation whose member count (P2124) it states",
    ("P131", False): "the world holds every division of a country whose division count (one KGeography map) it states",
}
MEMBER_COUNT = "P2124"
# The literal that states a complete list's length -> the relation whose subjects are the list.
COUNTED: dict[str, str] = {MEMBER_COUNT: "P463", DIVISION_COUNT: "P131"}


def complete_lists(world: World, kg: KG) -> dict[str, int]:
    """Organisation or country -> its member or division count, for those whose list the world holds completely:
    the count it states (P2124, ``x:division_count``; a literal) is the number of the list's subjects in the KG
    (P463 members, P131 divisions). One left out (no entity of the world) leaves the list open."""
    counts = {(t.s, COUNTED[t.p]): int(t.o) for t in world.triples
              if t.p in COUNTED and t.literal and t.o.isdigit()}
    return {entity: n for (entity, relation), n in counts.items() if len(kg.subjects(relation, entity)) == n}


def pinning(structure: Structure, kinds: Mapping[str, str], kg: KG, world: World,
            complete: Mapping[str, int] | None = None) -> dict[str, str] | str:
    """Node -> the noun phrase that pins it ("film maker, born in 1900,"), for every node whose incoming edges are
    all open-world; a str (the reason) when one cannot be pinned. A node with a closed incoming edge is pinned by
    it: the reader can list that edge's objects. A relation in neither table (a loaded KG's own) counts as closed:
    :func:`undecided` names them, and the CLI counts and warns about the tasks that use one. ``complete``:
    :func:`complete_lists` of the world, computed here when not given (the synthesizer computes it once)."""
    complete = complete_lists(world, kg) if complete is None else complete
    nouns: dict[str, str] = {}
    for node in structure.nodes:
        incoming = [e for e in structure.edges if e.target == node]
        reasons = [open_reason(e.relation, e.forward, e.source, complete) for e in incoming]
        if not incoming or not all(reasons):
            continue
        kind = kinds.get(node, "")
        noun = pinning_noun(node, kind, kg, world, complete)
        if noun is None:
            return f"{node} ({kind or 'entity'}): {reasons[0]}, and nothing stated pins it"
        nouns[node] = noun
    return nouns


def open_reason(relation: str, forward: bool, source: str, complete: Mapping[str, int]) -> str | None:
    """Why the step through ``relation`` read from ``source`` (``forward``: towards the fact's object) is open, or
    None when it is closed: :data:`OPEN_WORLD`, but for an organisation whose members the world holds completely
    (:data:`COMPLETE_LISTS`, ``complete`` from :func:`complete_lists`)."""
    if (relation, forward) in COMPLETE_LISTS and source in complete:
        return None
    return OPEN_WORLD.get((relation, forward))


def pinning_noun(entity: str, kind: str, kg: KG, world: World, complete: Mapping[str, int]) -> str | None:
    """The noun that pins ``entity`` of ``kind`` (:func:`person_noun`, :func:`organisation_noun`); None for other
    kinds. The evidence rules read it too: a candidate fits a pinned node only if its noun is the question's."""
    if kind == "person":
        return person_noun(entity, kg, world)
    return organisation_noun(entity, complete, world) if kind == "organization" else None


def person_noun(person: str, kg: KG, world: World) -> str | None:
    """"film maker, born in 1900, died in 1983,": the person's occupations (P106) and the dates its gloss states;
    None without both an occupation and a birth year."""
    jobs = sorted(world.entities[j].label for j in kg.objects(person, "P106") if j in world.entities)
    entity = world.entities.get(person)
    dates = DATES.search(entity.description) if entity else None
    if not jobs or dates is None:
        return None
    died = f" died in {dates.group(2)}," if dates.group(2) else ""
    return f"{' and '.join(jobs)}, born in {dates.group(1)},{died}"


# Organisations (by label) whose member count pins nothing under a person's reading, though the world holds their
# members: -> why.
UNPINNED_COUNTS: dict[str, str] = {
    "United Nations": "its specialised agencies have as many members (the ITU 193 states, the WMO 193 members), and "
                      "193 names the United Nations without its member",
}


def organisation_noun(organisation: str, complete: Mapping[str, int], world: World) -> str | None:
    """"organization of 21 members": the member count of an organisation whose members the world holds completely
    (:func:`complete_lists`), which the reader checks on its page; None for any other and for
    :data:`UNPINNED_COUNTS`. A country is a member of many organisations, but of few with exactly 21 members: under
    a person's reading, "the organization of 21 members that has Hong Kong as a member" is APEC, and without Hong
    Kong "an organization of 21 members" is any of several."""
    count = complete.get(organisation)
    entity = world.entities.get(organisation)
    if count is None or entity is None or entity.label in UNPINNED_COUNTS:
        return None
    return f"organization of {count} members"


def unlisted(kg: KG, sources: Iterable[str], relation: str, forward: bool) -> str | None:
    """Why a step through a :data:`PARTIAL` relation from the reader's candidates ``sources`` is open: one of them
    has no such fact in the world (but may in reality); None when all have one or the relation is total."""
    reason = PARTIAL.get((relation, forward))
    missing = sorted(s for s in sources if not (kg.objects(s, relation) if forward else kg.subjects(relation, s)))
    return f"{missing[0]} may be meant and has no {relation} in the world: {reason}" if reason and missing else None


def undecided(steps: Iterable[tuple[str, bool]]) -> set[str]:
    """The relations of ``(relation, forward)`` steps that neither table decides: :func:`pinning` takes them as
    closed, so a task through one is unique in the KG but perhaps not to a reader."""
    return {rel for rel, forward in steps if (rel, forward) not in OPEN_WORLD and (rel, forward) not in CLOSED_WORLD}
