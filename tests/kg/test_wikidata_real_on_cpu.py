"""The ``--kg`` reader on real Wikidata data (``fixtures/real``, provenance in its README): the Wikimedia dump
layout in every compression it is published in, both entity JSON forms, ``mul`` labels, and the world's self-loops
and property labels."""

import bz2
import gzip
import json
from pathlib import Path

import pytest
from PIL import Image

from data_gen.kg.wikidata import Subset, read_json_dump
from data_gen.neos.kg_world import read_graph, write_world

REAL = Path(__file__).parent / "fixtures" / "real"
SAMPLE = REAL / "sample-dump-20150815.json.gz"
COMPRESS = {".json": lambda b: b, ".json.gz": gzip.compress, ".json.bz2": bz2.compress}


def _entities() -> dict[str, dict]:
    lines = (REAL / "wdtk_entities.json").read_text(encoding="utf-8").splitlines()
    return {e["id"]: e for e in (json.loads(line.rstrip(",")) for line in lines if line not in ("[", "]"))}


def _dump(path: Path, entities: list[dict]) -> Path:
    """``entities`` in the dump layout, compressed as ``path``'s suffix says."""
    text = "[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in entities) + "\n]\n"
    path.write_bytes(COMPRESS["".join(path.suffixes[-2:]) if path.suffix != ".json" else ".json"](text.encode()))
    return path


@pytest.mark.parametrize("suffix", list(COMPRESS))
def test_the_real_2015_dump_sample_reads_in_every_published_compression(tmp_path, suffix):
    """Wikidata-Toolkit's real dump sample (older form throughout): the old reader stopped at its second line."""
    path = tmp_path / f"sample{suffix}"
    path.write_bytes(COMPRESS[suffix](gzip.decompress(SAMPLE.read_bytes())))
    graph = read_graph(path, progress=False)
    assert graph.malformed == 0
    assert ("Q1", "P31", "Q1454986") in graph.triples and ("Q8", "P31", "Q331769") in graph.triples
    assert len(graph.triples) > 100 and all(o[0] in "QPL" and o[1:].isdigit() for _, _, o in graph.triples)


def test_real_entities_in_both_forms_and_property_labels(tmp_path):
    graph = read_graph(_dump(tmp_path / "real.json.bz2", list(_entities().values())), progress=False)
    assert ("Q42", "P31", "Q5") in graph.triples  # older form: {"entity-type": "item", "numeric-id": 5}
    assert ("Q1040", "P17", "Q183") in graph.triples  # current form: "id": "Q183"
    assert graph.labels["Q42"] == "Douglas Adams" and graph.labels["P31"] == "instance of"
    subset = read_graph(_dump(tmp_path / "real.json.gz", list(_entities().values())), Subset(frozenset({"Q42"})),
                        progress=False)
    assert subset.labels.keys() == {"Q42", "P31"}  # properties' names kept outside the subset: they label relations


def test_a_mul_only_label_is_the_entitys_name():
    """Real Q1 with its labels reduced to the one ``mul`` label (derived, see the README)."""
    universe = _entities()["Q1"]
    universe["labels"] = {"mul": {"language": "mul", "value": universe["labels"]["en"]["value"]}}
    graph = read_json_dump(["[", json.dumps(universe), "]"])
    assert graph.labels["Q1"] == "universe"
    assert read_json_dump([json.dumps(universe)], Subset(fallbacks=())).labels == {}


def test_a_malformed_real_entity_is_skipped_and_named(tmp_path, caplog):
    entities = _entities()
    broken = dict(entities["Q42"], claims={"P31": [{"mainsnak": {"snaktype": "value", "datavalue": {
        "type": "wikibase-entityid", "value": {"numeric-id": 5}}}}]})  # no entity-type: no id can be built
    path = _dump(tmp_path / "bad.json.gz", [entities["Q1040"], broken, entities["Q1"]])
    graph = read_graph(path, progress=False)
    assert graph.malformed == 1 and "bad.json.gz:3: malformed statement" in caplog.text
    assert ("Q1040", "P17", "Q183") in graph.triples and not any(s == "Q42" for s, _, _ in graph.triples)


def test_the_world_drops_self_loops_and_counts_unlabelled_properties(tmp_path):
    """Real Q1 and Q42 with two added statements (derived): Q1 'different from' (P1889) itself and Q42."""
    entities = _entities()
    universe = entities["Q1"]
    universe["claims"]["P1889"] = [{"rank": "normal", "mainsnak": {"snaktype": "value", "property": "P1889",
                                    "datavalue": {"type": "wikibase-entityid", "value": {"id": q}}}}
                                   for q in ("Q1", "Q42")]
    dump = _dump(tmp_path / "loop.json", [universe, entities["Q42"]])
    images = tmp_path / "images"
    images.mkdir()
    for name in ("Hubble ultra deep field.jpg", "Douglas adams portrait cropped.jpg"):
        Image.new("RGB", (8, 8)).save(images / name, "JPEG")
    manifest = write_world(read_graph(dump, progress=False), images, tmp_path / "world", dump)
    triples = [json.loads(line) for line in (tmp_path / "world" / "triples.jsonl").read_text().splitlines()]
    assert [(t["s"], t["p"], t["o"]) for t in triples] == [("entity:Q1", "P1889", "person:Q42")]
    assert manifest["self_loops_dropped"] == 1
    assert manifest["unlabelled_properties"] == ["P1889"]
