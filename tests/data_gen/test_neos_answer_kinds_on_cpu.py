"""Why no country ended a Neos task: a subdivision (P131) or a capital (P1376) singles its country out in one fact,
so greedy selection took it first in every relation variant, and neither leads anywhere (a subdivision has no other
fact, a city no image). On a hand-made world where the country is also reachable through an image-bearing
neighbour, some variant must build a structure ending at the country, and one ending at its capital."""

from pathlib import Path

from data_gen.neos.synth import SEED_KINDS, Synthesizer
from neos_core.world.model import Entity
from neos_core.world.model import Triple
from neos_core.world.store import World

RED, BLUE, GREEN, YELLOW = (210, 20, 40), (0, 60, 170), (0, 140, 70), (250, 210, 0)


def _world(root: Path, flag_images) -> World:
    """Country X: its subdivision S (a flag, no other fact) and its capital K (no image) single it out; so does B,
    the only country bordering X alone, found from A's flag through their shared region R (Sec. 3.3's path
    A -part of-> R -part of^-1-> B* -borders-> X, checkpoint B)."""
    flagged = {"country:A": RED, "country:B": BLUE, "country:X": GREEN, "subdivision:S": YELLOW}
    entities = {eid: Entity(eid, f"Place {eid[-1]}", eid.split(":")[0]) for eid in flagged}
    entities |= {"city:K": Entity("city:K", "Town K", "city"), "region:R": Entity("region:R", "Zone R", "region"),
                 "x:island": Entity("x:island", "island state", "class")}
    images = flag_images(root, flagged,
                         lambda eid: "kgeography-data" if eid.startswith("subdivision") else "flag-icons")
    facts = [("subdivision:S", "P131", "country:X"), ("city:K", "P1376", "country:X"), ("country:X", "P36", "city:K"),
             ("country:B", "P47", "country:X"), ("country:X", "P47", "country:B"),
             ("country:A", "P361", "region:R"), ("country:B", "P361", "region:R"), ("country:B", "P31", "x:island")]
    return World(root, {}, entities, {}, images, [Triple(*t) for t in facts], {}, {}, {})


def test_a_country_with_a_subdivision_and_a_capital_still_gets_a_structure(tmp_path, flag_images):
    synth = Synthesizer(_world(tmp_path, flag_images), seed=0)
    result = synth.synthesize("country:X")
    answers = {c.structure.answer for c in result.candidates}
    assert answers == {"country:X"}, result.counts
    paths = {tuple(e.relation for e in c.structure.edges) for c in result.candidates}
    assert ("P361", "P361", "P47") in paths


def test_a_capital_is_reached_through_its_country_without_the_subdivision(tmp_path, flag_images):
    # K is identified by its country X (P1376); X by S gives only the one-hop anchor S, so some variant must
    # identify X through B.
    synth = Synthesizer(_world(tmp_path, flag_images), seed=0)
    result = synth.synthesize("city:K")
    assert {c.structure.answer for c in result.candidates} == {"city:K"}, result.counts
    through_b = [c for c in result.candidates if "country:B" in c.structure.nodes]
    assert through_b, [[e.relation for e in c.structure.edges] for c in result.candidates]


def test_regions_and_continents_are_seeds():
    assert {"country", "us_state", "region", "continent"} <= SEED_KINDS
