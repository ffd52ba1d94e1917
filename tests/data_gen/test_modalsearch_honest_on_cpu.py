"""Issue 36's rules, each on a hand-picked case: the replay checker finds the steps a policy could not have taken; the
expert finds a text start through a search of what the question names and compares every reverse-search match;
a flag clue makes it fetch each candidate's flag; a labelled map starts no question; a quantity the page states
twice differently, or without a year, is not asked."""

from data_gen.modalsearch.build import GraphBuilder, image_id, text_id
from data_gen.modalsearch.expert import ModalSearchExpert
from data_gen.modalsearch.facts import conflicting, dated_scope, numbers_in
from data_gen.modalsearch.graph import Graph, GraphEdge, Relation
from data_gen.modalsearch.questions import QuestionWriter, Rejection
from data_gen.modalsearch.relations import OfflineRelationProposer
from data_gen.modalsearch.replay import unexplained
from data_gen.modalsearch.sampler import Path
from verl_ext.tools.client import ToolServerClient

URL = "https://neos-world.invalid/wiki/Turks_and_Caicos_Islands"
QUESTION = "Which colour covers the largest area of the national flag of the country whose capital is Cockburn Town?"


def _turn(index, text, tool=None, arguments=None, observation="", images=()):
    calls = [{"tool_name": tool, "arguments": arguments, "observation": observation, "images_added": list(images)}]
    return {"index": index, "text": text, "calls": calls if tool else [], "outcome": "call_ok" if tool else "answer"}


def test_the_replay_finds_a_page_read_before_any_search_showed_it():
    # the expert's opening before issue 36: it read the start's page, which the question never names
    read_first = [_turn(0, "<think>The question starts from an article; I read it.</think>", "read_url", {"url": URL})]
    assert unexplained(read_first, QUESTION, {"Turks and Caicos Islands"}, 0) == [
        f"turn 0: read_url of {URL!r}, which nothing showed"]
    searched = [_turn(0, "<think>I search for Cockburn Town.</think>", "t2t_search", {"query": "Cockburn Town"},
                      f"1. [page_1] Cockburn Town\n   URL: https://neos-world.invalid/wiki/Cockburn_Town\n   capital "
                      f"of the Turks and Caicos Islands ... {URL}"),
                _turn(1, "<think>The page of Turks and Caicos Islands is listed; I read it.</think>", "read_url",
                      {"url": URL}, "# Turks and Caicos Islands ..."),
                _turn(2, "<think>The page says so.</think><answer>Turks and Caicos Islands</answer>")]
    assert unexplained(searched, QUESTION, {"Turks and Caicos Islands", "Cockburn Town"}, 0) == []


def test_the_replay_finds_unsaid_query_words_early_names_and_unstated_answers():
    turns = [_turn(0, "<think>It must be Germany; its flag is black.</think>", "t2t_search",
                   {"query": "Germany flag"}, "1. [page_1] Germany ... Black"),
             _turn(1, "<think>Done.</think><answer>Berlin</answer>")]
    assert unexplained(turns, "Which city is the capital of the country whose flag is shown?", {"Germany", "Black"},
                       1) == ["turn 0: the reasoning names 'Germany' before anything showed it",  # "black": a colour
                              "turn 0: t2t_search query 'Germany flag' uses ['Germany'], which nothing said",
                              "turn 1: the answer 'Berlin' is in no observation"]
    pixels = [_turn(0, "<think>I load it.</think>", "read_url", {"url": "img_1"}, "Image loaded as img_2", ["img_2"]),
              _turn(1, "<think>The pixels show it.</think><answer>red</answer>")]
    assert unexplained(pixels, "Which colour covers the largest area of img_1?", set(), 1) == []


def test_a_labelled_map_starts_no_question(modalsearch_graph, path_through):
    world, kg, graph = modalsearch_graph
    task = QuestionWriter(world, kg, seed=0).write(graph, path_through(graph, image_id("map_fra"),
                                                                       text_id("Western_Europe")))
    assert task == Rejection("named_start_image", "map_fra prints its entity's name")


def test_quantities_agree_are_dated_and_count_the_city():
    amman = "With a population of five million as of 2024, Amman is the eighth-largest metropolitan area."
    assert numbers_in(amman) == [5e6] and numbers_in("Population: 1,275,857 (GeoNames).") == [1275857.0]
    assert conflicting("1275857", [amman, "Population: 1,275,857 (GeoNames)."]) == amman
    assert conflicting("83000000", ["Its 16 states have a population of over 83 million."]) is None
    assert dated_scope(amman) is None  # the metropolitan area's figure
    assert dated_scope("At the 2021 census the city had 845,767 inhabitants.") == "2021"
    assert dated_scope("Population: 1,275,857 (GeoNames).") is None


def test_amman_s_two_populations_are_not_asked(modalsearch_graph):
    world, kg, _ = modalsearch_graph
    writer = QuestionWriter(world, kg, seed=0)
    fact = next(t for t in world.triples if t.s == "city:250441" and t.p == "P1082")
    assert writer._quantity_evidence(fact, "population", ["1,275,857", fact.o], world.pages["Amman"].text) is None
    assert writer.counts == {"source_conflict": 1}


async def _solve(world, task, tool_server):
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        return await ModalSearchExpert(client, world).solve(task)


def _names(world):
    return {e.label for e in world.entities.values() if len(e.label) >= 4}


async def test_a_text_start_is_searched_by_its_clue_and_a_flag_clue_fetches_every_candidate(modalsearch_graph,
                                                                                             tool_server):
    # Czechia -> Germany: of Czechia's 4 neighbours only Germany's flag is mostly black, red and yellow (Austria and
    # Poland: red and white, Slovakia: blue, red and white); Czechia is "the country whose capital is Prague"
    world, kg, _ = modalsearch_graph
    relation = await OfflineRelationProposer(world, kg).propose(world.pages["Czechia"], world.pages["Germany"])
    assert relation.phrase == "whose national flag is mostly black, red and yellow and that shares a border with {x}"
    assert relation.peers == ("Austria", "Germany", "Poland", "Slovakia")
    builder, graph = GraphBuilder(world, kg, search=None), Graph("train")
    for page in ("Czechia", "Germany"):
        graph.add_node(builder.text_node(page))
    graph.add_edge(GraphEdge(text_id("Czechia"), text_id("Germany"), "t2t", relation))
    path = (text_id("Czechia"), text_id("Germany"))
    task = QuestionWriter(world, kg, seed=0).write(graph, Path(path, (graph.out[path[0]][path[1]],)))
    assert not isinstance(task, Rejection), task
    assert task.label == "search_required" and task.hops[0].peers == list(relation.peers)
    solved, record, why = await _solve(world, task, tool_server)
    assert solved, why
    first = record.turns[0].calls[0]
    assert first.tool_name == "t2t_search" and first.arguments["query"] in task.question
    flags = [c.arguments["url"] for t in record.turns for c in t.calls if c.images_added]
    assert [u.rsplit("/", 1)[1] for u in flags] == ["flag_aut.png", "flag_deu.png", "flag_pol.png", "flag_svk.png"]
    choice = next(t.text for t in record.turns if t.calls and t.calls[0].arguments == {"query": "Germany"})
    assert "Slovakia's flag is mostly blue, red and white: not as the clue says. Only Germany's flag" in choice
    turns = [t.model_dump(mode="json") for t in record.turns]
    assert unexplained(turns, task.question, _names(world), 0) == []


async def test_the_expert_compares_every_look_alike_of_the_question_image(modalsearch_graph, tool_server):
    # Germany's flag: the reverse search also shows Armenia's, Estonia's, Catalonia's and Botswana's
    world, kg, _ = modalsearch_graph
    builder, graph = GraphBuilder(world, kg, search=None), Graph("train")
    graph.add_node(builder.image_node("flag_deu", "national flag of Germany"))
    graph.add_node(builder.text_node("Germany"))
    graph.add_edge(GraphEdge(image_id("flag_deu"), text_id("Germany"), "i2t",
                             Relation("is the country depicted in {x}", unique=True, source="depiction")))
    path = (image_id("flag_deu"), text_id("Germany"))
    task = QuestionWriter(world, kg, seed=0).write(graph, Path(path, (graph.out[path[0]][path[1]],)))
    assert not isinstance(task, Rejection), task
    solved, record, why = await _solve(world, task, tool_server)
    assert solved, why
    shown = [r for r in record.turns[0].calls[0].observation.splitlines() if "(visual_match)" in r]
    loads = [c.arguments["url"] for t in record.turns for c in t.calls if c.images_added]
    assert len(shown) == len(loads) >= 3 and "flag_deu.png" in " ".join(loads)
    verdict = record.turns[len(loads) + 1].text
    assert "\u201cFlag of Germany\u201d matches the question's image, the other" in verdict
    assert "reads black 33%, red 33%, yellow 33%" in record.turns[1].text  # the question image, before the loads
    turns = [t.model_dump(mode="json") for t in record.turns]
    assert unexplained(turns, task.question, _names(world), 1) == []
