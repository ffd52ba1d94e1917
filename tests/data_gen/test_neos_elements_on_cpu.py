"""Chemical elements and their discoverers as Neos answers (issue 19): the world holds all 118 elements, so "the
chemical element that was discovered in B" is closed (one in the KG is one in reality) and so is "the person who
discovered C" for an element whose discoverers are all listed; "the element that Scheele discovered" is open (the
source leaves out elements found by teams), so a node reached only that way is rejected as ``open_world``."""

from pathlib import Path

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.open_world import pinning
from data_gen.neos.synth import SEED_KINDS, Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer
from data_gen.world.model import Entity, Triple
from data_gen.world.store import World


def _world(root: Path) -> World:
    labels = {"country:SWE": ("Sweden", "country"), "country:FIN": ("Finland", "country"),
              "element:y": ("Yttrium", "element"), "element:cl": ("Chlorine", "element"),
              "element:mo": ("Molybdenum", "element"), "person:gadolin": ("Johann Gadolin", "person"),
              "person:scheele": ("Carl Wilhelm Scheele", "person")}
    entities = {eid: Entity(eid, label, kind) for eid, (label, kind) in labels.items()}
    facts = [("country:SWE", "P47", "country:FIN"), ("country:FIN", "P47", "country:SWE"),
             ("element:y", "P189", "country:FIN"), ("element:y", "P61", "person:gadolin"),
             ("element:cl", "P189", "country:SWE"), ("element:cl", "P61", "person:scheele"),
             ("element:mo", "P189", "country:SWE"), ("element:mo", "P61", "person:scheele")]
    return World(root, {}, entities, {}, {}, [Triple(*t) for t in facts], {}, {}, {})


def _pin(world: World, structure: Structure):
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    return pinning(structure, kinds, KG.from_triples((t.s, t.p, t.o) for t in world.triples), world)


# Sweden's flag, then Finland (the checkpoint) as the country bordering it, the element discovered there and its
# one discoverer
TO_GADOLIN = Structure(branches=((Edge("country:SWE", "country:FIN", "P47", True),
                                  Edge("country:FIN", "element:y", "P189", False),
                                  Edge("element:y", "person:gadolin", "P61", True)),), tail=(),
                       checkpoints=("country:FIN",))


def test_an_element_and_its_one_discoverer_need_no_pin_and_read_as_a_question(tmp_path):
    world = _world(tmp_path)
    assert _pin(world, TO_GADOLIN) == {}
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    v = TemplateVerbalizer().verbalize(TO_GADOLIN, kinds, {"P47": "", "P189": "", "P61": ""}, ["national flag"], {},
                                       (), {})
    assert "Let C be the chemical element that was discovered in B." in v.question
    assert v.question.endswith("Let D be the person who discovered C. Which person is D?")


def test_an_element_reached_only_from_its_discoverer_is_rejected_as_open_world(tmp_path):
    # Scheele discovered chlorine and molybdenum in the world, and more (oxygen, with Priestley) in reality
    world = _world(tmp_path)
    structure = Structure(branches=((Edge("country:SWE", "element:cl", "P189", False),
                                     Edge("element:cl", "person:scheele", "P61", True),
                                     Edge("person:scheele", "element:mo", "P61", False)),), tail=(),
                          checkpoints=("element:cl",))
    assert _pin(world, structure) == ("element:mo (element): a person may discover several elements, and mendeleev "
                                      "leaves out those found by a team or a pair, and nothing stated pins it")
    candidate = Synthesizer(world).candidate(structure)
    assert candidate.task is None and candidate.filter == "open_world"


def test_elements_are_seeds():
    assert {"element", "person"} <= SEED_KINDS
