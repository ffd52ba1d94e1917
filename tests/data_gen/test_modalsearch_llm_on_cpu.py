"""The LLM relation proposer against a real HTTP chat-completions server on loopback (canned replies per model
name): a kept relation, a filtered link, and fallbacks to the offline proposer on malformed or unusable replies."""

import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from data_gen.kg import KG
from data_gen.modalsearch.llm import LLMRelationProposer
from data_gen.modalsearch.relations import OfflineRelationProposer
from neos_core.world.store import World
from verl_ext.reward.judge import JudgeConfig

REPLIES = {
    "keeps": json.dumps({"keep": True, "relation": "is the city that serves as seat of government of {x}",
                         "reason": "capital"}),
    "drops": json.dumps({"keep": False, "relation": "", "reason": "weak link"}),
    "fenced": "```json\n" + json.dumps({"keep": True, "relation": "is the main city of {x}", "reason": ""}) + "\n```",
    "prose": "Paris is the capital of France.",
    "names_target": json.dumps({"keep": True, "relation": "is Paris, the capital of {x}", "reason": ""}),
    "no_placeholder": json.dumps({"keep": True, "relation": "is the capital", "reason": ""}),
}


@pytest.fixture
async def chat_server():
    seen = []

    async def chat(request):
        body = await request.json()
        seen.append(body)
        content = REPLIES[body["model"]]
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": content}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/v1")), seen


@pytest.fixture(scope="module")
def world_kg(small_world):
    world = World.load(small_world)
    return world, KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)


async def _propose(world_kg, url, model):
    world, kg = world_kg
    async with aiohttp.ClientSession() as http:
        proposer = LLMRelationProposer(JudgeConfig(url=url, model=model), http, OfflineRelationProposer(world, kg))
        relation = await proposer.propose(world.pages["France"], world.pages["Paris"])
    return relation, proposer


async def test_kept_and_filtered_links(world_kg, chat_server):
    url, seen = chat_server
    relation, proposer = await _propose(world_kg, url, "keeps")
    assert (relation.phrase, relation.source, proposer.fallbacks) == (
        "is the city that serves as seat of government of {x}", "llm", 0)
    user = json.loads(seen[0]["messages"][-1]["content"])
    assert user["source_title"] == "France" and user["linked_title"] == "Paris"
    assert user["mentions"] and all("Paris" in m for m in user["mentions"])
    relation, _ = await _propose(world_kg, url, "drops")
    assert relation is None
    relation, _ = await _propose(world_kg, url, "fenced")
    assert relation.phrase == "is the main city of {x}"


@pytest.mark.parametrize("model", ["prose", "names_target", "no_placeholder"])
async def test_unusable_replies_fall_back_to_the_offline_proposer(world_kg, chat_server, model):
    url, _ = chat_server
    relation, proposer = await _propose(world_kg, url, model)
    assert proposer.fallbacks == 1 and relation.source == "kg" and relation.phrase == "is the capital of {x}"


async def test_an_unreachable_endpoint_falls_back(world_kg):
    relation, proposer = await _propose(world_kg, "http://127.0.0.1:9/v1", "keeps")
    assert proposer.fallbacks == 1 and relation.source == "kg"
