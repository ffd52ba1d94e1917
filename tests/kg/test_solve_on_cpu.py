"""KG.solve against hand-made graphs, against a brute-force reading of Eq. 2, and on malformed queries."""

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_gen.kg import KG, QueryError

CAPITALS = KG.from_triples([
    ("country:FRA", "P36", "city:paris"),
    ("country:DEU", "P36", "city:berlin"),
    ("country:ITA", "P36", "city:rome"),
    ("city:paris", "P17", "country:FRA"),
    ("city:lyon", "P17", "country:FRA"),
    ("city:berlin", "P17", "country:DEU"),
    ("city:rome", "P17", "country:ITA"),
    ("city:paris", "P1082", "2100000"),
    ("city:lyon", "P1082", "520000"),
    ("person:ada", "P19", "city:paris"),
    ("person:bo", "P19", "city:paris"),
    ("person:bo", "P54", "club:psg"),
    ("person:cy", "P54", "club:psg"),
    ("person:cy", "P19", "city:lyon"),
], literals=["2100000", "520000"])


def test_single_answer_from_bound_entry() -> None:
    got = CAPITALS.solve([("?v0", "P36", "?v1"), ("?v1", "P17", "?w0")], {"?v0": "country:FRA"}, "?v1")
    assert got == {"city:paris"}


def test_brief_example_shape_with_two_bound_variables() -> None:
    got = CAPITALS.solve([("?v0", "P36", "?v1"), ("?v1", "P17", "?w0")],
                         {"?v0": "country:DEU", "?w0": "country:DEU"}, "?v1")
    assert got == {"city:berlin"}


def test_empty_answer() -> None:
    assert CAPITALS.solve([("?v0", "P36", "?v1"), ("?v1", "P17", "?w0")],
                          {"?v0": "country:FRA", "?w0": "country:DEU"}, "?v1") == set()
    assert CAPITALS.solve([("?x", "P999", "?y")], {}, "?x") == set()
    assert CAPITALS.solve([("?x", "P17", "?y")], {"?x": "nowhere"}, "?y") == set()


def test_multiple_answers() -> None:
    assert CAPITALS.solve([("?c", "P17", "country:FRA")], {}, "?c") == {"city:paris", "city:lyon"}
    assert CAPITALS.solve([("?p", "P19", "city:paris")], {}, "?p") == {"person:ada", "person:bo"}


def test_convergent_branches_intersect() -> None:
    # Born in Paris (ada, bo) and member of PSG (bo, cy): only bo.
    got = CAPITALS.solve([("?p", "P19", "?city"), ("?p", "P54", "?club")],
                         {"?city": "city:paris", "?club": "club:psg"}, "?p")
    assert got == {"person:bo"}
    # Each branch itself from a further entry: the capital of France, PSG's member who was born in that capital.
    got = CAPITALS.solve([("?c", "P36", "?city"), ("?p", "P19", "?city"), ("?p", "P54", "?club")],
                         {"?c": "country:FRA", "?club": "club:psg"}, "?p")
    assert got == {"person:bo"}


def test_constants_in_every_position() -> None:
    assert CAPITALS.solve([("city:lyon", "?r", "?o")], {}, "?r") == {"P17", "P1082"}
    assert CAPITALS.solve([("city:lyon", "?r", "country:FRA")], {}, "?r") == {"P17"}
    assert CAPITALS.solve([("?s", "?r", "club:psg")], {}, "?s") == {"person:bo", "person:cy"}
    assert CAPITALS.solve([("?s", "P1082", "520000")], {}, "?s") == {"city:lyon"}
    # A fully constant constraint acts as a filter on the rest.
    assert CAPITALS.solve([("city:lyon", "P17", "country:FRA"), ("?x", "P36", "city:rome")], {}, "?x") == {
        "country:ITA"}
    assert CAPITALS.solve([("city:lyon", "P17", "country:DEU"), ("?x", "P36", "city:rome")], {}, "?x") == set()


def test_out_may_be_bound_and_must_then_be_consistent() -> None:
    assert CAPITALS.solve([("?x", "P36", "?y")], {"?y": "city:rome"}, "?y") == {"city:rome"}
    assert CAPITALS.solve([("?x", "P36", "?y")], {"?y": "city:lyon"}, "?y") == set()
    assert CAPITALS.solve([], {"?y": "anything"}, "?y") == {"anything"}


def test_repeated_variable_across_constraints() -> None:
    # Countries whose capital lies in the same country: ?c occurs twice.
    got = CAPITALS.solve([("?c", "P36", "?city"), ("?city", "P17", "?c")], {}, "?c")
    assert got == {"country:FRA", "country:DEU", "country:ITA"}


def test_variable_twice_in_one_triple_needs_a_self_loop() -> None:
    kg = KG.from_triples([("a", "P1", "a"), ("a", "P1", "b"), ("b", "P1", "c")])
    assert kg.solve([("?x", "P1", "?x")], {}, "?x") == {"a"}
    assert kg.solve([("?x", "?x", "?y")], {}, "?y") == set()


def test_cycles() -> None:
    kg = KG.from_triples([("a", "P1", "b"), ("b", "P1", "c"), ("c", "P1", "a"), ("c", "P1", "d"), ("d", "P1", "e")])
    triangle = [("?x", "P1", "?y"), ("?y", "P1", "?z"), ("?z", "P1", "?x")]
    assert kg.solve(triangle, {}, "?x") == {"a", "b", "c"}
    assert kg.solve(triangle, {"?y": "c"}, "?x") == {"b"}
    assert kg.solve([("?x", "P1", "?y"), ("?y", "P1", "?x")], {}, "?x") == set()


def test_limit_stops_early_but_never_invents_answers() -> None:
    everyone = CAPITALS.solve([("?p", "?r", "?o")], {}, "?p")
    two = CAPITALS.solve([("?p", "?r", "?o")], {}, "?p", limit=2)
    assert len(two) == 2 and two <= everyone
    assert CAPITALS.solve([("?c", "P36", "?x")], {"?x": "city:rome"}, "?c", limit=2) == {"country:ITA"}


@pytest.mark.parametrize(("constraints", "bindings", "out", "message"), [
    ([("?x", "P1", "?y")], {}, "?z", "unbound"),
    ([("?x", "P1", "?y")], {}, "x", "must be a variable"),
    ([("?x", "P1", 3)], {}, "?x", "must be strings"),
    ([("?x", "P1")], {}, "?x", "triple"),
    ("?x P1 ?y", {}, "?x", "not a string"),
    ([("?x", "", "?y")], {}, "?x", "empty term"),
    ([("?", "P1", "?y")], {}, "?y", "empty term"),
    ([("?x", "P1", "?y")], {"x": "a"}, "?y", "not a variable"),
    ([("?x", "P1", "?y")], {"?x": "?y"}, "?y", "constant"),
    ([("?x", "P1", "?y")], {"?q": "a"}, "?y", "occurs in no constraint"),
    ([("?x", "P1", "?y")], {"?x": None}, "?y", "must be strings"),
])
def test_malformed_queries_raise(constraints, bindings, out, message) -> None:
    with pytest.raises(QueryError, match=message):
        CAPITALS.solve(constraints, bindings, out)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_bad_limit_raises(limit) -> None:
    with pytest.raises(QueryError, match="limit"):
        CAPITALS.solve([("?x", "P36", "?y")], {}, "?x", limit=limit)


@pytest.mark.parametrize(("triples", "literals", "message"), [
    ([("a", "P1")], (), "must be"),
    ([("a", "P1", 5)], (), "non-empty strings"),
    ([("?a", "P1", "b")], (), "query variables"),
    ([("a", "P1", "b")], ("a",), "subject"),
    ([("a", "P1", "b")], ("c",), "no triple"),
])
def test_malformed_triples_raise(triples, literals, message) -> None:
    with pytest.raises(ValueError, match=message):
        KG.from_triples(triples, literals=literals)


# -- Against Eq. 2 read literally: enumerate every assignment of the variables. ----------------------------------

TERMS = ["a", "b", "c", "d"]
RELATIONS = ["P1", "P2"]
triple_st = st.tuples(st.sampled_from(TERMS), st.sampled_from(RELATIONS), st.sampled_from(TERMS))
VARS = ["?x", "?y", "?z"]
term_st = st.sampled_from(VARS + TERMS)
constraint_st = st.tuples(term_st, st.sampled_from(VARS[:1] + RELATIONS), term_st)


def brute_force(triples, constraints, bindings, out):
    facts = set(triples)
    variables = sorted({t for c in constraints for t in c if t.startswith("?")} | set(bindings) | {out})
    domain = TERMS + RELATIONS
    answers = set()
    for values in product(domain, repeat=len(variables)):
        z = dict(zip(variables, values))
        if any(z[v] != b for v, b in bindings.items()):
            continue
        if all(tuple(z.get(t, t) for t in c) in facts for c in constraints):
            answers.add(z[out])
    return answers


@settings(max_examples=120, deadline=None)
@given(triples=st.lists(triple_st, min_size=1, max_size=12), constraints=st.lists(constraint_st, min_size=1,
       max_size=3), out=st.sampled_from(VARS), bind=st.dictionaries(st.sampled_from(VARS), st.sampled_from(TERMS),
                                                                      max_size=2))
def test_matches_brute_force(triples, constraints, out, bind) -> None:
    used = {t for c in constraints for t in c if t.startswith("?")}
    bindings = {v: b for v, b in bind.items() if v in used}
    if out not in used:
        out = sorted(used)[0] if used else out
        if not used:
            bindings = {out: "a"}
    kg = KG.from_triples(triples)
    assert kg.solve(constraints, bindings, out) == brute_force(triples, constraints, bindings, out)
