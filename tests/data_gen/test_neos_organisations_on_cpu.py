"""Organisations with complete member lists (issue 19): "a country that is a member of D" is closed where the world
states D's member count (P2124) and holds that many members, and open for WordNet's organisations; an organisation
reached from one of its members is pinned by that count ("the organization of 2 members that has B as a member"),
except the UN's (its agencies share it)."""

from pathlib import Path

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.open_world import COMPLETE_LISTS, OPEN_WORLD, complete_lists, organisation_noun, pinning
from data_gen.neos.synth import SEED_KINDS, Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer
from neos_core.world.model import Entity, Triple
from neos_core.world.store import World


def _world(root: Path, apec_count: str = "2") -> World:
    labels = {"country:CHN": ("China", "country"), "country:HKG": ("Hong Kong", "country"),
              "country:VNM": ("Vietnam", "country"), "country:TUR": ("Turkey", "country"),
              "country:GRC": ("Greece", "country"),
              "organization:apec": ("Asia-Pacific Economic Cooperation", "organization"),
              "organization:un": ("United Nations", "organization"),
              "organization:nato": ("North Atlantic Treaty Organization", "organization")}
    entities = {eid: Entity(eid, label, kind) for eid, (label, kind) in labels.items()}
    facts = [Triple("country:HKG", "P47", "country:CHN"), Triple("country:CHN", "P47", "country:HKG"),
             Triple("country:VNM", "P47", "country:CHN"), Triple("country:TUR", "P47", "country:GRC"),
             Triple("country:HKG", "P463", "organization:apec"), Triple("country:VNM", "P463", "organization:apec"),
             Triple("country:CHN", "P463", "organization:un"), Triple("country:VNM", "P463", "organization:un"),
             Triple("country:TUR", "P463", "organization:nato"),  # WordNet's: no count, some members
             Triple("organization:apec", "P2124", apec_count, literal=True),
             Triple("organization:un", "P2124", "2", literal=True)]
    return World(root, {}, entities, {}, {}, facts, {}, {}, {})


def _pin(world: World, structure: Structure):
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    return pinning(structure, kinds, KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal), world)


def _kg(world: World) -> KG:
    return KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)


# China's flag, Hong Kong (the checkpoint) as the country bordering it, then APEC as the organisation it is in
TO_APEC = (Edge("country:CHN", "country:HKG", "P47", True), Edge("country:HKG", "organization:apec", "P463", True))


def test_a_list_is_complete_where_the_stated_count_is_the_members_held(tmp_path):
    assert complete_lists(_world(tmp_path), _kg(_world(tmp_path))) == {"organization:apec": 2, "organization:un": 2}
    short = _world(tmp_path, apec_count="21")  # a member the world lacks: the list reads as open
    assert complete_lists(short, _kg(short)) == {"organization:un": 2}


def test_a_member_of_a_complete_organisation_is_closed_and_of_wordnets_open(tmp_path):
    world = _world(tmp_path)
    vietnam = Structure(branches=(TO_APEC + (Edge("organization:apec", "country:VNM", "P463", False),),), tail=(),
                        checkpoints=("country:HKG",))
    assert _pin(world, vietnam) == {"organization:apec": "organization of 2 members"}  # Vietnam needs no pin
    nato = Structure(branches=((Edge("organization:nato", "country:TUR", "P463", False),
                                Edge("country:TUR", "country:GRC", "P47", True)),), tail=(),
                     checkpoints=("country:TUR",))
    assert _pin(world, nato).startswith("country:TUR (country): an organisation has many members; WordNet")
    apec = Structure(branches=((Edge("organization:apec", "country:VNM", "P463", False),
                                Edge("country:VNM", "country:CHN", "P47", True)),), tail=(),
                     checkpoints=("country:VNM",))
    assert _pin(world, apec) == {}
    short = _world(tmp_path, apec_count="21")
    assert _pin(short, vietnam).startswith("organization:apec (organization): a country is a member of many")


def test_an_organisation_is_pinned_by_its_count_and_reads_as_a_question(tmp_path):
    world = _world(tmp_path)
    structure = Structure(branches=(TO_APEC,), tail=(), checkpoints=("country:HKG",))
    nouns = _pin(world, structure)
    assert nouns == {"organization:apec": "organization of 2 members"}
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P47": "", "P463": ""}, ["national flag"], {}, (), nouns)
    assert "the organization of 2 members whose members include the country that shares a border with " in v.question
    assert v.spans[-1] == "whose members include the country"


def test_the_uns_count_pins_nothing(tmp_path):
    # the ITU has 193 member states too: "the organization of 193 members that has B as a member" is two answers
    world = _world(tmp_path)
    assert organisation_noun("organization:un", {"organization:un": 2}, world) is None
    to_un = Structure(branches=((Edge("country:HKG", "country:CHN", "P47", True),
                                 Edge("country:CHN", "organization:un", "P463", True)),), tail=(),
                      checkpoints=("country:CHN",))
    candidate = Synthesizer(world).candidate(to_un)
    assert candidate.filter == "open_world" and candidate.detail.startswith("organization:un (organization)")


def test_complete_lists_close_an_open_relation_only_and_organisations_are_seeded():
    assert COMPLETE_LISTS.keys() <= OPEN_WORLD.keys()  # the default stays open: a WordNet organisation's members
    assert "organization" in SEED_KINDS
