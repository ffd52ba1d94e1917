"""ModalSearch's diversity discipline, shared with Neos (``data_gen.common.stats.Shares``): a question whose answer
already has ``answer_cap(--limit)`` verified questions, or whose answer type already has ``answer_type_cap(--limit)``,
is rejected before the expert runs and counted per filter in stats.json, and a terminal fact of a type with room is
asked first; a value answer's type is what it measures; relation types leave out what varies per question; the plots
draw answer types, relations and skeletons."""

import random
from dataclasses import replace

from data_gen.common.stats import Shares
from data_gen.modalsearch.build import GraphBuilder, image_id, text_id
from data_gen.modalsearch.cli import (
    MAX_ANSWER_TYPE_SHARE,
    MIN_ANSWER_TYPE_CAP,
    _judge,
    plots,
    relation_type,
    statistics,
)
from data_gen.modalsearch.questions import QuestionWriter, Rejection


class _NoExpert:
    """Fails the test if the expert is reached."""

    name = "no_expert"

    async def solve(self, task):
        raise AssertionError("the expert ran on a question over its share")


async def test_an_answer_or_answer_type_over_its_share_is_rejected_before_the_expert_and_counted(
        modalsearch_graph, path_through, tmp_path):
    world, kg, graph = modalsearch_graph
    writer = QuestionWriter(world, kg, seed=0)
    path = path_through(graph, text_id("France"), image_id("map_fra"))
    task = writer.write(graph, path)
    assert not isinstance(task, Rejection), task
    by_answer = Shares(cap=1, type_cap=None)
    by_answer.count(task.answer.upper(), "other type")  # the answer is case-folded by the caller
    assert by_answer.over(task.answer.lower(), task.answer_type) is None
    by_answer.count(task.answer.lower(), "other type")
    first = await _judge(writer, _NoExpert(), graph, path, "a", by_answer)
    assert (first.status, first.filter) == ("rejected", "answer_share") and task.answer in first.detail
    by_type = Shares(cap=3, type_cap=2)
    for other in ("x", "y"):
        by_type.count(other, task.answer_type)
    second = await _judge(writer, _NoExpert(), graph, path, "b", by_type)
    assert (second.status, second.filter, second.detail) == (
        "rejected", "answer_type_share", f"2 verified tasks already answer a {task.answer_type}")
    stats = statistics([first, second], {"sampler": {}})
    assert stats["filters"]["answer_share"] == {"entering": 2, "rejected": 1, "rate": 0.5}
    assert stats["filters"]["answer_type_share"] == {"entering": 1, "rejected": 1, "rate": 1.0}
    assert stats["filters"]["expert"]["entering"] == 0


def test_a_run_caps_each_answer_type_at_7_of_60_and_a_short_run_at_2():
    # issue 36: largest answer type 13% of a 60-question run; int(0.12 * 60) = 7, int(0.12 * 6) = 0 -> floor 2;
    # the answer cap stays the shared one (3% of 60 = 1.8 -> 1); no --limit, no share known: no type cap
    def shares_of_run(limit):
        return Shares.of_run(limit, MAX_ANSWER_TYPE_SHARE, MIN_ANSWER_TYPE_CAP)  # as the CLI's run makes them

    assert (shares_of_run(60).cap, shares_of_run(60).type_cap) == (1, 7)
    assert shares_of_run(6).type_cap == 2 and shares_of_run(200).type_cap == 24
    assert shares_of_run(None).type_cap is None


def test_a_value_answer_has_the_type_of_what_it_measures_and_a_count_its_year(modalsearch_graph, monkeypatch):
    # Belgrade's article states its population (P1082), asked in a 60-question run of 2026-12-06 (Serbia on the
    # path, so not asked): typed "literal:number" until then, one type with every area and any other number. Its
    # only figure, "Population: 1,273,651 (GeoNames)", has no year: not asked; with a dated sentence it is, as of it.
    world, kg, _ = modalsearch_graph
    writer = QuestionWriter(world, kg, seed=0)
    node = GraphBuilder(world, kg, search=None).text_node("Belgrade")
    assert writer._terminal_text(node, {"country:SRB"}, random.Random(0)).filter == "terminal_text"
    assert writer.counts == {"number_undated": 1}
    page = world.pages["Belgrade"]
    monkeypatch.setitem(world.pages, "Belgrade", replace(page, text=page.text.replace(
        "Population: 1,273,651 (GeoNames).", "At the 2022 census Belgrade had a population of 1,273,651.")))
    term = writer._terminal_text(node, {"country:SRB"}, random.Random(0))
    assert not isinstance(term, Rejection), term
    assert (term[3].template, term[2]) == ("According to its article, what was the 2022 population of {REF}?",
                                           "literal:population")


def test_a_terminal_fact_of_a_type_with_room_in_the_run_is_asked_first(modalsearch_graph):
    # Spain's article states its area (asked first: a long-tail value) and its former currency, the peseta; with the
    # run's areas at their cap the peseta is asked instead of a question the cap would reject
    world, kg, _ = modalsearch_graph
    writer = QuestionWriter(world, kg, seed=0)
    node = GraphBuilder(world, kg, search=None).text_node("Spain")
    first = writer._terminal_text(node, set(), random.Random(0))
    assert (first[0], first[2]) == ("505,992", "literal:area")
    room = writer._terminal_text(node, set(), random.Random(0), frozenset({"literal:area"}))
    assert (room[0], room[2]) == ("Spanish Peseta", "currency")
    shares = Shares(cap=3, type_cap=2)
    for answer, kind in (("a", "literal:area"), ("b", "literal:area"), ("c", "currency")):
        shares.count(answer, kind)
    assert shares.full() == {"literal:area"} and Shares(cap=3, type_cap=None).full() == frozenset()


def test_relation_types_leave_out_the_name_clue_and_the_quoted_sentence():
    assert relation_type("whose name begins with \u201cG\u201d and that is part of {x}") == "is part of {x}"
    assert relation_type("whose name begins with \u201cM\u201d and whose currency is {x}") == "whose currency is {x}"
    assert relation_type("is the country written as ___ in the sentence \u201cIt borders ___ and Somalia.\u201d of "
                         "the article on {x}") == "is the country written as ___ in the sentence of the article on {x}"
    assert relation_type("is the capital of {x}") == "is the capital of {x}"


def test_the_plots_draw_answer_types_relations_and_skeletons(tmp_path):
    stats = {"hops": {1: 2}, "modality_path_types": {"I-T": 2}, "labels": {"input_only": 2},
             "filters": {"answer_type_share": {"rejected": 1}}, "sampler": {"train": {"sampler_dead_end": 3}},
             "answer_types": {"city": 2},
             "diversity": {"relations": {"is the capital of {x}": 2}, "skeletons": {"I-T: What is {REF}?": 2},
                           "top_answers": {"Paris": 1, "Rome": 1}}}
    written = plots(stats, tmp_path)
    assert {"answer_types.png", "relations.png", "skeletons.png", "rejections_per_filter.png"} <= set(written)
