"""Answer diversity of Neos task synthesis (issue 19): a river known only by its country becomes an answer through
the seed-free variants, and so does a country's only citizen (not through the occupation), kinds take turns in the
seed order and within a kind the seeds closed facts single out from a pictured entity come first, no answer type
takes more than its share of a run, the new relations read as English, and stats.json reports type and relation
diversity, and the next seed is of a kind with the fewest verified tasks."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from data_gen.common.stats import Shares, answer_type_cap, diversity
from data_gen.kg.distinguish import DistinguishingConfig
from data_gen.neos.cli import answer_type, kinds_with_room_first, share_rule, short_of_limit
from data_gen.neos.flags import ANSWER_TYPE_SHARE
from neos_core.neos_tasks import Step, Task
from data_gen.neos.synth import SEED_FREE_VARIANTS, SynthConfig, Synthesizer
from neos_core.world.model import Entity
from neos_core.world.model import Triple
from neos_core.world.store import World

RED, BLUE, GREEN = (210, 20, 40), (0, 60, 170), (0, 140, 70)


def _world(root: Path, flag_images, more: tuple[tuple[str, str, str], ...] = ()) -> World:
    """River W flows through X alone; X is the only country bordering B, and B the only island state of region R,
    whose other part A has a flag: the path A -part of-> R -part of^-1-> B* -borders-> X -river in^-1-> W. X's
    capital K singles it out in one fact, as a real country's does, and leads to no image. ``more``: further
    facts, their new entities of the kind their id's namespace names."""
    flagged = {"country:A": RED, "country:B": BLUE, "country:X": GREEN}
    entities = {eid: Entity(eid, f"Place {eid[-1]}", "country", page_id=eid[-1]) for eid in flagged}
    entities |= {"region:R": Entity("region:R", "Zone R", "region", page_id="R"),
                 "river:W": Entity("river:W", "Stream W", "river", page_id="W"),
                 "city:K": Entity("city:K", "Town K", "city", page_id="K"),
                 "x:island": Entity("x:island", "island state", "class")}
    images = flag_images(root, flagged)
    facts = [("river:W", "x:river_in", "country:X"), ("country:B", "P47", "country:X"),
             ("country:X", "P47", "country:B"), ("country:A", "P361", "region:R"), ("country:B", "P361", "region:R"),
             ("country:B", "P31", "x:island"), ("city:K", "P1376", "country:X"), ("country:X", "P36", "city:K"),
             *more]
    for eid in {e for s, _, o in more for e in (s, o)} - set(entities):
        entities[eid] = Entity(eid, f"Name {eid.split(':')[1]}", eid.split(":")[0], page_id=eid.split(":")[1])
    return World(root, {}, entities, {}, images, [Triple(*t) for t in facts], {}, {}, {})


def test_a_river_known_only_by_its_country_is_reached_through_a_seed_free_variant(tmp_path, flag_images):
    world = _world(tmp_path, flag_images)
    config = SynthConfig(seed_free_variants=SEED_FREE_VARIANTS)  # what the CLI runs on a world
    result = Synthesizer(world, seed=0, config=config).synthesize("river:W")
    assert {c.structure.answer for c in result.candidates} == {"river:W"}, result.counts
    paths = {tuple(e.relation for e in c.structure.edges) for c in result.candidates}
    assert ("P361", "P361", "P47", "x:river_in") in paths
    # the five RELATION_VARIANTS that withhold the dead ends (x:river_in among them) at the seed too
    assert result.counts["not_distinguishable"] == 5
    # the other variants either withhold x:river_in from the seed too (the river has no other fact) or let the
    # capital identify X (a dead end)
    alone = Synthesizer(world, seed=0).synthesize("river:W")  # the default: no seed-free variants
    assert not alone.candidates and alone.counts == {"not_distinguishable": 5, "no_structure": 3}


def test_kinds_take_turns_in_the_seed_order(tmp_path, flag_images):
    seeds = Synthesizer(_world(tmp_path, flag_images), seed=0).seeds()
    kinds = [s.split(":")[0] for s in seeds]
    # a river is not seeded: it is reached only through an open-world relation (its SEED_KINDS comment)
    assert sorted(seeds) == ["city:K", "country:A", "country:B", "country:X", "region:R"]
    assert set(kinds[:3]) == {"city", "country", "region"} and kinds[3:] == ["country", "country"]



@pytest.mark.parametrize("limit, cap", [(None, None), (1, 1), (2, 1), (10, 3), (60, 21), (100, 35)])
def test_no_answer_type_above_its_share_of_a_limited_run_and_at_least_one(limit, cap):
    assert answer_type_cap(limit, 0.35) == cap


# Neos's own cap, 13%: int(0.13 * 60) = 7 (11.7% of 60), int(0.13 * 100) = 13, int(0.13 * 10) = 1
@pytest.mark.parametrize("limit, cap", [(None, None), (10, 1), (60, 7), (100, 13)])
def test_no_neos_answer_type_above_13_percent_of_a_limited_run(limit, cap):
    assert answer_type_cap(limit, ANSWER_TYPE_SHARE) == cap
    assert Shares.of_run(limit, ANSWER_TYPE_SHARE).type_cap == cap


def test_a_run_short_of_its_limit_says_which_types_were_at_their_cap():
    stats = {"verified": 9, "answer_type_cap": 7, "answer_types": {"dish": 7, "script": 2}}
    assert short_of_limit(stats, 60) == ("9 of --limit 60 tasks verified: every seed was tried; answer types at their "
                                         "cap of 7: dish; below it: script 2")
    assert short_of_limit(stats, 9) is None and short_of_limit(stats, None) is None


# Person P is X's only citizen and the only one of occupation O; Q and S are both B's citizens and of occupation T,
# so no one fact singles either out.
PEOPLE = (("person:P", "P27", "country:X"), ("person:P", "P106", "occupation:O"), ("person:Q", "P27", "country:B"),
          ("person:Q", "P106", "occupation:T"), ("person:S", "P27", "country:B"), ("person:S", "P106", "occupation:T"))


def test_a_countrys_only_citizen_is_reached_through_the_country_not_through_the_occupation(tmp_path, flag_images):
    config = SynthConfig(seed_free_variants=SEED_FREE_VARIANTS)
    result = Synthesizer(_world(tmp_path, flag_images, PEOPLE), seed=0, config=config).synthesize("person:P")
    assert {c.structure.answer for c in result.candidates} == {"person:P"}, result.counts
    paths = {tuple(e.relation for e in c.structure.edges) for c in result.candidates}
    assert ("P361", "P361", "P47", "P27") in paths and not any("P106" in p for p in paths)
    # without the occupation's two bits of penalty, P106 (sorting first) wins the seed's set on the tie: a dead end
    flat = replace(config, expansion=replace(config.expansion, distinguishing=DistinguishingConfig()))
    alone = Synthesizer(_world(tmp_path, flag_images, PEOPLE), seed=0, config=flat).synthesize("person:P")
    assert not alone.candidates


def test_within_a_kind_only_closed_facts_from_a_pictured_entity_pin_a_seed(tmp_path, flag_images):
    synth = Synthesizer(_world(tmp_path, flag_images, PEOPLE), seed=0)
    assert synth._pinned("city:K") == 1  # X's capital: a country has one
    # X's only citizen and its only river in the world: "the person who is a citizen of X" and "the river that
    # flows through X" are open, so they pin nothing (the discoverers that closed facts pin: test_neos_elements)
    assert synth._pinned("person:P") is None and synth._pinned("river:W") is None
    assert synth._pinned("person:Q") is None and synth._pinned("occupation:O") is None


def _task(answer_entity: str, kind: str) -> Task:
    step = Step(index=0, source="country:A", target=answer_entity, relation="P47", relation_label="border",
                forward=True, fact=("country:A", "P47", answer_entity), source_name="A", target_name="T",
                source_page_url=None, target_page_url=None, checkpoint=False, span="s")
    return Task(id=answer_entity, world_hash="h", seed=0, structure_type="path", structure={}, question="q",
                entry_images=[{"image_id": "i", "url": "u", "entity_id": "country:A"}], answer=answer_entity,
                answer_entity=answer_entity, answer_type=kind, aliases=[], steps=[step, step])


def test_the_type_cap_rejects_the_task_after_the_cap_and_the_answer_cap_comes_first():
    shares = Shares(cap=1, type_cap=2)
    for task in (_task("river:1", "river"), _task("river:2", "river")):
        assert share_rule(task, shares) is None
        shares.count(task.answer_entity, answer_type(task))
    third = share_rule(_task("river:3", "river"), shares)
    assert third == ("answer_type_share", "2 verified tasks already answer a river")
    assert share_rule(_task("lake:1", "lake"), shares) is None
    assert share_rule(_task("river:1", "river"), shares)[0] == "answer_share"
    assert share_rule(_task("river:3", "river"), Shares(cap=1, type_cap=None)) is None  # no --limit: no type cap


def test_an_older_log_without_answer_types_falls_back_to_the_id_namespace():
    assert answer_type(_task("lang:fra", "")) == "lang" and answer_type(_task("lang:fra", "language")) == "language"


def test_stats_report_answer_type_and_relation_diversity():
    d = diversity(["x", "x", "y", "z"], ["city", "city", "river", "nationality"],
                  ["capital", "border", "capital", "member of"], ["p: a", "p: a", "p: b", "c: a"])
    assert d["distinct_answer_types"] == 3 and d["max_answer_type_share"] == 0.5
    assert d["answer_types"] == {"city": 2, "river": 1, "nationality": 1}
    assert d["distinct_relations"] == 3 and d["relations"] == Counter(capital=2, border=1, **{"member of": 1})
    empty = diversity([], [], [], [])
    assert empty["max_answer_type_share"] == 0.0 and empty["distinct_answer_types"] == 0


@pytest.mark.parametrize("value", ["1.5", "-0.1", "many"])
def test_an_answer_type_share_outside_0_to_1_is_one_line_naming_the_flag(value, tmp_path, capsys):
    from data_gen.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["neos", "--world", str(tmp_path), "--out", str(tmp_path / "out"), "--answer-type-share", value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "argument --answer-type-share" in err
    assert not (tmp_path / "out").exists()


def test_an_answer_type_share_without_a_limit_is_refused_before_anything_is_written(tmp_path, capsys):
    from data_gen.__main__ import main

    out = tmp_path / "out"
    assert main(["neos", "--world", str(tmp_path), "--out", str(out), "--answer-type-share", "0.2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--answer-type-share only applies with --limit" in err
    assert not out.exists()


def test_the_next_seed_is_of_a_kind_with_the_fewest_verified_tasks():
    """Issue 36: the run's last tasks go to kinds not yet answered. Seeds a1 a2 a3 b1 b2 c1 (kind: first letter);
    a1 verifies, b1 does not: b2 comes before a2 (b has none yet), then c1, then a's rest."""
    shares = Shares(cap=1, type_cap=None)
    order = kinds_with_room_first(["a1", "a2", "a3", "b1", "b2", "c1"], lambda s: s[0], shares)
    assert next(order) == "a1"
    shares.count("answer:a1", "a")
    assert [next(order), next(order), next(order)] == ["b1", "b2", "c1"]  # kinds with none, in the seeds' order
    assert list(order) == ["a2", "a3"]
    # no verified task at all: the synthesizer's order, kinds taking turns as it gave them
    assert list(kinds_with_room_first(["a1", "b1", "a2", "b2"], lambda s: s[0], Shares(cap=1, type_cap=None))) == \
        ["a1", "b1", "a2", "b2"]

