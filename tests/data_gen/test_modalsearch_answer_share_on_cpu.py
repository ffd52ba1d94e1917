"""No ModalSearch answer above its share of a run: a question whose answer already has ``answer_cap(--limit)``
verified questions is rejected as ``answer_share`` before the expert runs, and counted."""

from collections import Counter

from data_gen.modalsearch.build import image_id, text_id
from data_gen.modalsearch.cli import _judge
from data_gen.modalsearch.questions import QuestionWriter


class _NoExpert:
    """Fails the test if the expert is reached."""

    name = "no_expert"

    async def solve(self, task):
        raise AssertionError("the expert ran on a question over its answer's share")


async def test_an_answer_over_its_share_is_rejected_before_the_expert(modalsearch_graph, path_through):
    world, kg, graph = modalsearch_graph
    writer = QuestionWriter(world, kg, seed=0)
    path = path_through(graph, text_id("France"), image_id("map_fra"))
    answer = writer.write(graph, path).answer
    outcome = await _judge(writer, _NoExpert(), graph, path, "k", Counter({answer.lower(): 1}), cap=1)
    assert (outcome.status, outcome.filter) == ("rejected", "answer_share") and answer in outcome.detail
