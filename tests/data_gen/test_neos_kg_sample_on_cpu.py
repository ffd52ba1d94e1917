"""``python -m data_gen neos --kg`` on the vendored real Wikidata sample (``data_gen/kg/samples``, provenance in its
README): a December 2014 ``.json.bz2`` dump excerpt, read as published, becomes a world and verified tasks whose
every fact is in the dump. Commons pixels are not available offline: each file the statements name is stood in by
a striped placeholder under its real name (so the tasks' colour clauses describe placeholders)."""

import hashlib
import json
from argparse import Namespace
from pathlib import Path

import pytest
from PIL import Image

from data_gen.neos.cli import main as neos_main
from data_gen.neos.kg_world import image_files, read_graph
from neos_core.world.store import World

SAMPLE = Path(__file__).parents[2] / "data_gen" / "kg" / "samples" / "wikidata-2014-sample.json.bz2"
STRIPES = [(206, 17, 38), (255, 255, 255), (0, 56, 147), (0, 122, 61), (252, 209, 22), (0, 0, 0)]


def _placeholders(names: set[str], folder: Path) -> None:
    """Three stripes a file, picked from its name's hash: distinct images under the dump's own file names."""
    for name in names:
        colours = [STRIPES[b % len(STRIPES)] for b in hashlib.sha256(name.encode()).digest()[:3]]
        if name.lower().endswith(".svg"):
            rects = "".join(f'<rect y="{20 * i}" width="90" height="20" fill="rgb{c}"/>' for i, c in enumerate(colours))
            (folder / name).write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="90" height="60">{rects}</svg>')
        else:
            image = Image.new("RGB", (90, 60))
            for i, c in enumerate(colours):
                image.paste(c, (0, 20 * i, 90, 20 * i + 20))
            image.save(folder / name, "PNG" if name.lower().endswith(".png") else "JPEG")


@pytest.fixture(scope="module")
def graph():
    return read_graph(SAMPLE, progress=False)


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory, graph):
    root = tmp_path_factory.mktemp("kg_sample")
    (root / "images").mkdir()
    _placeholders(image_files(graph), root / "images")
    args = Namespace(world=None, kg=SAMPLE, kg_images=root / "images", kg_entities=None, out=root / "out", seed=0,
                     limit=None, ocr=False, llm_url=None, llm_model="probe", vlm_url=None, vlm_model=None,
                     teacher_url=None)
    assert neos_main(args) == 0
    return root / "out"


def test_the_sample_reads_as_published(graph):
    """1,704 entities (400 items, 1,304 properties), none malformed; real facts of its countries."""
    assert graph.malformed == 0 and len(graph.labels) == 1704
    assert sum(q.startswith("Q") for q in graph.labels) == 400
    assert len(graph.triples) == 6744 and len(graph.literals) == 4798
    assert {("Q33", "P36", "Q1757"), ("Q45", "P36", "Q597"), ("Q31", "P47", "Q55")} <= graph.triples
    assert graph.labels["Q1757"] == "Helsinki" and graph.labels["P36"] == "capital"
    assert ("Q31", "P41", "Flag of Belgium.svg") in graph.literals


def test_the_sample_becomes_a_world_with_every_image_statement(sample_out):
    world = World.load(sample_out / "kg_world")
    counts = world.manifest["counts"]
    assert counts["entities"] == 399 and counts["triples"] == 274 and counts["relations"] == 27
    assert counts["entities_by_kind"]["country"] == 35 and counts["entities_by_kind"]["city"] == 48
    assert world.manifest["self_loops_dropped"] == 40 and world.manifest["unlabelled_properties"] == []
    # geography (Q1071) has four truthy P18 values: each is an image (one id for all once lost 43 of 510)
    assert counts["images"] == 510 and world.manifest["images_missing"] == 0
    assert {"p18_q1071", "p18_q1071_2", "p18_q1071_3", "p18_q1071_4"} <= set(world.images)
    assert "Finland's capital is Helsinki." in world.pages[world.entities["country:Q33"].page_id].text


def test_verified_tasks_stand_on_the_dumps_facts(sample_out, graph):
    stats = json.loads((sample_out / "stats.json").read_text())
    assert stats["verified"] >= 1
    assert stats["kg"]["malformed_entities"] == 0 and stats["kg"]["images_missing"] == 0
    assert stats["closed_book_recognised_images"] == 0  # Commons files: the probe rejects nothing, counted and warned
    outcomes = [json.loads(line) for line in (sample_out / "results.jsonl").read_text().splitlines()]
    verified = [o["task"] for o in outcomes if o["status"] == "verified"]
    assert len(verified) == stats["verified"]
    for task in verified:
        assert graph.labels[task["answer_entity"].split(":")[1]] == task["answer"]
        for step in task["steps"]:
            s, p, o = step["fact"]
            assert (s.split(":")[1], p, o.split(":")[1]) in graph.triples
