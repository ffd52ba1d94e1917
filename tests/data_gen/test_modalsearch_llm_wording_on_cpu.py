"""ModalSearch's terminal question and backward rewrites worded by a model, against a real chat-completions server
on loopback (its own thread): the model's words are taken when usable, the fact or visual ask and its verification
(T = 3 with and without the image) are the offline writer's, the leak check still rejects, and every unusable reply
falls back to the template wording, counted by reason."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from data_gen.common.llm import SyncChat
from data_gen.modalsearch.build import image_id, text_id
from data_gen.modalsearch.cli import run
from data_gen.modalsearch.llm import LLMWording
from data_gen.modalsearch.questions import QuestionWriter, Rejection
from verl_ext.reward.judge import JudgeConfig

MAP = "\u27e8v1\u27e9"  # the mark of the path's second node while the question is rewritten backward


def _reply(body: dict) -> str:
    """Per model name: "fluent" rewords both steps; "leaky" names the answer in the rewrite; the rest break a rule."""
    user = json.loads(body["messages"][1]["content"])
    model, terminal = body["model"], "template" in user
    if terminal:
        template = user["template"]
        return {
            "fluent": json.dumps({"question": "Tell me: " + template[0].lower() + template[1:]}),
            "leaky": json.dumps({"question": template}),
            "no_ref": json.dumps({"question": "Which colour covers the largest area of the map?"}),
            "reveals": json.dumps({"question": f"Is {{REF}} mostly {user['answer']}?"}),
            "prose": "Which colour covers the largest area of {REF}?",
            "marks": json.dumps({"question": "Which colour covers the largest area of {REF} near \u27e8v3\u27e9?"}),
        }[model]
    rewritten = user["question"].replace(user["placeholder"], user["description"])
    return {
        "fluent": json.dumps({"question": rewritten.replace("Tell me: ", "Please tell me: ")}),
        "leaky": json.dumps({"question": rewritten.replace("?", " (it is white)?")}),
        "no_ref": json.dumps({"question": user["question"]}),  # the replaced mark is still there
        "reveals": json.dumps({"question": rewritten.rstrip("?")}),  # not a question
        "prose": rewritten,
        "marks": json.dumps({"question": rewritten.replace("?", " and of \u27e8v3\u27e9?")}),
    }[model]


@pytest.fixture(scope="module")
def offline(modalsearch_graph, path_through):
    world, kg, graph = modalsearch_graph
    path = path_through(graph, text_id("France"), image_id("map_fra"))
    return path, QuestionWriter(world, kg, seed=0).write(graph, path)


def _write(modalsearch_graph, path, url, model):
    world, kg, graph = modalsearch_graph
    with SyncChat(JudgeConfig(url=url, model=model, max_retries=0)) as chat:
        wording = LLMWording(chat)
        task = QuestionWriter(world, kg, seed=0, wording=wording).write(graph, path)
    return task, wording.usage


def test_the_models_words_are_used_and_the_verification_is_the_writers(modalsearch_graph, offline, threaded_chat):
    path, base = offline
    threaded_chat.reply = _reply
    task, usage = _write(modalsearch_graph, path, threaded_chat.url, "fluent")
    assert not isinstance(task, Rejection), task
    assert base.question.startswith("Which colour covers the second-largest area of the locator map of the country")
    assert task.question == "Please tell me: w" + base.question[1:]
    assert task.terminal.template == "Tell me: which colour covers the second-largest area of {REF}?"
    assert task.terminal.question == "Tell me: which colour covers the second-largest area of the locator map " \
        f"({graph_description(modalsearch_graph)})?"
    # the same ask, answer and T = 3 verification as offline: only the words changed
    assert (task.answer, task.terminal.c_with, task.terminal.c_without, task.label) == (
        base.answer, base.terminal.c_with, base.terminal.c_without, base.label)
    assert usage.report() == {"calls": 2, "fallbacks": 0, "by_reason": {}}  # the terminal question, one rewrite
    terminal_request, rewrite_request = (json.loads(b["messages"][1]["content"]) for b in threaded_chat.seen)
    assert terminal_request["answer"] == "white" and terminal_request["entity_kind"] == "locator map"
    assert rewrite_request["placeholder"] == MAP and "\u27e8v0\u27e9" in rewrite_request["description"]


def graph_description(modalsearch_graph) -> str:
    return modalsearch_graph[2].nodes[image_id("map_fra")].description


def test_a_rewrite_that_names_the_answer_is_still_rejected_by_the_leak_check(modalsearch_graph, offline,
                                                                               threaded_chat):
    path, _ = offline
    threaded_chat.reply = _reply
    task, usage = _write(modalsearch_graph, path, threaded_chat.url, "leaky")
    assert isinstance(task, Rejection) and task.filter == "leak" and "white" in task.detail
    assert usage.fallbacks == {}


@pytest.mark.parametrize(("model", "reasons"), [
    ("no_ref", {"form": 2}), ("reveals", {"reveals_answer": 1, "form": 1}), ("prose", {"invalid": 2}), ("marks", {"form": 2})])
def test_unusable_wordings_fall_back_to_the_templates(modalsearch_graph, offline, threaded_chat, model, reasons):
    path, base = offline
    threaded_chat.reply = _reply
    task, usage = _write(modalsearch_graph, path, threaded_chat.url, model)
    assert task.question == base.question and task.terminal == base.terminal
    assert usage.fallbacks == reasons


def test_an_unreachable_model_falls_back(modalsearch_graph, offline):
    path, base = offline
    task, usage = _write(modalsearch_graph, path, "http://127.0.0.1:9/v1", "m")
    assert task.question == base.question and usage.fallbacks == {"transport": 2}


def _pipeline_model(body: dict) -> str:
    """Words every question as "fluent" does; answers relation proposals with prose (so they fall back, counted)."""
    user = json.loads(body["messages"][1]["content"])
    if "source_title" in user:
        return "These articles are related."
    return _reply({**body, "model": "fluent"})


async def test_a_pipeline_run_with_a_model_verifies_questions_in_its_words(small_world, tool_server, threaded_chat,
                                                                          tmp_path):
    threaded_chat.reply = _pipeline_model
    args = Namespace(world=small_world, out=tmp_path, limit=3, seed=0, max_nodes=30, benchmark_nodes=16, seeds=4,
                     text_only=False,
                     attempts=400, llm_url=threaded_chat.url, llm_model="m", ocr=False,
                     teacher_url=None)
    report = await run(args, str(tool_server.make_url("")).rstrip("/"))
    verified = [json.loads(line)["task"] for line in (tmp_path / "results.jsonl").read_text().splitlines()
                if json.loads(line)["status"] == "verified"]
    assert len(verified) == 3 and all(t["question"].startswith(("Tell me: ", "Please tell me: ")) for t in verified)
    assert all(t["terminal"]["template"].startswith("Tell me: ") for t in verified)
    assert report["question_wording"] == "llm_wording" and report["llm_wording"]["fallbacks"] == 0
    assert report["llm_relations"]["calls"] == report["llm_relations"]["fallbacks"] > 0
