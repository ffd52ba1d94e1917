"""The interleaved graph: Eq. 3's retrievability rule, node reuse with deferred edge completion, persistence, and
the offline text/visual/image expansion on the small world (visual expansion through the real tool server)."""

from dataclasses import replace

import pytest

from data_gen.kg import KG
from data_gen.modalsearch.build import BuildConfig, GraphBuilder, image_id, text_id
from data_gen.modalsearch.graph import Assembly, Graph, GraphEdge, Node, Relation
from data_gen.modalsearch.linking import OfflineImageLinker
from data_gen.modalsearch.relations import OfflineRelationProposer
from data_gen.modalsearch.visual import (
    OfflineConsistencyJudge,
    OfflineVisualProposer,
    ToolServerImageSearch,
    assess,
    stably_retrievable,
)
from data_gen.neos.observer import rapid_ocr
from neos_core.world.model import Page
from neos_core.world.store import World
from verl_ext.tools.client import ToolServerClient


@pytest.mark.parametrize("n,m,stable", [
    (0, 0, False), (1, 1, False),  # N >= 2 fails
    (2, 1, False), (2, 2, True),  # max(2, 1) = 2
    (3, 1, False), (3, 2, True),  # max(2, 2) = 2
    (4, 1, False), (4, 2, True),
    (5, 2, False), (5, 3, True),  # ceil(5/2) = 3
    (6, 3, True), (7, 3, False), (7, 4, True),
])
def test_retrievability_rule(n, m, stable):
    assert stably_retrievable(n, m) is stable


def _node(nid):
    return Node(nid, "text", nid, nid, "thing", f"u:{nid}")


def test_assembly_reuses_nodes_defers_edges_and_never_expands_twice():
    asm = Assembly(Graph("train"), max_nodes=10, blocked=frozenset({"z"}))
    asm.materialize(_node("a"))
    asm.materialize(_node("b"))
    r = Relation("r {x}", unique=True)
    asm.propose("a", "c", "t2t", r)  # unseen: queued, edge deferred
    asm.propose("b", "c", "t2t", r)  # queued already: not queued again, a second deferred edge
    asm.propose("a", "b", "t2t", r)  # existing node: reused, edge inserted at once
    asm.propose("a", "z", "t2t", r)  # blocked (the other graph's): neither queued nor deferred
    assert list(asm.queue) == ["c"] and asm.reused == 1
    assert asm.graph.has_edge("a", "b") and not asm.graph.has_edge("a", "c")
    assert asm.deferred == {"c": [("a", "t2t", r), ("b", "t2t", r)]}
    asm.materialize(_node(asm.queue.popleft()))
    assert asm.graph.has_edge("a", "c") and asm.graph.has_edge("b", "c") and asm.deferred_completed == 2
    assert not asm.enqueue("c") and "z" not in asm.queued


def test_graph_round_trips_and_refuses_another_fingerprint(tmp_path):
    g = Graph("benchmark")
    g.add_node(_node("a"))
    g.add_node(Node("i", "image", "i", "Pic", "picture", "u:i", description="d", stable=True))
    g.add_edge(GraphEdge("a", "i", "t2i", Relation("is the picture of {x}", unique=True, source="retrievability")))
    g.save(tmp_path / "g.json", "fp1")
    back = Graph.load(tmp_path / "g.json", "fp1")
    assert back is not None and back.nodes == g.nodes and list(back.edges()) == list(g.edges())
    assert Graph.load(tmp_path / "g.json", "fp2") is None and Graph.load(tmp_path / "none.json", "fp1") is None


@pytest.fixture(scope="module")
def world_kg(small_world):
    world = World.load(small_world)
    return world, KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)


async def test_text_relations_come_from_the_kg_or_a_masked_context_sentence(world_kg):
    world, kg = world_kg
    proposer = OfflineRelationProposer(world, kg)
    france, paris, belgium = (world.pages[p] for p in ("France", "Paris", "Belgium"))
    capital = await proposer.propose(france, paris)
    assert (capital.phrase, capital.unique, capital.kg_relation) == ("is the capital of {x}", True, "P36")
    # France has 8 neighbours; Belgium is the only one starting with B, Spain shares its S with Switzerland. The
    # clue comes first: after the relation it attached to the nearest noun of what replaces {x} (before 2026-12-06:
    # "shares a border with {x}, and whose name begins with “B”").
    border = await proposer.propose(france, belgium)
    assert border.phrase == "whose name begins with \u201cB\u201d and that shares a border with {x}" and border.unique
    # Paris from France's side ends with {x}, so nothing trails a nested reference (before: "has {x} as its capital");
    # Paris is also Île-de-France's capital (subdivision capitals are cities), so France needs its initial first
    capital_of = await proposer.propose(paris, france)
    assert capital_of.phrase == "whose name begins with \u201cF\u201d and whose capital is {x}"
    spain = await proposer.propose(france, world.pages["Spain"])
    assert spain.phrase == "shares a border with {x}" and spain.unique is False
    no_entity = Page("Lists_of_places", "u:lists", "Lists of places", "France is listed here.", "test")
    assert await proposer.propose(france, no_entity) is None  # not a concrete entity
    relations = [await proposer.propose(france, world.pages[t]) for t in france.links]
    context = next(r for r in relations if r and r.source == "context_template")
    assert "___" in context.phrase and context.phrase.endswith("of the article on {x}")


def test_image_linking_verifies_depiction_and_kg_relations(world_kg):
    world, kg = world_kg
    linked = {l.page.id: l.relation for l in OfflineImageLinker(world, kg).link(world.images["map_fra"])}
    assert linked["France"].phrase == "is the country depicted in {x}" and linked["France"].source == "depiction"
    region = linked["Western_Europe"]
    assert region.source == "kg_via_depiction" and "depicted in {x}" in region.phrase


async def test_a_flag_caption_is_stably_retrievable_through_the_tool_server(world_kg, tool_server):
    world, _ = world_kg
    france = world.pages["France"]
    proposals = OfflineVisualProposer(world).propose(france)
    flag = next(p for p in proposals if p.description == "national flag of France")
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        search = ToolServerImageSearch(client)
        result = await assess(flag, france, search, OfflineConsistencyJudge(world), world)
        await search.close()
    assert search.calls == 3  # K_img = 3 searchers
    assert (result.n, result.m, result.node.id, result.consistent, result.stable) == (3, 3, "flag_fra", True, True)


async def test_build_links_text_and_image_nodes_with_typed_edges(world_kg, tool_server):
    world, kg = world_kg
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        search = ToolServerImageSearch(client)
        builder = GraphBuilder(world, kg, search, config=BuildConfig(max_nodes=30))
        graph, stats = await builder.build("train", ["France"])
        await search.close()
    assert len(graph.nodes) == 30 and graph.nodes[text_id("France")].kind == "text"
    assert graph.has_edge(text_id("France"), image_id("flag_fra"))
    assert graph.out[image_id("flag_fra")][text_id("France")].kind == "i2t"
    counts = graph.counts()
    assert counts["t2t"] and counts["t2i"] and counts["i2t"] and stats.counts["deferred_edges_completed"] > 0
    assert all(n.stable == any(e.target == n.id and e.kind == "t2i" for e in graph.edges())
               for n in graph.nodes.values() if n.kind == "image")


def test_ocr_links_an_entity_the_pixels_name_and_the_metadata_does_not(world_kg):
    """A map whose metadata is blanked: only the real OCR reads the country's name written on it (RapidOCR)."""
    world, kg = world_kg
    blank = replace(world.images["map_fra"], caption="", alt="", page_id=None)
    assert OfflineImageLinker(world, kg).link(blank) == []
    linker = OfflineImageLinker(world, kg, ocr=rapid_ocr())
    linked = {l.page.id: l.relation for l in linker.link(blank)}
    assert linked["France"].phrase == "is the country depicted in {x}" and linked["France"].source == "depiction"
    assert linker.counts.recognized_by_ocr == linker.counts.recognized >= 1
    # with its metadata, OCR adds nothing new: the caption already names France
    with_metadata = OfflineImageLinker(world, kg, ocr=rapid_ocr())
    with_metadata.link(world.images["map_fra"])
    assert with_metadata.counts.recognized_by_ocr == 0
