"""Backward expansion: the hand-known DAG, limits, acyclicity, determinism."""

import random

import pytest

from data_gen.kg import KG, Edge, ExpansionConfig, NotDistinguishable, expand
from data_gen.kg.distinguish import DistinguishingConfig, Fact

# Figure 22's shape: a person pinned down by birthplace and club, each identified through a further neighbour.
TRIPLES = [
    ("person:ana", "P19", "city:kita"), ("person:ben", "P19", "city:kita"), ("person:cy", "P19", "city:osaka"),
    ("person:ana", "P54", "club:honda"), ("person:cy", "P54", "club:honda"),
    ("person:ben", "P54", "club:giravanz"), ("person:cy", "P54", "club:giravanz"),
    ("city:kita", "P17", "country:jp"), ("city:osaka", "P17", "country:jp"),
    ("landmark:tower", "P131", "city:kita"), ("landmark:castle", "P131", "city:osaka"),
    ("club:honda", "P115", "stadium:miyako"), ("club:giravanz", "P115", "stadium:mikuni"),
]
KG_JP = KG.from_triples(TRIPLES)


def test_hand_known_dag() -> None:
    dag = expand(KG_JP, "person:ana", ExpansionConfig(max_depth=2))
    assert dag.nodes == ("person:ana", "city:kita", "club:honda", "landmark:tower", "stadium:miyako")
    assert dag.edges == (
        Edge("city:kita", "person:ana", "P19", forward=False),
        Edge("club:honda", "person:ana", "P54", forward=False),
        # Ties between score-0 facts go to the smaller relation id: P131 (tower) before P19 (ben's birthplace).
        Edge("landmark:tower", "city:kita", "P131", forward=True),
        # cy plays for two clubs, so "cy's club" is worth a bit, the home venue none.
        Edge("stadium:miyako", "club:honda", "P115", forward=False),
    )
    assert dag.edges[3].fact == ("club:honda", "P115", "stadium:miyako")
    assert dag.depth == {"person:ana": 0, "city:kita": 1, "club:honda": 1, "landmark:tower": 2,
                         "stadium:miyako": 2}
    assert dag.leaves == {"landmark:tower": "max_depth", "stadium:miyako": "max_depth"}
    assert dag.incoming("person:ana") == dag.edges[:2]
    assert dag.outgoing("city:kita") == dag.edges[:1]


def test_expanded_nodes_are_identified_by_their_prerequisites() -> None:
    dag = expand(KG_JP, "person:ana", ExpansionConfig(max_depth=3))
    for node in dag.nodes:
        edges = dag.incoming(node)
        if node in dag.leaves:
            assert not edges
            continue
        constraints = [tuple("?n" if t == node else t for t in e.fact) for e in edges]
        assert KG_JP.solve(constraints, {}, "?n") == {node}


def test_seed_without_distinguishing_set_raises() -> None:
    kg = KG.from_triples([("a", "P17", "x"), ("b", "P17", "x")])
    with pytest.raises(NotDistinguishable):
        expand(kg, "a")
    kg = KG.from_triples([("a", "P1082", "7")], literals=["7"])
    with pytest.raises(ValueError, match="literal"):
        expand(kg, "7")


def test_a_relation_withheld_from_every_node_but_the_seed() -> None:
    # The tower's only fact is P131 (in Kita): withheld everywhere, the tower has no distinguishing set; freed at the
    # seed, the tower is known by Kita, and Kita, with P131 still withheld, by Ana's birthplace (0 bits; Ana before
    # Ben on the tie) rather than by the tower that names it.
    withheld = DistinguishingConfig(excluded_relations=frozenset({"P131"}))
    with pytest.raises(NotDistinguishable):
        expand(KG_JP, "landmark:tower", ExpansionConfig(max_depth=2, distinguishing=withheld))
    dag = expand(KG_JP, "landmark:tower", ExpansionConfig(max_depth=2, distinguishing=withheld,
                                                           seed_distinguishing=DistinguishingConfig()))
    assert dag.edges == (Edge("city:kita", "landmark:tower", "P131", forward=False),
                         Edge("person:ana", "city:kita", "P19", forward=True))


# X is the only country B borders; B shares region R with C and has no other fact, so nothing but an image tells B
# from C. A is R's one other part.
BORDER = KG.from_triples([("country:B", "P47", "country:X"), ("country:B", "P361", "region:R"),
                          ("country:C", "P361", "region:R"), ("country:A", "P361", "region:R")])


def test_a_pictured_node_without_a_distinguishing_set_keeps_its_best_attempt() -> None:
    dag = expand(BORDER, "country:X", ExpansionConfig(max_depth=3))
    assert dag.edges == (Edge("country:B", "country:X", "P47", forward=True),)
    assert dag.leaves == {"country:B": "not_distinguishable"}
    # pictured, B keeps R (it narrows B to B and C; B's flag, as a checkpoint, does the rest), and R is known by A
    # (B is downstream of R): a path from A's image through R and B to X
    dag = expand(BORDER, "country:X", ExpansionConfig(max_depth=3), pictured={"country:A", "country:B", "country:C"})
    assert dag.edges == (Edge("country:B", "country:X", "P47", forward=True),
                         Edge("region:R", "country:B", "P361", forward=False),
                         Edge("country:A", "region:R", "P361", forward=True))
    assert dag.leaves == {"country:A": "max_depth"}
    with pytest.raises(NotDistinguishable):  # the seed is the answer: it is always identified whole
        expand(BORDER, "country:C", ExpansionConfig(max_depth=3), pictured={"country:C"})


def test_the_seeds_distinguishing_set_can_be_given() -> None:
    # greedy selection takes Ana's birthplace, then her club; a caller may give the club alone (it leaves Ana and Cy)
    # or both in its own order
    facts = (Fact("P54", "club:honda", True), Fact("P19", "city:kita", True))
    dag = expand(KG_JP, "person:ana", ExpansionConfig(max_depth=1, seed_facts=facts[:1]))
    assert dag.edges == (Edge("club:honda", "person:ana", "P54", forward=False),)
    assert expand(KG_JP, "person:ana", ExpansionConfig(max_depth=1, seed_facts=facts)).incoming("person:ana") == (
        Edge("club:honda", "person:ana", "P54", forward=False), Edge("city:kita", "person:ana", "P19", forward=False))


def test_literal_prerequisites_are_leaves() -> None:
    kg = KG.from_triples([("journal:nar", "P571", "1815"), ("journal:x", "P571", "1990")], literals=["1815", "1990"])
    dag = expand(kg, "journal:nar")
    assert dag.edges == (Edge("1815", "journal:nar", "P571", forward=False),)
    assert dag.leaves == {"1815": "literal"}


def random_kg(seed: int) -> tuple[KG, list[tuple[str, str, str]]]:
    rng = random.Random(seed)
    entities = [f"e{i}" for i in range(80)]
    weights = [1.0 / (i + 1) for i in range(80)]  # a few hubs
    triples = [(rng.choice(entities), rng.choice(["P17", "P19", "P131", "P170", "P31"]),
                rng.choices(entities, weights)[0]) for _ in range(400)]
    return KG.from_triples(triples), triples


def is_acyclic(nodes: tuple[str, ...], edges: tuple[Edge, ...]) -> bool:
    indegree = {n: 0 for n in nodes}
    for e in edges:
        indegree[e.target] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for e in edges:
            if e.source == n:
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
    return seen == len(nodes)


@pytest.mark.parametrize(("max_depth", "max_branching", "max_nodes"), [(1, 3, 40), (2, 2, 5), (3, 3, 6), (6, 2, 9)])
def test_limits_are_honoured(max_depth: int, max_branching: int, max_nodes: int) -> None:
    kg, _ = random_kg(3)
    config = ExpansionConfig(max_depth=max_depth, max_branching=max_branching, max_nodes=max_nodes)
    expanded = 0
    reasons: set[str] = set()
    for seed in sorted(kg.terms())[:40]:
        try:
            dag = expand(kg, seed, config)
        except NotDistinguishable:
            continue
        expanded += 1
        assert dag.nodes[0] == seed and len(set(dag.nodes)) == len(dag.nodes) <= max_nodes
        assert max(dag.depth.values()) <= max_depth
        assert set(dag.depth) == set(dag.nodes)
        assert all(e.fact in kg for e in dag.edges)
        assert all(len(dag.incoming(n)) <= max_branching for n in dag.nodes)
        assert all(n in dag.leaves for n in dag.nodes if dag.depth[n] == max_depth)
        assert set(dag.leaves) <= set(dag.nodes) and not any(dag.incoming(n) for n in dag.leaves)
        assert is_acyclic(dag.nodes, dag.edges)
        assert not dag.outgoing(seed)
        reasons.update(dag.leaves.values())
    assert expanded >= 10
    assert "max_nodes" in reasons or max_nodes == 40  # the budget bites in all but the roomy case


def test_deterministic_regardless_of_triple_order() -> None:
    kg, triples = random_kg(5)
    shuffled = list(triples)
    random.Random(1).shuffle(shuffled)
    other = KG.from_triples(reversed(shuffled))
    config = ExpansionConfig(max_depth=3, max_nodes=30)
    compared = 0
    for seed in sorted(kg.terms())[:30]:
        try:
            dag = expand(kg, seed, config)
        except NotDistinguishable:
            continue
        compared += 1
        assert expand(other, seed, config) == dag
    assert compared >= 10


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        ExpansionConfig(max_nodes=0)
