"""Images of other entities on a page (issue 36): a t2i relation "shown on the page of", unique per image kind; the
proposer's own-image descriptions leave them out; a composed hop through one reads as the page's figure."""

from pathlib import Path

from data_gen.modalsearch.graph import Graph, GraphEdge, Node, Relation
from data_gen.modalsearch.questions import compose, reference
from data_gen.modalsearch.sampler import Path as SampledPath
from data_gen.modalsearch.visual import OfflineVisualProposer, figure_relations
from neos_core.world.model import Image, Page
from neos_core.world.store import World


def _world(page_images: list[str]) -> tuple[World, Page]:
    images = {i.id: i for i in (
        Image("subflag_bav", "", "", "Flag of Bavaria", "flag of Bavaria, Germany", "kgeography-data", 4, 3,
              "Bavaria", "e:bavaria"),
        Image("flag_deu", "", "", "Flag of Germany", "national flag of Germany", "flag-icons", 4, 3, "Germany",
              "e:deu"),
        Image("flag_aut", "", "", "Flag of Austria", "national flag of Austria", "flag-icons", 4, 3, "Austria",
              "e:aut"),
    )}
    page = Page("Bavaria", "", "Bavaria", "Bavaria is a state of Germany.", "test", entity_id="e:bavaria",
                image_ids=page_images)
    return World(Path("."), {}, {}, {page.id: page}, images, [], {}, {}, {}), page


def test_a_figure_of_another_entity_is_a_t2i_relation_unique_per_kind():
    world, page = _world(["subflag_bav", "flag_deu"])
    [(image, relation)] = figure_relations(world, page)  # its own flag is found by search, not here
    assert image.id == "flag_deu"
    assert (relation.phrase, relation.unique, relation.source) == (
        "is the national flag shown on the page of {x}", True, "page_figure")
    # two national flags of others on one page: "the national flag shown on the page of Bavaria" is not one
    world, page = _world(["subflag_bav", "flag_deu", "flag_aut"])
    assert [(i.id, r.unique) for i, r in figure_relations(world, page)] == [("flag_deu", False), ("flag_aut", False)]


def test_the_proposer_describes_only_the_pages_own_figures():
    world, page = _world(["subflag_bav", "flag_deu"])
    chunks = [p.chunk for p in OfflineVisualProposer(world).propose(page)]
    assert chunks == ["flag of Bavaria, Germany", "Flag of Bavaria"]  # not "national flag of Germany"


def test_a_hop_through_a_figure_composes_with_the_figure_relation():
    graph = Graph("train")
    for node in (Node("t:Bavaria", "text", "Bavaria", "Bavaria", "state", ""),
                 Node("i:flag_deu", "image", "flag_deu", "Flag of Germany", "national flag", "", entity="e:deu"),
                 Node("t:Germany", "text", "Germany", "Germany", "country", "", entity="e:deu")):
        graph.add_node(node)
    graph.add_edge(GraphEdge("t:Bavaria", "i:flag_deu", "t2i",
                             Relation("is the national flag shown on the page of {x}", True, "page_figure")))
    graph.add_edge(GraphEdge("i:flag_deu", "t:Germany", "i2t",
                             Relation("is the country depicted in {x}", True, "depiction")))
    [hop] = compose(graph, SampledPath(("t:Bavaria", "i:flag_deu", "t:Germany"),
                                       tuple(graph.out[a][b] for a, b in (("t:Bavaria", "i:flag_deu"),
                                                                          ("i:flag_deu", "t:Germany")))))
    assert (hop.kind, hop.via, hop.relation_source) == ("t2i2t", "i:flag_deu", "composed:page_figure+depiction")
    assert hop.relation == "is the country depicted in the national flag shown on the page of {x}"
    assert reference(hop, graph.nodes["t:Germany"], "the state whose capital is Munich") == (
        "the country depicted in the national flag shown on the page of the state whose capital is Munich")
    [end] = compose(graph, SampledPath(("t:Bavaria", "i:flag_deu"), (graph.out["t:Bavaria"]["i:flag_deu"],)))
    assert reference(end, graph.nodes["i:flag_deu"], "Bavaria") == "the national flag shown on the page of Bavaria"
