"""Open-world relations (issue 19): "the person who is a citizen of B" had one answer only because the world holds
one person of B. A node reached only through relations whose object set is open in reality must be pinned by facts
a reader can check (a person's occupation and dates), else the candidate is rejected as ``open_world``; a capital,
one per country, needs nothing more."""

from pathlib import Path

import pytest

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.open_world import CLOSED_WORLD, OPEN_WORLD, person_noun, pinning, undecided
from data_gen.neos.synth import Synthesizer
from data_gen.neos.verbalize import RELATION_PHRASES, TemplateVerbalizer
from neos_core.world.model import Entity, Triple
from neos_core.world.store import World


def _world(root: Path) -> World:
    entities = {
        "country:ESP": Entity("country:ESP", "Spain", "country"),
        "country:FRA": Entity("country:FRA", "France", "country"),
        "person:bunuel": Entity("person:bunuel", "Luis Bunuel", "person", "Spanish film maker (1900-1983)"),
        "person:nojob": Entity("person:nojob", "Ana Nadie", "person", "Spanish singer (born 1930)"),
        "occupation:film": Entity("occupation:film", "film maker", "occupation"),
        "animal:ibex": Entity("animal:ibex", "Spanish ibex", "animal", "wild goat of Spain"),
        "organization:eu": Entity("organization:eu", "European Union", "organization"),
        "city:madrid": Entity("city:madrid", "Madrid", "city"),
    }
    facts = [("person:bunuel", "P27", "country:ESP"), ("person:bunuel", "P106", "occupation:film"),
             ("person:nojob", "P27", "country:ESP"), ("animal:ibex", "x:animal_found_in", "country:ESP"),
             ("country:ESP", "P463", "organization:eu"), ("country:FRA", "P463", "organization:eu"),
             ("country:ESP", "P36", "city:madrid"), ("country:FRA", "P47", "country:ESP")]
    return World(root, {}, entities, {}, {}, [Triple(*t) for t in facts], {}, {}, {})


def _path(*edges: Edge) -> Structure:
    """France's flag, then Spain (the checkpoint) as the country bordering it, then ``edges`` from Spain."""
    return Structure(branches=((Edge("country:FRA", "country:ESP", "P47", True), *edges),), tail=(),
                     checkpoints=("country:ESP",))


def _pin(world: World, structure: Structure):
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    return pinning(structure, kinds, KG.from_triples((t.s, t.p, t.o) for t in world.triples), world)


def test_a_citizen_without_an_occupation_is_rejected_as_open_world(tmp_path):
    world = _world(tmp_path)
    structure = _path(Edge("country:ESP", "person:nojob", "P27", False))
    candidate = Synthesizer(world).candidate(structure)
    assert candidate.task is None and candidate.filter == "open_world"
    assert candidate.detail.startswith("person:nojob (person): a country has millions of citizens")


def test_a_citizen_with_occupation_and_dates_is_named_by_them(tmp_path):
    world = _world(tmp_path)
    structure = _path(Edge("country:ESP", "person:bunuel", "P27", False))
    nouns = _pin(world, structure)
    assert nouns == {"person:bunuel": "film maker, born in 1900, died in 1983,"}
    kinds = {"country:FRA": "country", "country:ESP": "country", "person:bunuel": "person"}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P47": "", "P27": ""}, ["national flag"], {}, (), nouns)
    assert "the film maker, born in 1900, died in 1983, who is a citizen of the country that shares a border with " \
        in v.question  # no checkpoint description given
    assert v.spans[-1] == "is a citizen of the country"


@pytest.mark.parametrize("gloss, noun", [
    ("Spanish film maker (1900-1983)", "film maker, born in 1900, died in 1983,"),
    ("Spanish filmmaker (1900\u20131983)", "film maker, born in 1900, died in 1983,"),
    ("Spanish film maker (born 1930)", "film maker, born in 1930,"),
    ("Spanish film maker", None),
])
def test_a_persons_noun_needs_an_occupation_and_a_birth_year(tmp_path, gloss, noun):
    world = _world(tmp_path)
    world.entities["person:bunuel"].description = gloss
    kg = KG.from_triples((t.s, t.p, t.o) for t in world.triples)
    assert person_noun("person:bunuel", kg, world) == noun
    assert person_noun("person:nojob", kg, world) is None  # dates, but no occupation


def test_an_animal_found_in_a_country_is_open_world(tmp_path):
    # the world states no class beyond the gloss ("wild goat of Spain"), so nothing pins it
    assert _pin(_world(tmp_path), _path(Edge("country:ESP", "animal:ibex", "x:animal_found_in", False))) == \
        "animal:ibex (animal): a country has many animals; the world holds those WordNet's glosses place there, " \
        "and nothing stated pins it"


def test_an_organisation_reached_through_one_member_is_open_world(tmp_path):
    # two members would pin it, but convergent branches must reach the merge node through distinct relations
    assert _pin(_world(tmp_path), _path(Edge("country:ESP", "organization:eu", "P463", True))).startswith(
        "organization:eu (organization): a country is a member of many organisations")
    with pytest.raises(ValueError, match="distinct relations"):
        Structure(branches=((Edge("country:FRA", "organization:eu", "P463", True),),
                            (Edge("country:ESP", "organization:eu", "P463", True),)), tail=(), checkpoints=())


def test_a_capital_and_a_closed_edge_beside_an_open_one_need_nothing_more(tmp_path):
    world = _world(tmp_path)
    assert _pin(world, _path(Edge("country:ESP", "city:madrid", "P36", True))) == {}
    # Madrid: the capital (one per country) of the member of the EU that borders France (every border is in the world)
    both = Structure(branches=((Edge("country:FRA", "country:ESP", "P47", True),),
                               (Edge("organization:eu", "country:ESP", "P463", False),)),
                     tail=(Edge("country:ESP", "city:madrid", "P36", True),), checkpoints=("country:ESP",))
    assert _pin(world, both) == {}


def test_reader_unique_relations_are_closed():
    for closed in [("P36", True), ("P1376", True), ("P37", True), ("P38", True), ("P1549", True), ("P361", True),
                   ("P27", True), ("P47", True), ("P47", False)]:
        assert closed not in OPEN_WORLD
    assert {("P27", False), ("P463", True), ("P106", True), ("x:landmark_in", False)} <= OPEN_WORLD.keys()


def test_every_relation_a_question_states_is_decided_in_both_directions():
    decided = [*OPEN_WORLD, *CLOSED_WORLD]
    assert len(decided) == len(set(decided))  # none both open and closed
    assert {(rel, forward) for rel in RELATION_PHRASES for forward in (True, False)} == set(decided)


def test_undecided_names_the_relations_neither_table_decides():
    steps = [("P36", True), ("P27", False), ("P9999", True), ("P27", True), ("P35", False), ("P8888", False)]
    assert undecided(steps) == {"P9999", "P8888"}  # open (P27 from the country) and closed ones are decided
    assert undecided([("P36", True)]) == set()
