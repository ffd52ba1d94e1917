"""Reasoning structures: hand-known paths and convergent subgraphs, identifiability, JSON round-trip."""

import json

import pytest

from data_gen.kg import (
    KG,
    MULTIPLE_ENDPOINTS,
    UNRESOLVED,
    WRONG_ENDPOINT,
    Dag,
    Edge,
    ExpansionConfig,
    Query,
    Structure,
    StructureConfig,
    enumerate_structures,
    expand,
    identifiability,
)

from .test_dag_on_cpu import TRIPLES as DAG_TRIPLES

# Figure 22's shape (the DAG test's facts): ana is the one born in Kitakyushu who plays for Honda FC. Either fact alone
# leaves two people.
TRIPLES = [
    *DAG_TRIPLES,
    # A path: the song on the album that ana composed.
    ("work:chant", "P361", "album:best"), ("work:other", "P361", "album:best"), ("work:chant", "P86", "person:ana"),
]
KG_JP = KG.from_triples(TRIPLES)
IMAGES = {"landmark:tower", "city:kita", "stadium:miyako", "club:honda"}

KITA = Edge("city:kita", "person:ana", "P19", forward=False)
HONDA = Edge("club:honda", "person:ana", "P54", forward=False)
TOWER = Edge("landmark:tower", "city:kita", "P131", forward=True)
MIYAKO = Edge("stadium:miyako", "club:honda", "P115", forward=False)
ALBUM = Edge("album:best", "work:chant", "P361", forward=False)
CHANT = Edge("work:chant", "person:ana", "P86", forward=True)


def summary(structure: Structure) -> tuple:
    return structure.kind, structure.anchors, structure.checkpoints, len(structure.edges)


def test_expansion_then_enumeration_finds_the_convergent_structures() -> None:
    kg = KG.from_triples(TRIPLES[:-3])  # without the song, ana's distinguishing set is birthplace + club
    dag = expand(kg, "person:ana", ExpansionConfig(max_depth=2))
    assert set(dag.edges) == {KITA, HONDA, TOWER, MIYAKO}
    found = enumerate_structures(kg, dag, IMAGES)
    assert [summary(s) for s in found.accepted] == [
        ("convergent", ("city:kita", "stadium:miyako"), ("club:honda",), 3),
        ("convergent", ("landmark:tower", "club:honda"), ("city:kita",), 3),
        ("convergent", ("landmark:tower", "stadium:miyako"), ("city:kita",), 4),
        ("convergent", ("landmark:tower", "stadium:miyako"), ("club:honda",), 4),
        ("convergent", ("landmark:tower", "stadium:miyako"), ("city:kita", "club:honda"), 4),
    ]
    # Each single branch reaches two people: ben is also born in Kitakyushu, cy also plays for Honda.
    assert [(summary(s), reason) for s, reason in found.rejected] == [
        (("path", ("landmark:tower",), ("city:kita",), 2), MULTIPLE_ENDPOINTS),
        (("path", ("stadium:miyako",), ("club:honda",), 2), MULTIPLE_ENDPOINTS),
    ]
    assert found.rejection_counts == {MULTIPLE_ENDPOINTS: 2} and not found.truncated
    two_views = found.accepted[2]
    assert two_views.branches == ((TOWER, KITA), (MIYAKO, HONDA)) and two_views.tail == ()
    assert two_views.merge == two_views.answer == "person:ana"
    assert two_views.query() == Query(
        constraints=(("?x0", "P131", "?x1"), ("?x4", "P19", "?x1"), ("?x3", "P115", "?x2"), ("?x4", "P54", "?x3")),
        bindings={"?x0": "landmark:tower", "?x2": "stadium:miyako", "?x1": "city:kita"},
        out="?x4",
    )
    assert KG_JP.solve_query(two_views.query()) == {"person:ana"}


def hand_dag(edges: tuple[Edge, ...]) -> Dag:
    nodes = tuple(dict.fromkeys(["person:ana", *(e.source for e in edges)]))
    return Dag("person:ana", nodes, edges, {n: 0 for n in nodes}, {})


def test_hand_known_path() -> None:
    dag = hand_dag((CHANT, KITA, ALBUM, TOWER))
    found = enumerate_structures(KG_JP, dag, {"album:best", "work:chant", "landmark:tower", "city:kita"},
                                 StructureConfig(convergent=False))
    assert [summary(s) for s in found.accepted] == [("path", ("album:best",), ("work:chant",), 2)]
    path = found.accepted[0]
    assert path.nodes == ("album:best", "work:chant", "person:ana")
    assert path.query() == Query((("?x1", "P361", "?x0"), ("?x1", "P86", "?x2")),
                                 {"?x0": "album:best", "?x1": "work:chant"}, "?x2")
    assert [(summary(s), r) for s, r in found.rejected] == [
        (("path", ("landmark:tower",), ("city:kita",), 2), MULTIPLE_ENDPOINTS)]


def test_no_visual_checkpoint_no_candidate() -> None:
    dag = hand_dag((CHANT, ALBUM))
    found = enumerate_structures(KG_JP, dag, {"album:best"})  # the song has no image
    assert found.accepted == () and found.rejected == ()


def test_tail_after_the_merge_and_checkpoint_on_the_merge() -> None:
    # Two branches meet at the song (an album it is on, a second fact about it), then the song leads to ana.
    kg = KG.from_triples(TRIPLES + [("work:chant", "P136", "genre:anthem"), ("work:other", "P136", "genre:rock")])
    genre = Edge("genre:anthem", "work:chant", "P136", forward=False)
    dag = hand_dag((CHANT, ALBUM, genre))
    found = enumerate_structures(kg, dag, {"album:best", "genre:anthem", "work:chant"})
    convergent = [s for s in found.accepted if s.kind == "convergent"]
    assert [summary(s) for s in convergent] == [("convergent", ("album:best", "genre:anthem"), ("work:chant",), 3)]
    assert convergent[0].merge == "work:chant" and convergent[0].tail == (CHANT,)
    assert convergent[0].answer == "person:ana"


def test_visual_answer_flag() -> None:
    dag = hand_dag((CHANT, ALBUM))
    images = {"album:best", "work:chant", "person:ana"}
    assert [s.visual_answer for s in enumerate_structures(KG_JP, dag, images).accepted] == [True]
    off = enumerate_structures(KG_JP, dag, images, StructureConfig(visual_answer=False))
    assert [s.visual_answer for s in off.accepted] == [False]
    assert [s.visual_answer for s in enumerate_structures(KG_JP, dag, images - {"person:ana"}).accepted] == [False]


def test_max_candidates_truncates() -> None:
    dag = hand_dag((KITA, HONDA, TOWER, MIYAKO))
    found = enumerate_structures(KG_JP, dag, IMAGES, StructureConfig(max_candidates=3))
    assert len(found.accepted) + len(found.rejected) == 3 and found.truncated


def test_unresolved_and_wrong_endpoint() -> None:
    path = Structure(((ALBUM, CHANT),), (), ("work:chant",))
    assert identifiability(KG_JP, path) is None
    elsewhere = KG.from_triples([("work:chant", "P361", "album:best"), ("work:chant", "P86", "person:zed")])
    assert identifiability(elsewhere, path) == WRONG_ENDPOINT
    assert identifiability(KG.from_triples([("work:chant", "P361", "album:best")]), path) == UNRESOLVED


def test_json_round_trip() -> None:
    structure = Structure(((TOWER, KITA), (MIYAKO, HONDA)), (), ("city:kita", "club:honda"), visual_answer=True)
    text = json.dumps(structure.to_dict())
    again = Structure.from_dict(json.loads(text))
    assert again == structure and again.query() == structure.query()
    with pytest.raises(ValueError, match="malformed"):
        Structure.from_dict({"branches": [[{"source": "a"}]], "tail": [], "checkpoints": [], "visual_answer": False})
    with pytest.raises(ValueError, match="malformed"):
        Structure.from_dict({"branches": [], "tail": []})
    bad_flag = dict(structure.to_dict(), visual_answer="yes")
    with pytest.raises(ValueError, match="boolean"):
        Structure.from_dict(bad_flag)


@pytest.mark.parametrize(("branches", "tail", "checkpoints", "message"), [
    (((TOWER, HONDA),), (), ("city:kita",), "do not chain"),
    (((TOWER, KITA),), (), (), "at least one intermediate"),
    (((TOWER, KITA),), (), ("landmark:tower",), "intermediate nodes"),
    (((TOWER, KITA),), (), ("person:ana",), "intermediate nodes"),
    (((TOWER, KITA), (TOWER, KITA)), (), ("city:kita",), "disjoint"),
    (((TOWER, KITA), (ALBUM,)), (), ("city:kita",), "same merge"),
    (((TOWER, KITA), (Edge("x", "person:ana", "P19", True),)), (), ("city:kita",), "distinct relations"),
    (((TOWER,),), (HONDA,), ("city:kita",), "tail must start"),
    ((), (), (), "one or two branches"),
    (((),), (), (), "at least one edge"),
])
def test_malformed_structures_raise(branches, tail, checkpoints, message) -> None:
    with pytest.raises(ValueError, match=message):
        Structure(branches, tail, checkpoints)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="min_hops"):
        StructureConfig(min_hops=1)
    with pytest.raises(ValueError, match="min_hops"):
        StructureConfig(min_hops=3, max_hops=2)


def test_verdicts_are_reused_across_dags() -> None:
    # The path album -> chant* -> ana is identifiable; a second DAG holding it reads the verdict the first stored,
    # so a stored verdict (here planted as "multiple_endpoints") is what it reports, not a fresh solve.
    dag = hand_dag((CHANT, ALBUM))
    path = Structure(((ALBUM, CHANT),), (), ("work:chant",), False)
    verdicts: dict = {}
    first = enumerate_structures(KG_JP, dag, {"album:best", "work:chant"}, StructureConfig(visual_answer=False),
                                 verdicts)
    assert first.accepted == (path,) and verdicts == {path: None}
    verdicts[path] = MULTIPLE_ENDPOINTS
    again = enumerate_structures(KG_JP, dag, {"album:best", "work:chant"}, StructureConfig(visual_answer=False),
                                 verdicts)
    assert again.accepted == () and again.rejected == ((path, MULTIPLE_ENDPOINTS),)
