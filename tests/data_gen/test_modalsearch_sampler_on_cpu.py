"""Path sampling (App. A.5): Eq. 6's gamma_img, the edge weight, Eq. 5's candidate constraints on a hand-made graph,
proportional draws, dedupe by node sequence, c(e) bookkeeping and the redraw of a path without new visual evidence
while a run steers towards the search-required share."""

import random

import pytest

from data_gen.modalsearch.graph import Graph, GraphEdge, Node, Relation
from data_gen.modalsearch.sampler import VISUAL_REDRAWS, PathSampler, brings_visual_evidence, edge_weight, gamma_img


@pytest.mark.parametrize("next_is_image,history,expected", [
    (True, ["text"], 1.0),  # no image in the history
    (False, ["image", "text"], 1.0),  # the next node is text
    (True, ["image", "text"], 1 / 2),  # t=1, j*=0, d=1
    (True, ["image", "text", "text"], 2 / 3),  # d=2
    (True, ["image", "text", "text", "text"], 3 / 4),  # d=3
    (True, ["text", "image"], 1.0),  # d=0: "else 1"
    (True, ["image", "text", "image", "text"], 1 / 2),  # j* is the latest image: 2, t=3
])
def test_gamma_img(next_is_image, history, expected):
    assert gamma_img(next_is_image, history) == pytest.approx(expected)


@pytest.mark.parametrize("gamma,uses,alpha,expected", [
    (1.0, 0, 1.0, 1.0), (1.0, 1, 1.0, 0.5), (0.5, 2, 1.0, 0.5 / 3), (2 / 3, 1, 1.0, 1 / 3), (1.0, 3, 0.5, 0.4),
])
def test_edge_weight_is_gamma_over_one_plus_alpha_uses(gamma, uses, alpha, expected):
    assert edge_weight(gamma, uses, alpha) == pytest.approx(expected)


def _text(nid, name=None, category=False):
    return Node(nid, "text", nid, name or nid.upper(), "thing", f"u:{nid}", category=category)


def _image(nid):
    return Node(nid, "image", nid, f"Picture {nid}", "picture", f"u:{nid}")


def _graph(nodes, edges):
    g = Graph("train")
    for n in nodes:
        g.add_node(n)
    for s, t, phrase in edges:
        kind = {("text", "text"): "t2t", ("text", "image"): "t2i", ("image", "text"): "i2t"}[
            (g.nodes[s].kind, g.nodes[t].kind)]
        assert g.add_edge(GraphEdge(s, t, kind, Relation(phrase, unique=True)))
    return g


def test_candidates_exclude_visited_category_shortcut_and_named_targets_and_weigh_by_the_formula():
    g = _graph(
        [_image("i0"), _text("a"), _text("b"), _text("c"), _text("cat", category=True), _text("d", "Dora"),
         _image("i1"), _text("e")],
        [("i0", "a", "is depicted in {x}"), ("a", "b", "is next to {x}"), ("a", "e", "is near {x}"),
         ("b", "i0", "back"), ("b", "c", "follows {x}"), ("b", "cat", "is a kind of {x}"),
         ("b", "d", "is left of {x}"), ("b", "i1", "is the picture of {x}"),
         ("i0", "c", "shortcut"),  # c is reachable from the earlier i0: b -> c is a shortcut
         ("b", "e", "is right of {x}")],  # e is reachable from the earlier a: shortcut
    )
    g.out["a"]["b"] = GraphEdge("a", "b", "t2t", Relation("is next to {x} and not Dora", unique=True))
    sampler = PathSampler(g, random.Random(0))
    used = [g.out["i0"]["a"], g.out["a"]["b"]]
    sampler.uses[("b", "i1")] = 2
    options = {e.target: w for e, w in sampler.candidates(["i0", "a", "b"], used)}
    # i0 visited; cat a category page; c and e shortcuts; d named ("Dora") in a relation on the path.
    # i1: image next, latest image at j*=0, t=2 -> gamma 2/3; c(e)=2 -> weight (2/3)/(1+2) = 2/9
    assert options == pytest.approx({"i1": 2 / 9})


def test_draws_are_proportional_to_the_weights():
    g = _graph([_text("a"), _text("b"), _text("c")], [("a", "b", "r1 {x}"), ("a", "c", "r2 {x}")])
    sampler = PathSampler(g, random.Random(7), k_min=1, k_max=1)
    sampler.uses[("a", "c")] = 2  # w(a->b) = 1, w(a->c) = 1/3: P(b) = 3/4
    picks = []
    for _ in range(4000):
        options = sampler.candidates(["a"], [])
        picks.append(sampler.rng.choices([e for e, _ in options], weights=[w for _, w in options])[0].target)
    assert picks.count("b") / len(picks) == pytest.approx(0.75, abs=0.03)


def test_paths_are_deduplicated_by_node_sequence_and_accept_counts_edge_uses():
    g = _graph([_text("a"), _text("b")], [("a", "b", "r {x}")])
    sampler = PathSampler(g, random.Random(1), k_min=1, k_max=1)
    paths = [sampler.sample() for _ in range(20)]
    real = [p for p in paths if p is not None]
    assert [p.nodes for p in real] == [("a", "b")]  # b has no out-edge: starts at b are dead ends
    assert sampler.counts["sampler_duplicate"] + sampler.counts["sampler_dead_end"] == 19
    assert sampler.counts["sampler_duplicate"] >= 1
    sampler.accept(real[0])
    sampler.accept(real[0])
    assert sampler.uses[("a", "b")] == 2
    assert sampler.candidates(["a"], [])[0][1] == pytest.approx(1 / 3)


def test_an_image_hop_may_lead_where_its_text_predecessor_also_links():
    # a -> i -> c is composed into one a-to-c relation: a -> c beside it is the accepted textual route, not a
    # shortcut; from the text node b, c stays excluded because a (earlier) links c
    g = _graph([_text("a"), _image("i"), _text("b"), _text("c")],
               [("a", "i", "is the picture of {x}"), ("i", "c", "is shown in {x}"), ("a", "c", "r {x}"),
                ("a", "b", "r {x}"), ("b", "c", "r {x}")])
    sampler = PathSampler(g, random.Random(0))
    assert [e.target for e, _ in sampler.candidates(["a", "i"], [g.out["a"]["i"]])] == ["c"]
    assert sampler.candidates(["a", "b"], [g.out["a"]["b"]]) == []


def test_a_visual_draw_redraws_a_path_without_new_visual_evidence():
    # a -> b brings nothing visual, a -> i an image: a visual draw returns a -> i or nothing, never a -> b (starts at
    # b and i are dead ends); a plain draw returns a -> b too
    g = _graph([_text("a"), _text("b"), _image("i")], [("a", "b", "r {x}"), ("a", "i", "is the picture of {x}")])
    visual = PathSampler(g, random.Random(3), k_min=1, k_max=1)
    paths = {p.nodes for p in (visual.sample(visual=True) for _ in range(40)) if p is not None}
    assert paths == {("a", "i")}
    assert visual.counts["sampler_visual_redraw"] >= 1
    plain = PathSampler(g, random.Random(3), k_min=1, k_max=1)
    assert {p.nodes for p in (plain.sample() for _ in range(40)) if p is not None} == {("a", "b"), ("a", "i")}
    assert plain.counts["sampler_visual_redraw"] == 0


def test_a_visual_draw_gives_up_after_the_redraw_budget_and_a_flag_clue_counts_as_visual():
    # no image anywhere: the visual draw walks VISUAL_REDRAWS + 1 times, then returns the text path it has
    g = _graph([_text("a"), _text("b")], [("a", "b", "r {x}")])
    sampler = PathSampler(g, random.Random(0), k_min=1, k_max=1, excluded_starts=frozenset({"b"}))
    path = sampler.sample(visual=True)
    assert path.nodes == ("a", "b") and not brings_visual_evidence(g, path)
    assert sampler.counts["sampler_visual_redraw"] == VISUAL_REDRAWS
    # the same hop as a flag clue (its candidates' flags are fetched): visual, kept at the first draw
    clue = Graph("train")
    for n in (_text("a"), _text("b")):
        clue.add_node(n)
    clue.add_edge(GraphEdge("a", "b", "t2t", Relation("whose flag is mostly red and borders {x}", unique=True,
                                                      peers=("b", "c"))))
    sampler = PathSampler(clue, random.Random(0), k_min=1, k_max=1, excluded_starts=frozenset({"b"}))
    path = sampler.sample(visual=True)
    assert path.nodes == ("a", "b") and brings_visual_evidence(clue, path)
    assert sampler.counts["sampler_visual_redraw"] == 0
