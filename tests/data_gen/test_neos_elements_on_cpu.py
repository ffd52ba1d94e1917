"""Chemical elements and their discoverers as Neos answers (issue 19): the world holds all 118 elements, so "the
chemical element that was discovered in B" is closed (one in the KG is one in reality) and so is "the person who
discovered C" for an element whose discoverers are all listed; "the element that Scheele discovered" is open (the
source leaves out elements found by teams), so a node reached only that way is rejected as ``open_world``. A
discoverer is reached through the one element of a country known by its borders (the element variant and the
element facts' penalty), and such discoverers come first among the people in the seed order."""

from dataclasses import replace
from pathlib import Path

from data_gen.kg import KG, Edge, Structure
from data_gen.kg.distinguish import DistinguishingConfig
from data_gen.neos.open_world import pinning
from data_gen.neos.synth import SEED_KINDS, SynthConfig, Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer
from neos_core.world.model import Entity, Triple
from neos_core.world.store import World


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
    assert "the person who discovered the chemical element that was discovered in the country that shares a border " \
           "with " in v.question


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


def _flagged_world(root: Path, flag_images) -> World:
    """Norway borders Sweden, Sweden Finland (all three flagged); Sweden and Finland are the EU's members. Finland
    has a language and a capital of its own (dead ends, as a real country's), yttrium (found by Gadolin alone) and
    Virtanen, its one citizen in the world; chlorine (Scheele's) was discovered in Sweden alone."""
    flags = {"country:NOR": (210, 20, 40), "country:SWE": (0, 60, 170), "country:FIN": (0, 140, 70)}
    labels = {"element:y": "Yttrium", "element:cl": "Chlorine", "person:gadolin": "Johann Gadolin",
              "person:scheele": "Carl Wilhelm Scheele", "person:virtanen": "Artturi Virtanen",
              "lang:fin": "Finnish", "city:hel": "Helsinki", "organization:eu": "European Union"}
    entities = {eid: Entity(eid, eid[-3:], "country", page_id=eid[-3:]) for eid in flags}
    entities |= {eid: Entity(eid, label, eid.split(":")[0].replace("lang", "language"), page_id=eid.split(":")[1])
                 for eid, label in labels.items()}
    images = flag_images(root, flags)
    facts = [("country:NOR", "P47", "country:SWE"), ("country:SWE", "P47", "country:NOR"),
             ("country:SWE", "P47", "country:FIN"), ("country:FIN", "P47", "country:SWE"),
             ("country:SWE", "P463", "organization:eu"), ("country:FIN", "P463", "organization:eu"),
             ("country:FIN", "P37", "lang:fin"), ("country:FIN", "P36", "city:hel"),
             ("city:hel", "P1376", "country:FIN"), ("person:virtanen", "P27", "country:FIN"),
             ("element:y", "P189", "country:FIN"), ("element:y", "P61", "person:gadolin"),
             ("element:cl", "P189", "country:SWE"), ("element:cl", "P61", "person:scheele")]
    return World(root, {}, entities, {}, images, [Triple(*t) for t in facts], {}, {}, {})


TO_YTTRIUM = ("country:NOR", "country:SWE", "country:FIN", "element:y", "person:gadolin")


def _paths(result) -> set[tuple[str, ...]]:
    return {(c.structure.edges[0].source, *(e.target for e in c.structure.edges)) for c in result.candidates}


def test_the_one_discoverer_of_a_countrys_one_element_is_reached_through_the_countrys_borders(tmp_path, flag_images):
    # Finland is known by its language or capital in every other variant (dead ends: neither has an image), and
    # the variants withholding those withhold the element's country too; the element variant keeps it, and Finland
    # is known by the EU and its border with Sweden, Sweden by the EU and its border with Norway
    world = _flagged_world(tmp_path, flag_images)
    result = Synthesizer(world, seed=0).synthesize("person:gadolin")
    assert TO_YTTRIUM in _paths(result), result.counts
    # at the default bit, "the country where chlorine was discovered" (one) beats the EU (two, no penalty) on the
    # tie by relation id and ends Sweden's chain at chlorine, which has no image
    flat = DistinguishingConfig(relation_penalty={**DistinguishingConfig().relation_penalty, "P106": 2.0})
    config = SynthConfig()
    config = replace(config, expansion=replace(config.expansion, distinguishing=flat))
    assert TO_YTTRIUM not in _paths(Synthesizer(world, seed=0, config=config).synthesize("person:gadolin"))


def test_discoverers_two_closed_hops_from_a_flag_come_before_a_countrys_only_citizen(tmp_path, flag_images):
    synth = Synthesizer(_flagged_world(tmp_path, flag_images), seed=0)
    # yttrium and Helsinki are one closed hop from Finland's flag, their discoverer two; Virtanen's one hop, "the
    # person who is a citizen of Finland", is open (Finland has millions of citizens)
    assert synth._pinned("element:y") == 1 and synth._pinned("city:hel") == 1
    assert synth._pinned("person:gadolin") == 2 and synth._pinned("person:scheele") == 2
    assert synth._pinned("person:virtanen") is None
    people = [s for s in synth.seeds() if s.startswith("person:")]
    assert sorted(people[:2]) == ["person:gadolin", "person:scheele"] and people[2] == "person:virtanen"
