"""Issue 36's goals on a whole ModalSearch run of the small world (the session's ``modalsearch_run``):
the expert's trajectories, the SFT data, hold no step a policy could not have taken; it compared every image a
reverse search said looks like the question's; no question starts from an image that prints a name; at least 40% of
the questions carry the search-required label (the paper's generated data: 57.6%), fewer once the closed-book probe
takes out what a strong model answers without a tool (docs/benchmarks.md has the figures); numbers the world's
sources disagree on are counted, not asked."""

import json

from data_gen.modalsearch.expert import MATCHING
from data_gen.modalsearch.replay import unexplained
from data_gen.neos.observer import NAMED_SOURCES
from neos_core.world.store import World


def test_no_trajectory_of_the_run_takes_an_unexplained_step(modalsearch_run, small_world):
    _, stats, verified = modalsearch_run
    world = World.load(small_world)
    names = {e.label for e in world.entities.values() if len(e.label) >= 4}
    assert stats["verified"] == len(verified) == 12  # MODALSEARCH_RUN_LIMIT
    problems = {o["key"]: unexplained(o["trajectory"]["turns"], o["task"]["question"], names,
                                      1 if o["task"]["start_image_id"] else 0) for o in verified}
    assert not {k: p for k, p in problems.items() if p}
    # the text starts were found through a search of what the question names, never read first
    text_starts = [o for o in verified if not o["task"]["start_image_id"]]
    assert text_starts and all(o["trajectory"]["turns"][0]["calls"][0]["tool_name"] == "t2t_search"
                               for o in text_starts)


def test_every_reverse_search_match_is_loaded_and_compared_before_a_page_is_read(modalsearch_run):
    _, _, verified = modalsearch_run
    searched = 0
    for o in verified:
        turns = o["trajectory"]["turns"]
        for i, turn in enumerate(turns):
            call = turn["calls"][0] if turn["calls"] else None
            if call is None or call["tool_name"] != "i2i_search":
                continue
            lines = call["observation"].splitlines()
            shown = [lines[j + 1].split("URL: ")[1] for j, line in enumerate(lines[:-1])
                     if any(f"] ({state})" in line for state in MATCHING)]
            loads = []
            for later in turns[i + 1:]:
                if later["calls"] and later["calls"][0]["images_added"]:
                    loads.append(later["calls"][0]["arguments"]["url"])
                else:
                    break
            assert loads == shown, (o["key"], loads)
            searched += 1
            assert "Only \u201c" in turns[i + len(loads) + 1]["text"]  # the choice, after every comparison
    # every reverse search of the run was checked; how many show look-alikes depends on the questions' start images
    # (seed 0: 5 of 20 questions on the world before the airports and the Factbook's points, none since; 3 and 6 in the
    # 60-question runs of seeds 0 and 1), so the comparison of several is test_modalsearch_honest's own test
    assert searched >= 3


def test_no_start_image_prints_a_name_and_the_search_required_share_holds(modalsearch_run, small_world):
    out, stats, verified = modalsearch_run
    world = World.load(small_world)
    starts = [o["task"]["start_image_id"] for o in verified if o["task"]["start_image_id"]]
    assert starts and not [s for s in starts if world.images[s].source in NAMED_SOURCES]
    labelled = [o["task"] for o in verified if o["task"]["label"] == "search_required"]
    assert stats["search_required_share_without_probe"] == round(len(labelled) / len(verified), 4) >= 0.4
    # the closed-book probe takes out what a strong model answers from the flags and facts it knows
    moved = sum(t["closed_book"] for t in labelled)
    assert stats["closed_book_moved"] == moved > 0
    assert stats["search_required_share"] == round((len(labelled) - moved) / len(verified), 4) > 0
    # the flag clues' candidates were each fetched: their flags' pixels are in the SFT rows (with the start image)
    rows = {r["id"]: r for r in map(json.loads, (out / "sft.jsonl").read_text().splitlines())}
    clued = [o["task"] for o in verified if o["key"] in rows and any(h["peers"] for h in o["task"]["hops"])]
    assert clued and all(len(rows[t["id"]]["images"]) >= sum(len(h["peers"]) for h in t["hops"])
                         + bool(t["start_image_id"]) for t in clued)


def test_numbers_the_sources_disagree_on_are_counted_not_asked(modalsearch_run):
    _, stats, verified = modalsearch_run
    assert stats["terminal_facts_not_asked"]["source_conflict"] > 0
    assert stats["terminal_facts_not_asked"]["number_undated"] > 0
    populations = [o["task"] for o in verified if o["task"]["answer_type"] == "literal:population"]
    assert all("what was the" in t["question"] for t in populations)  # dated, as of its year, or not asked
