"""Probe 1 with a model, against a real chat-completions server on loopback that answers from a table of questions:
a question the model answers is rejected by ``text_only_answer``, one it cannot answer goes on, and a model that
cannot be reached is an infrastructure error (excluded, retried on restart), in the probe and in a pipeline run."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from data_gen.neos.cli import run
from data_gen.neos.llm import LLMTextOnlyProbe, ProbeUnavailable
from data_gen.neos.synth import Synthesizer
from neos_core.world.store import World
from verl_ext.reward.judge import JudgeConfig

DOWN = "model down"


@pytest.fixture(scope="module")
def tasks(small_world):
    """The first three tasks the pipeline meets (seed 0), in its order."""
    synth = Synthesizer(World.load(small_world), seed=0)
    out = []
    for seed_entity in synth.seeds():
        out += [c.task for c in synth.synthesize(seed_entity).candidates if c.task]
        if len(out) >= 3:
            return out[:3]
    raise AssertionError("the small world yields fewer than 3 tasks")


@pytest.fixture
async def chat_server():
    """Answers each question from ``answers`` (question -> reply, or DOWN for HTTP 503), else "I do not know"."""
    answers: dict[str, str] = {}
    seen: list[dict] = []

    async def chat(request):
        body = await request.json()
        seen.append(body)
        reply = answers.get(body["messages"][-1]["content"], "I do not know")
        if reply == DOWN:
            return web.Response(status=503, text="overloaded")
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": reply}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/v1")), answers, seen


async def test_the_probe_solves_what_the_model_answers_and_fails_loudly_when_it_cannot_ask(tasks, chat_server):
    url, answers, seen = chat_server
    right, wrong = tasks[0], tasks[1]
    down = right.model_copy(update={"question": right.question + " Think twice."})
    answers |= {right.question: f"The answer is {right.answer}.", wrong.question: "Atlantis", down.question: DOWN}
    async with aiohttp.ClientSession() as http:
        probe = LLMTextOnlyProbe(JudgeConfig(url=url, model="m", max_retries=1, retry_backoff_s=0.0), http)
        assert await probe.solves(right) and not await probe.solves(wrong)
        with pytest.raises(ProbeUnavailable, match="503"):
            await probe.solves(down)
    assert probe.calls == 4 and len(seen) == 4  # one each, two attempts for the unreachable one
    sent = seen[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and sent[1]["content"] == right.question  # text only
    assert seen[0]["model"] == "m" and seen[0]["temperature"] == 0.0


async def test_a_run_rejects_answered_questions_and_records_an_unreachable_model_as_an_error(
    small_world, tool_server, chat_server, tasks, tmp_path
):
    url, answers, _ = chat_server
    answers |= {tasks[0].question: DOWN, tasks[1].question: tasks[1].answer}
    llm = JudgeConfig(url=url, model="m", max_retries=0)
    await run(small_world, tmp_path, str(tool_server.make_url("")).rstrip("/"), seed=0, limit=1, ocr=False, llm=llm)
    outcomes = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    judged = [o for o in outcomes if o["task"]]
    first, second = judged[0], judged[1]
    assert first["task"]["id"] == tasks[0].id and first["status"] == "error"
    assert first["detail"].startswith("llm_text_only_answer (m): ClientResponseError: 503")
    assert second["task"]["id"] == tasks[1].id and (second["status"], second["filter"]) == ("rejected",
                                                                                            "text_only_answer")
    assert "llm_text_only_answer (m) answered it" == second["detail"]
    assert judged[-1]["status"] == "verified"  # questions the model cannot answer go on through probes 2-4
    # a later task with the second's question (the same structure over other entry images) is answered too; the
    # rest it cannot answer go on
    assert [o["probes"]["text_only_answer"] for o in judged[1:]] == [
        o["task"]["question"] == tasks[1].question for o in judged[1:]]
