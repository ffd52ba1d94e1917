"""The model-backed teacher of both pipelines against a real chat-completions server on loopback (its own thread),
scripted turn by turn, and a real tool server: an episode that reaches the gold answer is kept in the programmatic
expert's form and becomes the SFT row (messages checked by hand); a wrong answer, a malformed turn, a refused call,
an unexportable episode, a turn limit without an answer and an unreachable model each fall back to the programmatic
expert, counted by reason; in a pipeline run the teacher's episode is the verified task's success reference, and its
fallbacks are counted in the run's report."""

from __future__ import annotations

import argparse
import base64
import io
import json

import aiohttp
import pytest
from PIL import Image

from data_gen.common.sft import tool_call_message, tool_message
from data_gen.common.teacher import ModelTeacher, TeacherExpert, TeacherSettings
from data_gen.modalsearch.build import image_id, text_id
from data_gen.modalsearch.cli import run as modalsearch_run
from data_gen.modalsearch.expert import ModalSearchExpert
from data_gen.modalsearch.expert import teacher_brief as modalsearch_brief
from data_gen.modalsearch.export import sft_record as modalsearch_sft_record
from data_gen.modalsearch.flags import parser as modalsearch_parser
from data_gen.modalsearch.questions import QuestionWriter
from data_gen.neos.agents import ProgrammaticExpert, teacher_brief
from data_gen.neos.cli import run
from data_gen.neos.export import check_exportable, export, sft_record
from data_gen.neos.flags import parser
from data_gen.neos.observer import merged, palette
from data_gen.neos.store import ResultLog
from data_gen.neos.synth import Synthesizer
from neos_core.world.store import World
from tool_server.protocol import tool_schemas
from verl_ext.reward.judge import JudgeConfig
from verl_ext.rollout.prompts import final_turn_instruction, system_prompt
from verl_ext.tools.client import ToolServerClient


@pytest.fixture(scope="module")
def neos_task(small_world):
    """The first task of seed 0 (the programmatic expert solves it: test_neos_pipeline_on_cpu)."""
    synth = Synthesizer(World.load(small_world), seed=0)
    return synth.world, next(c.task for s in synth.seeds() for c in synth.synthesize(s).candidates if c.task)


def _turn(body: dict) -> int:
    return sum(m["role"] == "assistant" for m in body["messages"])


def _native(name: str, arguments: dict | str, call_id: str = "c1") -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _call(name: str, arguments: dict, *more: dict) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [_native(name, arguments), *more]}


def _script(*turns):
    """A model that gives ``turns[i]`` at its i-th turn (a str is the content, a dict the whole message)."""
    return lambda body: turns[min(_turn(body), len(turns) - 1)]


async def _solve(tool_server, url, world, task, *, max_turns=None, retries=0):
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        async with aiohttp.ClientSession() as http:
            config = JudgeConfig(url=url, model="teacher", max_retries=retries, retry_backoff_s=0.0)
            teacher = ModelTeacher(client, config, http, "neos", max_turns=max_turns)
            expert = TeacherExpert(teacher, ProgrammaticExpert(client), lambda t: teacher_brief(world, t),
                                   check_exportable)
            return await expert.solve(task), expert.report()


async def test_a_teacher_that_reaches_the_answer_is_kept_and_becomes_the_sft_row(neos_task, tool_server,
                                                                                threaded_chat):
    world, task = neos_task
    query = {"query": [f"{task.answer} capital"]}
    threaded_chat.reply = _script(
        {"role": "assistant", "content": "<think>Search first.</think>", "tool_calls": [_native("TextSearch", query)]},
        f"<think>The pages agree.</think>{task.answer}")
    (solved, record, why), report = await _solve(tool_server, threaded_chat.url, world, task)
    assert (solved, why, record.final_answer) == (True, "", task.answer)
    assert report == {"model": "teacher", "episodes": 1, "kept": 1, "calls": 2, "fallbacks": 0, "by_reason": {}}
    call, answer = record.turns
    assert call.outcome == "call_ok" and call.calls[0].tool_name == "TextSearch" and call.calls[0].arguments == query
    assert call.text == ('<think>Search first.</think><tool_call>{"name": "TextSearch", "arguments": '
                         f'{{"query": ["{task.answer} capital"]}}}}</tool_call>')
    assert (answer.outcome, answer.text) == ("answer", f"<think>The pages agree.</think>{task.answer}")
    observation = call.calls[0].observation
    assert task.answer in observation

    first, second = threaded_chat.seen
    schemas = tool_schemas("neos")
    assert first["tools"] == schemas and first["messages"][0] == {"role": "system",
                                                                  "content": system_prompt("neos", schemas)}
    user = first["messages"][1]["content"]
    assert user[-1] == {"type": "text", "text": task.question} and len(user) == len(task.entry_images) + 1
    head, data = user[0]["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64"
    assert base64.b64decode(data) == world.image_path(task.entry_images[0].image_id).read_bytes()
    assert second["messages"][2:] == [
        {"role": "assistant", "content": "<think>Search first.</think>",
         "tool_calls": [_native("TextSearch", json.dumps(query))]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": observation}]}]

    row = sft_record(task, record.model_dump(mode="json"))
    assert row["messages"] == [
        {"role": "system", "content": system_prompt("neos", schemas)},
        {"role": "user", "content": "<image>\n" * len(task.entry_images) + task.question},
        tool_call_message("TextSearch", query, "<think>Search first.</think>"), tool_message(observation),
        {"role": "assistant", "content": f"<think>The pages agree.</think>{task.answer}"}]
    assert row["images"] == [e.url for e in task.entry_images]


async def test_fetched_pixels_go_back_to_the_teacher_and_into_the_sft_row(neos_task, tool_server, threaded_chat):
    world, task = neos_task
    step = next(s for s in task.steps if s.checkpoint)
    fetch = {**_call("FetchImage", {"urls": [step.checkpoint_image_url]}), "content": None}  # null content is legal
    threaded_chat.reply = _script(fetch, _call("TextSearch", {"query": [task.answer]}), task.answer)
    (solved, record, _), _ = await _solve(tool_server, threaded_chat.url, world, task)
    assert solved and record.turns[0].calls[0].images_added == ["img_2"]
    tool_turn = threaded_chat.seen[1]["messages"][3]["content"]
    assert tool_turn[0] == {"type": "text", "text": "img_2:"} and tool_turn[1]["type"] == "image_url"
    with Image.open(io.BytesIO(base64.b64decode(tool_turn[1]["image_url"]["url"].split(",", 1)[1]))) as im:
        assert list(merged(palette(im))) == step.checkpoint_colours  # the fetched pixels themselves
    row = sft_record(task, record.model_dump(mode="json"))
    assert row["messages"][3]["content"].startswith("img_2:<image>")
    assert row["image_ids"] == [*(e.image_id for e in task.entry_images), step.checkpoint_image_id]


CROP = _call("CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}})


# Each script is a function of the task's answer.
@pytest.mark.parametrize(("script", "reason", "calls"), [
    (lambda gold: ("Atlantis",), "wrong_answer", 1),
    (lambda gold: ("<tool_call>{not json</tool_call>",), "malformed_turn:malformed_call", 1),
    (lambda gold: (_call("TextSearch", {"query": ["a"]}, _native("TextSearch", {"query": ["b"]}, "c2")),),
     "malformed_turn:too_many_calls", 1),
    (lambda gold: ("   ",), "malformed_turn:empty_turn", 1),
    (lambda gold: ({"role": "assistant", "content": "", "tool_calls": [{"function": "TextSearch"}]},),
     "malformed_turn:malformed_call", 1),
    (lambda gold: (_call("Teleport", {"to": "x"}),), "call_error", 1),
    (lambda gold: (_call("TextSearch", {"query": "not a list"}),), "call_error", 1),
    (lambda gold: (503,), "transport", 2),
    (lambda gold: (400,), "http_400", 1),  # refused (e.g. the context is too long): no retry
    (lambda gold: (gold,), "ungrounded_answer", 1),  # right, but no observation names it: a guess
    (lambda gold: (CROP, _call("TextSearch", {"query": [gold]}), gold), "not_exportable", 3),  # crop pixels
])
async def test_an_unusable_teacher_episode_falls_back_to_the_programmatic_expert(neos_task, tool_server,
                                                                                threaded_chat, script, reason, calls):
    world, task = neos_task
    threaded_chat.reply = _script(*script(task.answer))
    (solved, record, why), report = await _solve(tool_server, threaded_chat.url, world, task, retries=1)
    assert report == {"model": "teacher", "episodes": 1, "kept": 0, "calls": calls, "fallbacks": 1,
                      "by_reason": {reason: 1}}
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        alone = await ProgrammaticExpert(client).solve(task)
    assert (solved, why, record.final_answer) == (True, "", task.answer)
    assert [t.text for t in record.turns] == [t.text for t in alone[1].turns]  # the programmatic episode


async def test_the_last_turn_offers_no_tools_and_must_answer(neos_task, tool_server, threaded_chat):
    world, task = neos_task
    threaded_chat.reply = _script(_call("TextSearch", {"query": ["more"]}))
    _, report = await _solve(tool_server, threaded_chat.url, world, task, max_turns=2)
    assert report["by_reason"] == {"no_answer": 1} and report["calls"] == 2
    last = threaded_chat.seen[-1]
    assert "tools" not in last and last["messages"][-1] == {"role": "user", "content": final_turn_instruction("neos")}


async def test_the_modalsearch_teacher_speaks_react_and_its_episode_is_the_sft_row(modalsearch_graph, path_through,
                                                                                  tool_server, threaded_chat):
    world, kg, graph = modalsearch_graph
    task = QuestionWriter(world, kg, seed=0).write(graph, path_through(graph, text_id("France"), image_id("map_fra")))
    call = '<think>Find the article.</think><tool_call>{"name": "t2t_search", "arguments": {"query": "France"}}' \
        '</tool_call>'
    answer = f"<think>The map shows it.</think><answer>{task.answer}</answer>"
    threaded_chat.reply = _script(call, answer)
    async with ToolServerClient(str(tool_server.make_url("")).rstrip("/")) as client:
        async with aiohttp.ClientSession() as http:
            teacher = ModelTeacher(client, JudgeConfig(url=threaded_chat.url, model="t"), http, "modalsearch")
            expert = TeacherExpert(teacher, ModalSearchExpert(client, world), lambda t: modalsearch_brief(world, t),
                                   modalsearch_sft_record)
            solved, record, _ = await expert.solve(task)
            schemas = await client.list_tools("modalsearch")
    assert solved and record.protocol == "modalsearch" and [t.text for t in record.turns] == [call, answer]
    assert record.final_answer == task.answer and teacher.max_turns == 46
    first, second = threaded_chat.seen
    assert "tools" not in first and first["messages"][0]["content"] == system_prompt("modalsearch", schemas)
    assert first["messages"][1]["content"] == [{"type": "text", "text": task.question}]  # no start image
    observation = record.turns[0].calls[0].observation
    assert second["messages"][2:] == [{"role": "assistant", "content": call},
                                      {"role": "tool", "content": [{"type": "text", "text": observation}]}]
    assert modalsearch_sft_record(task, record.model_dump(mode="json"))["messages"] == [
        first["messages"][0], {"role": "user", "content": task.question},
        {"role": "assistant", "content": call}, {"role": "tool", "content": observation},
        {"role": "assistant", "content": answer}]


def test_the_flags_make_the_teacher():
    args = parser(argparse.ArgumentParser()).parse_args(["--world", "w", "--out", "o"])
    assert TeacherSettings.from_args(args) is None
    args = parser(argparse.ArgumentParser()).parse_args(
        ["--world", "w", "--out", "o", "--teacher-url", "http://h/v1", "--teacher-model", "big",
         "--teacher-max-turns", "8"])
    settings = TeacherSettings.from_args(args)
    assert (settings.chat.url, settings.chat.model, settings.max_turns) == ("http://h/v1", "big", 8)


async def test_a_pipeline_run_counts_the_teachers_fallbacks(small_world, tool_server, threaded_chat, tmp_path):
    threaded_chat.reply = _script("I do not know.")
    report = await run(small_world, tmp_path, str(tool_server.make_url("")).rstrip("/"), seed=0, limit=1, ocr=False,
                       teacher=TeacherSettings(JudgeConfig(url=threaded_chat.url, model="teacher")))
    outcomes = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    verified = [o for o in outcomes if o["status"] == "verified"]
    # the programmatic expert's episode: its reasoning, then the call
    assert len(verified) == 1
    assert '\n<tool_call>{"name": "ReverseImageSearch"' in verified[0]["trajectory"]["turns"][0]["text"]
    episodes = sum(1 for o in outcomes if o["status"] == "verified" or o.get("filter") == "expert")
    assert report["teacher"] == {"model": "teacher", "episodes": episodes, "kept": 0, "calls": episodes,
                                 "fallbacks": episodes, "by_reason": {"wrong_answer": episodes}}


class _Knower:
    """A scripted teacher that knows each question's answer (the seed-0 synthesizer makes the same tasks as the
    run): it searches for the answer, then gives it."""

    def __init__(self, small_world) -> None:
        self.synth = Synthesizer(World.load(small_world), seed=0)
        self.seeds = iter(self.synth.seeds())
        self.answers: dict[str, str] = {}

    def __call__(self, body: dict) -> dict | str:
        question = body["messages"][1]["content"][-1]["text"]
        while question not in self.answers:
            self.answers |= {c.task.question: c.task.answer
                             for c in self.synth.synthesize(next(self.seeds)).candidates if c.task}
        answer = self.answers[question]
        return _call("TextSearch", {"query": [answer]}) if _turn(body) == 0 else f"<think>Found it.</think>{answer}"


async def test_a_pipeline_run_keeps_the_teachers_episode_as_the_success_reference(small_world, tool_server,
                                                                                  threaded_chat, tmp_path):
    threaded_chat.reply = _Knower(small_world)
    report = await run(small_world, tmp_path, str(tool_server.make_url("")).rstrip("/"), seed=0, limit=1, ocr=False,
                       teacher=TeacherSettings(JudgeConfig(url=threaded_chat.url, model="teacher")))
    log = ResultLog(tmp_path / "results.jsonl")
    outcomes = log.outcomes()
    log.close()
    (verified,) = [o for o in outcomes if o.status == "verified"]
    turns = verified.trajectory["turns"]
    assert [t["calls"][0]["tool_name"] for t in turns[:-1]] == ["TextSearch"]
    assert turns[-1]["text"] == f"<think>Found it.</think>{verified.task.answer}"
    assert report["teacher"] == {"model": "teacher", "episodes": 1, "kept": 1, "calls": 2, "fallbacks": 0,
                                 "by_reason": {}}
    export(outcomes, small_world, tmp_path)
    (reference,) = [json.loads(line) for line in (tmp_path / "references.jsonl").read_text().splitlines()]
    assert (reference["task_id"], reference["trajectory"]) == (verified.task.id, verified.trajectory)


async def test_a_modalsearch_run_with_a_teacher_that_writes_prose_falls_back_on_every_task(small_world, tool_server,
                                                                                          threaded_chat, tmp_path):
    threaded_chat.reply = _script("I think the answer is blue.")  # no <think>, no <answer>: bad format
    args = modalsearch_parser(argparse.ArgumentParser()).parse_args(
        ["--world", str(small_world), "--out", str(tmp_path), "--limit", "2", "--max-nodes", "30",
         "--benchmark-nodes", "16", "--seeds", "4", "--attempts", "400", "--teacher-url", threaded_chat.url])
    report = await modalsearch_run(args, str(tool_server.make_url("")).rstrip("/"))
    outcomes = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    episodes = sum(1 for o in outcomes if o["status"] == "verified" or o.get("filter") == "expert")
    assert sum(o["status"] == "verified" for o in outcomes) == 2
    assert report["teacher"] == {"model": "teacher", "episodes": episodes, "kept": 0, "calls": episodes,
                                 "fallbacks": episodes, "by_reason": {"malformed_turn:bad_format": episodes}}
