"""The ModalSearch closed-book probe (issue 36) on hand-built paths of the small world: a question a strong VLM answers
from the flags it recognises and the facts it knows (Germany's flag, its capital) is not search-required whatever its
label; one through a long-tail fact (where aluminium was discovered) is; stats.json reports the share with and
without the probe and how many the probe moved."""

import asyncio

import pytest

from data_gen.modalsearch.build import GraphBuilder, image_id, text_id
from data_gen.modalsearch.cli import statistics
from data_gen.modalsearch.closed_book import ClosedBookProbe
from data_gen.modalsearch.graph import Graph, GraphEdge, Relation
from data_gen.modalsearch.linking import OfflineImageLinker
from data_gen.modalsearch.questions import QuestionWriter, Rejection
from data_gen.modalsearch.relations import OfflineRelationProposer
from data_gen.modalsearch.schema import Outcome


async def _graph(world, kg):
    """Germany's flag -> Germany -> Denmark (its only neighbour whose name begins with "D") -> Denmark's flag and
    locator map; Aluminum -> Denmark (where it was discovered)."""
    builder = GraphBuilder(world, kg, search=None)
    graph = Graph("train")
    for page in ("Germany", "Denmark", "Aluminum"):
        graph.add_node(builder.text_node(page))
    for image in ("flag_deu", "flag_dnk", "map_dnk"):
        graph.add_node(builder.image_node(image, ""))
    rel = OfflineRelationProposer(world, kg)
    depiction = next(link.relation for link in OfflineImageLinker(world, kg).link(world.images["flag_deu"])
                     if link.page.id == "Germany")
    t2i = Relation("is the national flag of {x}", unique=True, source="retrievability")
    for edge in (GraphEdge(image_id("flag_deu"), text_id("Germany"), "i2t", depiction),
                 GraphEdge(text_id("Germany"), text_id("Denmark"), "t2t",
                           await rel.propose(world.pages["Germany"], world.pages["Denmark"])),
                 GraphEdge(text_id("Aluminum"), text_id("Denmark"), "t2t",
                           await rel.propose(world.pages["Aluminum"], world.pages["Denmark"])),
                 GraphEdge(text_id("Denmark"), image_id("flag_dnk"), "t2i", t2i),
                 GraphEdge(text_id("Denmark"), image_id("map_dnk"), "t2i",
                           Relation("is the locator map of {x}", unique=True, source="retrievability"))):
        graph.add_edge(edge)
    return graph


@pytest.fixture(scope="module")
def setup(modalsearch_graph):
    world, kg, _ = modalsearch_graph
    return world, kg, asyncio.run(_graph(world, kg))


def test_germanys_flag_and_facts_a_strong_model_knows_are_closed_book(setup, path_through):
    world, kg, graph = setup
    probe = ClosedBookProbe(world, kg)
    start = path_through(graph, image_id("flag_deu"), text_id("Germany"))
    assert probe.solves(graph, start, None, "P36")  # "What is the capital of the country depicted in this image?"
    assert probe.solves(graph, start, None, "P474")  # its calling code, a value it states too
    assert not probe.solves(graph, start, None, "P1082")  # a population as of a year is the article's figure
    # "... the national flag of the country whose name begins with “D” and that shares a border with the country
    # depicted in this image?": the flag, the neighbour and Denmark's flag are all known
    to_flag = path_through(graph, image_id("flag_deu"), text_id("Germany"), text_id("Denmark"), image_id("flag_dnk"))
    assert graph.out[text_id("Germany")][text_id("Denmark")].relation.kg_relation == "P47"
    assert probe.solves(graph, to_flag, None, None)
    # the pixel shares of a locator map are the renderer's, not something it remembers
    to_map = path_through(graph, image_id("flag_deu"), text_id("Germany"), text_id("Denmark"), image_id("map_dnk"))
    assert not probe.solves(graph, to_map, None, None)


def test_a_long_tail_hop_needs_a_tool(setup, path_through):
    world, kg, graph = setup
    probe = ClosedBookProbe(world, kg)
    # "the country where the element described as '___ (symbol Al, atomic number 13) ...' was discovered": it
    # names aluminium from its symbol, but not where it was discovered (Denmark, by Oersted)
    path = path_through(graph, text_id("Aluminum"), text_id("Denmark"), image_id("flag_dnk"))
    assert graph.out[text_id("Aluminum")][text_id("Denmark")].relation.kg_relation == "P189"
    assert not probe.solves(graph, path, None, None)


def test_the_writer_marks_closed_book_questions_and_stats_report_both_shares(setup, path_through):
    world, kg, graph = setup
    writer = QuestionWriter(world, kg, seed=0)
    known = writer.write(graph, path_through(graph, image_id("flag_deu"), text_id("Germany"), text_id("Denmark"),
                                             image_id("flag_dnk")))
    tail = writer.write(graph, path_through(graph, text_id("Aluminum"), text_id("Denmark"), image_id("flag_dnk")))
    assert not isinstance(known, Rejection) and not isinstance(tail, Rejection), (known, tail)
    assert (known.label, known.closed_book, known.search_required()) == ("search_required", True, False)
    assert (tail.label, tail.closed_book, tail.search_required()) == ("search_required", False, True)
    plain = known.model_copy(update={"label": "input_only", "closed_book": True})
    outcomes = [Outcome(key=t.id + str(i), status="verified", graph="train", path=[], task=t)
                for i, t in enumerate((known, tail, plain, tail))]
    stats = statistics(outcomes, {})
    # 3 of 4 carry the label, 2 of them need a tool; the probe moved 1 (plain was no search-required question)
    assert (stats["search_required_share_without_probe"], stats["search_required_share"]) == (0.75, 0.5)
    assert (stats["closed_book_moved"], stats["closed_book_solved"]) == (1, 2)


def test_a_figure_hop_is_taken_only_through_a_common_fact(setup):
    """Munich's page shows Bavaria's flag: the model knows Munich is Bavaria's capital (P1376), so it holds Bavaria
    after the hop; Bavaria's page shows Germany's flag, and which country a state lies in (P131) it knows too (issue
    36: "the capital of the country depicted in the national flag shown on the page of the region whose capital is
    Hohhot" is Beijing to any strong model). The reverse, a state of Germany, it cannot single out."""
    world, kg, _ = setup
    builder = GraphBuilder(world, kg, search=None)
    graph = Graph("train")
    for page in ("Munich", "Bavaria"):
        graph.add_node(builder.text_node(page))
    for image in ("subflag_germany_bavaria", "flag_deu"):
        graph.add_node(builder.image_node(image, ""))
    to_state = GraphEdge(text_id("Munich"), image_id("subflag_germany_bavaria"), "t2i",
                         Relation("is the flag shown on the page of {x}", unique=True, source="page_figure"))
    to_country = GraphEdge(text_id("Bavaria"), image_id("flag_deu"), "t2i",
                           Relation("is the national flag shown on the page of {x}", unique=True, source="page_figure"))
    probe = ClosedBookProbe(world, kg)
    assert probe._hop(graph, to_state, {"city:2867714"}) == {"subdivision:germany:bavaria"}
    assert probe._hop(graph, to_country, {"subdivision:germany:bavaria"}) == {"country:DEU"}
    assert probe._step({"subdivision:germany:bavaria"}, "P131", True) == {"country:DEU"}
    states = probe._step({"country:DEU"}, "P131", False)
    assert states is None  # which states lie in Germany: not a fact it states
