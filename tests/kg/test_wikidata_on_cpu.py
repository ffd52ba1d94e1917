"""The Wikidata loader on a hand-written fixture in both dump formats (JSON dump lines, truthy N-Triples): the same
truthy graph from either, ranks as Wikidata defines truthy, the snapshot subset, names, literals, and a bad line
named by file and line."""

from pathlib import Path

import pytest

from data_gen.kg import distinguishing_set
from data_gen.kg.wikidata import Subset, WikidataFormatError, read_json_dump, read_truthy_ntriples

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = {  # worked out from the fixture by hand; France's capital Q1 is normal rank beside a preferred Q90
    ("Q142", "P36", "Q90"), ("Q142", "P47", "Q183"), ("Q142", "P30", "Q46"), ("Q90", "P1376", "Q142"),
    ("Q90", "P17", "Q142"), ("Q183", "P36", "Q64"), ("Q183", "P47", "Q142"), ("Q183", "P30", "Q46"),
    ("Q64", "P1376", "Q183"), ("Q64", "P17", "Q183"), ("Q2", "P31", "Q3504248"),
}


def _json(subset=Subset()):
    with (FIXTURES / "wikidata_dump.json").open() as fh:
        return read_json_dump(fh, subset, source="wikidata_dump.json")


def _nt(subset=Subset()):
    with (FIXTURES / "wikidata_truthy.nt").open() as fh:
        return read_truthy_ntriples(fh, subset, source="wikidata_truthy.nt")


@pytest.mark.parametrize("read", [_json, _nt])
def test_both_formats_give_the_truthy_graph_with_names_and_literals(read):
    graph = read()
    assert graph.triples == EXPECTED  # no deprecated currency, no non-preferred capital, no 'somevalue'
    assert graph.literals == {("Q142", "P297", "FR"), ("Q183", "P297", "DE")}
    assert graph.labels["Q142"] == "France" and graph.labels["Q90"] == "Paris"  # English, not German
    assert graph.aliases == {"Q142": ["French Republic"]}
    assert graph.descriptions["Q90"] == "capital of France"


def test_the_snapshot_subset_keeps_its_entities_and_relations_only():
    subset = Subset(entities=frozenset({"Q142", "Q90", "Q183", "Q64", "Q46"}),
                    relations=frozenset({"P36", "P47", "P30", "P1376"}))
    for graph in (_json(subset), _nt(subset)):
        assert graph.triples == {t for t in EXPECTED if t[1] in subset.relations and t[0] != "Q2"}
        assert "Q2" not in graph.labels and graph.literals == set()
    outside = Subset(entities=frozenset({"Q2"}))
    assert _json(outside).triples == set()  # Q3504248 lies outside the subset
    assert _json(Subset(entities=frozenset({"Q2"}), keep_outside_objects=True)).triples == {("Q2", "P31", "Q3504248")}


def test_the_loaded_kg_serves_the_synthesis_layer():
    kg = _nt().kg()
    assert kg.solve([("?c", "P36", "?x"), ("?c", "P47", "Q183")], None, "?x") == {"Q90"}
    facts = distinguishing_set(kg, "Q90")
    assert len(facts) == 1 and facts[0].neighbour == "Q142"  # Paris: the capital of France
    with_literals = _nt().kg(with_literals=True)
    assert with_literals.is_literal("FR") and not with_literals.is_literal("Q90")


def test_a_bad_line_is_named_by_file_and_line(tmp_path, caplog):
    """A malformed entity is skipped with a warning naming its line; past the threshold it is an error."""
    lines = (FIXTURES / "wikidata_dump.json").read_text().splitlines()
    lines[3] = lines[3][:40]
    graph = read_json_dump(lines, source="wikidata_dump.json")
    assert graph.malformed == 1 and ("Q142", "P36", "Q90") in graph.triples
    assert "wikidata_dump.json:4: not a Wikidata entity" in caplog.text
    with pytest.raises(WikidataFormatError, match=r"^wikidata_dump\.json:4: not a Wikidata entity.*more than 0"):
        read_json_dump(lines, source="wikidata_dump.json", max_malformed=0)
    with pytest.raises(WikidataFormatError, match=r"^x\.nt:2: not an N-Triples statement"):
        read_truthy_ntriples(['<http://www.wikidata.org/entity/Q1> <p> "a" .', "garbage"], source="x.nt")
