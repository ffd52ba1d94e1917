"""Shared fixtures of the data-generation tests: a hand-built ModalSearch graph on the small world with a path helper
(the loopback chat server ``threaded_chat`` is in the root conftest)."""

from __future__ import annotations

import asyncio

import pytest
from PIL import Image

from data_gen.kg import KG
from data_gen.modalsearch.build import GraphBuilder, image_id, text_id
from data_gen.modalsearch.graph import Graph, GraphEdge, Relation
from data_gen.modalsearch.linking import OfflineImageLinker
from data_gen.modalsearch.relations import OfflineRelationProposer
from data_gen.modalsearch.sampler import Path
from neos_core.world.model import Image as ImageRecord
from neos_core.world.store import World


@pytest.fixture(scope="session")
def striped_png():
    """``striped_png(path, [(colour, height), ...])``: horizontal stripes (RGB or RGBA colours) on a 10-pixel-wide
    image, saved as PNG at ``path``, which it returns: hand-made flags with a known palette."""

    def make(path, stripes):
        im = Image.new("RGBA" if len(stripes[0][0]) == 4 else "RGB", (10, sum(h for _, h in stripes)))
        y = 0
        for colour, h in stripes:
            im.paste(colour, (0, y, 10, y + h))
            y += h
        im.save(path)
        return path

    return make


@pytest.fixture(scope="session")
def flag_images(striped_png):
    """``flag_images(root, {entity_id: colour}, source="flag-icons")``: a one-colour 10x8 flag per entity, saved under
    ``root``, and its world ImageRecord keyed by image id (the entity id with ``_`` for ``:``); ``source`` names each
    image's source, a string or a function of the entity id."""

    def make(root, flagged, source="flag-icons"):
        images = {}
        for eid, colour in flagged.items():
            name = eid.replace(":", "_")
            striped_png(root / f"{name}.png", [(colour, 8)])
            images[name] = ImageRecord(name, f"https://w.invalid/{name}.png", f"{name}.png", "", "",
                                       source(eid) if callable(source) else source, 10, 8, entity_id=eid)
        return images

    return make


MODALSEARCH_RUN_LIMIT = 12


@pytest.fixture(scope="session")
def modalsearch_run(small_world, tmp_path_factory, features_cached):
    """``python -m data_gen modalsearch --limit 12`` on the small world (defaults otherwise), run once for the
    session: (its output directory, stats.json, the verified outcomes as JSON). The rules a whole run must keep are
    checked on it together; 12 questions keep it near 20 s on 2 cores (the 60-question figures are
    docs/benchmarks.md's)."""
    import argparse
    import json

    from data_gen.modalsearch import cli, flags

    out = tmp_path_factory.mktemp("modalsearch_run")
    features_cached(out / "tool_server_cache")  # the run's own tool server cache, its image features computed once
    args = flags.parser(argparse.ArgumentParser()).parse_args(["--world", str(small_world), "--out", str(out),
                                                               "--limit", str(MODALSEARCH_RUN_LIMIT)])
    assert cli.main(args) == 0
    verified = [o for o in map(json.loads, (out / "results.jsonl").read_text().splitlines())
                if o["status"] == "verified"]
    return out, json.loads((out / "stats.json").read_text()), verified


@pytest.fixture(scope="module")
def modalsearch_graph(small_world):
    """(world, kg, graph): France, Spain, Western Europe, France's flag and locator map, and the edges among them."""
    return asyncio.run(_graph(small_world))


@pytest.fixture(scope="session")
def path_through():
    """``path_through(graph, *node_ids)``: the sampler's Path along those nodes."""
    return lambda graph, *nodes: Path(tuple(nodes), tuple(graph.out[a][b] for a, b in zip(nodes, nodes[1:])))


async def _graph(small_world):
    world = World.load(small_world)
    kg = KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)
    builder = GraphBuilder(world, kg, search=None)
    graph = Graph("train")
    for page in ("France", "Spain", "Western_Europe"):
        graph.add_node(builder.text_node(page))
    graph.add_node(builder.image_node("flag_fra", "national flag of France"))
    graph.add_node(builder.image_node("map_fra", "locator map of France, highlighted in red"))
    rel = OfflineRelationProposer(world, kg)
    linker = {(i, link.page.id): link.relation for i in ("flag_fra", "map_fra")
              for link in OfflineImageLinker(world, kg).link(world.images[i])}
    def t2i(kind: str) -> Relation:  # as the builder writes it
        return Relation(f"is the {kind} of {{x}}", unique=True, source="retrievability")

    edges = [
        GraphEdge(text_id("France"), text_id("Spain"), "t2t",
                  await rel.propose(world.pages["France"], world.pages["Spain"])),
        GraphEdge(text_id("France"), image_id("flag_fra"), "t2i", t2i("national flag")),
        GraphEdge(text_id("France"), image_id("map_fra"), "t2i", t2i("locator map")),
        GraphEdge(image_id("flag_fra"), text_id("France"), "i2t", linker[("flag_fra", "France")]),
        GraphEdge(image_id("map_fra"), text_id("Western_Europe"), "i2t", linker[("map_fra", "Western_Europe")]),
    ]
    for e in edges:
        graph.add_edge(e)
    return world, kg, graph
