"""A country's divisions (issue 36): "the state of Germany whose flag is ..." is closed where the world states the
country's division count (one KGeography map) and holds that many divisions, and open otherwise (a partial list, or
no count), so a subdivision capital's city becomes an answer through its state's flag."""

from pathlib import Path

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.open_world import complete_lists, open_reason, pinning
from data_gen.world.properties import DIVISION_COUNT
from neos_core.world.model import Entity, Triple
from neos_core.world.store import World


def _world(root: Path, count: str | None = "2") -> World:
    """Germany (DEU) with two states, Bavaria and Saxony, each with a capital; France with one region and no count."""
    labels = {"country:DEU": ("Germany", "country"), "country:FRA": ("France", "country"),
              "subdivision:by": ("Bavaria", "subdivision"), "subdivision:sn": ("Saxony", "subdivision"),
              "subdivision:bre": ("Brittany", "subdivision"), "city:muc": ("Munich", "city"),
              "city:dre": ("Dresden", "city")}
    facts = [Triple("subdivision:by", "P131", "country:DEU"), Triple("subdivision:sn", "P131", "country:DEU"),
             Triple("subdivision:bre", "P131", "country:FRA"), Triple("subdivision:by", "P36", "city:muc"),
             Triple("subdivision:sn", "P36", "city:dre")]
    if count is not None:
        facts.append(Triple("country:DEU", DIVISION_COUNT, count, literal=True))
    entities = {eid: Entity(eid, label, kind) for eid, (label, kind) in labels.items()}
    return World(root, {}, entities, {}, {}, facts, {}, {}, {})


def _kg(world: World) -> KG:
    return KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)


# Germany's flag, Bavaria (the checkpoint: its flag) as the state of Germany, then its capital Munich
TO_MUNICH = Structure(branches=((Edge("country:DEU", "subdivision:by", "P131", False),
                                 Edge("subdivision:by", "city:muc", "P36", True)),), tail=(),
                      checkpoints=("subdivision:by",))


def _pin(world: World, structure: Structure):
    kinds = {eid: e.kind for eid, e in world.entities.items()}
    return pinning(structure, kinds, _kg(world), world)


def test_a_country_whose_stated_division_count_is_the_divisions_held_is_complete(tmp_path):
    assert complete_lists(_world(tmp_path), _kg(_world(tmp_path))) == {"country:DEU": 2}
    short = _world(tmp_path, count="16")  # fourteen states the world lacks: the list reads as open
    assert complete_lists(short, _kg(short)) == {}
    assert complete_lists(_world(tmp_path, None), _kg(_world(tmp_path, None))) == {}


def test_the_states_of_a_complete_country_are_closed_and_of_another_open(tmp_path):
    complete = {"country:DEU": 2}
    assert open_reason("P131", False, "country:DEU", complete) is None
    assert open_reason("P131", False, "country:FRA", complete) == "a country has many subdivisions; the world's " \
                                                                   "list may be partial"
    assert open_reason("P131", True, "subdivision:bre", complete) is None  # a division lies in one country
    assert _pin(_world(tmp_path), TO_MUNICH) == {}  # nothing to pin: Bavaria is read from Germany's two states
    missing = _pin(_world(tmp_path, count="16"), TO_MUNICH)
    assert missing == "subdivision:by (subdivision): a country has many subdivisions; the world's list may be " \
                      "partial, and nothing stated pins it"


def test_a_subdivision_flag_is_an_entry_image_through_the_variant_that_keeps_p131(small_world):
    from data_gen.neos.synth import _DEAD_ENDS, RELATION_VARIANTS, SynthConfig, Synthesizer

    world = World.load(small_world)
    keeps_p131 = _DEAD_ENDS - {"P131"}
    assert RELATION_VARIANTS[-1] == keeps_p131
    # Catalan is Andorra's language alone; Andorra lies in Southern Europe with Spain, and with capitals, currencies
    # and languages withheld Spain is singled out by its first division, Andalusia, whose flag no reader recognises
    tasks = [c.task for c in Synthesizer(world, config=SynthConfig(variants=(keeps_p131,))).synthesize(
        "lang:cat").candidates if c.task]
    paths = {(t.entry_images[0].entity_id, tuple(s.target for s in t.steps)) for t in tasks}
    andorra = ("country:ESP", "subregion:southern_europe", "country:AND", "lang:cat")
    assert ("subdivision:spain:andalucia", andorra) in paths
    others = SynthConfig(variants=RELATION_VARIANTS[:-1])
    assert not any(c.task for c in Synthesizer(world, config=others).synthesize("lang:cat").candidates)


def test_a_demonym_is_reached_from_a_subdivision_flag_through_the_last_seed_free_variant(small_world):
    from data_gen.neos.synth import SEED_FREE_VARIANTS, SynthConfig, Synthesizer

    world = World.load(small_world)
    andorran = next(e.id for e in world.entities.values() if e.kind == "nationality" and e.label == "Andorran")
    last = SEED_FREE_VARIANTS[-1]
    assert "P131" not in last and {"P37", "P38", "P1549"} <= last
    # the demonym's own fact is kept at the seed; Andorra is known by its border with Spain (its language and the
    # euro withheld), Spain by its first division, Andalusia, whose flag is the entry image
    tasks = [c.task for c in Synthesizer(world, config=SynthConfig(variants=(), seed_free_variants=(last,)))
             .synthesize(andorran).candidates if c.task]
    paths = {(t.entry_images[0].entity_id, tuple(s.target for s in t.steps)) for t in tasks}
    assert paths == {("subdivision:spain:andalucia", ("country:ESP", "country:AND", andorran))}
    before = SynthConfig(variants=(), seed_free_variants=SEED_FREE_VARIANTS[:-1])
    assert not any(c.task for c in Synthesizer(world, config=before).synthesize(andorran).candidates)
