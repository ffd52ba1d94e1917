"""verl's own tool loader over our YAML, driving a real tool server subprocess the way ``ToolAgentLoop`` does."""

from __future__ import annotations

import asyncio
import gc
import socket
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image
from verl.tools.tool_registry import initialize_tools_from_config

from tool_server.launch import served
from verl_ext.tools import verl_tools
from verl_ext.tools.client import ToolCallError, ToolServerClient, ToolServerUnavailable, close_shared_clients

REPO = Path(__file__).resolve().parents[2]
YAML = {p: REPO / "recipes" / "tools" / f"{p}_tools.yaml" for p in ("neos", "modalsearch")}
FLAG = "https://neos-world.invalid/media/flag_fra.png"


class Episode:
    """The two ``AgentData`` attributes the tools read; verl's class costs seconds of imports to build."""

    def __init__(self, image_data: list[Image.Image] | None = None) -> None:
        self.image_data = image_data
        self.assistant_turns = 1


@pytest.fixture(scope="module")
def server_url(small_world, tmp_path_factory):
    log = tmp_path_factory.mktemp("tool_server") / "mei.jsonl"
    with served(small_world, "--no-ocr", "--log-level", "WARNING", "--mei-log", str(log)) as url:
        yield url


@pytest.fixture
async def tools(server_url, monkeypatch):
    monkeypatch.setenv("NEOS_TOOL_SERVER_URL", server_url)
    yield {t.name: t for t in initialize_tools_from_config(str(YAML["neos"]))}
    await close_shared_clients()


async def call(tool, arguments: dict, episode: Episode, create_kwargs: dict | None = None):
    """What ``ToolAgentLoop._call_tool`` does: a fresh instance per call, released right after."""
    instance_id, _ = await tool.create(create_kwargs=create_kwargs or {})
    try:
        return await tool.execute(instance_id, arguments, agent_data=episode)
    finally:
        await tool.release(instance_id)


@pytest.mark.parametrize("protocol", ["neos", "modalsearch"])
async def test_yaml_schemas_equal_the_servers(server_url, protocol):
    yaml_tools = OmegaConf.to_container(OmegaConf.load(YAML[protocol]), resolve=False)["tools"]
    async with ToolServerClient(server_url) as client:
        assert [t["tool_schema"] for t in yaml_tools] == await client.list_tools(protocol)


def test_recipes_can_reference_the_tool_yaml():
    from verl_ext.config import packaged_path

    assert Path(packaged_path("tools/neos_tools.yaml")).read_text() == YAML["neos"].read_text()


async def test_text_search_returns_text(tools):
    response, reward, _ = await call(tools["TextSearch"], {"query": ["capital of France"]}, Episode())
    assert response.text.startswith("## Query 1: capital of France\n1. ")
    assert "https://neos-world.invalid/wiki/" in response.text and response.image is None and reward == 0.0


@pytest.mark.parametrize("question_images", [0, 1])
async def test_fetch_then_crop_share_the_register_across_instances(tools, question_images):
    episode = Episode([Image.new("RGB", (64, 48), "red")] * question_images or None)
    response, _, metrics = await call(tools["FetchImage"], {"urls": [FLAG]}, episode)
    assert [im.size for im in response.image] == [(320, 240)]
    ref = f"img_{question_images + 1}"
    assert metrics["new_images"] == [ref] and ref in response.text

    response, _, metrics = await call(tools["CropImage"], {"crop_config": {ref: [0, 0, 500, 500]}}, episode)
    assert [im.size for im in response.image] == [(160, 120)]
    assert metrics["new_images"] == [f"img_{question_images + 2}"]


async def test_parallel_first_calls_of_a_turn_open_one_session(tools):
    episode = Episode()
    results = await asyncio.gather(*(call(tools["FetchImage"], {"urls": [FLAG]}, episode) for _ in range(3)))
    assert sorted(m["new_images"][0] for _, _, m in results) == ["img_1", "img_2", "img_3"]


async def test_create_kwargs_images_are_the_question_images(tools):
    episode = Episode([Image.new("RGB", (8, 8))])  # ignored: create_kwargs name the question images
    kwargs = {"images": ["https://neos-world.invalid/media/map_fra.png", FLAG]}
    _, _, metrics = await call(tools["FetchImage"], {"urls": [FLAG]}, episode, kwargs)
    assert metrics["new_images"] == ["img_3"]


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("TextSearch", {"query": []}, "invalid_arguments"),
        ("TextSearch", {"q": "x"}, "invalid_arguments"),
        ("CropImage", {"crop_config": {"img_9": [0, 0, 10, 10]}}, "unknown_image"),
    ],
)
async def test_bad_arguments_become_a_text_error(tools, name, arguments, error):
    response, reward, metrics = await call(tools[name], arguments, Episode())
    assert response.text.startswith(f"Error: {error}") and response.image is None
    assert (reward, metrics) == (0.0, {"error": error})


async def test_the_session_is_deleted_when_the_episode_ends(tools, server_url):
    episode = Episode()
    await call(tools["FetchImage"], {"urls": [FLAG]}, episode)
    session_id = verl_tools._EPISODES[episode].result().session_id
    del episode
    gc.collect()
    await asyncio.sleep(0)  # the finalizer hands the DELETE to this loop with call_soon_threadsafe
    assert verl_tools._CLOSING
    await asyncio.gather(*verl_tools._CLOSING)
    async with ToolServerClient(server_url) as client:
        with pytest.raises(ToolCallError) as e:
            await client.call(session_id, "TextSearch", {"query": ["x"]})
    assert (e.value.type, e.value.status) == ("unknown_session", 404)


async def test_an_unreachable_server_raises_for_verl_to_report(monkeypatch):
    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("NEOS_TOOL_SERVER_URL", f"http://127.0.0.1:{port}")
    tool = next(t for t in initialize_tools_from_config(str(YAML["neos"])) if t.name == "TextSearch")
    try:
        with pytest.raises(ToolServerUnavailable) as e:
            await call(tool, {"query": ["x"]}, Episode())
        assert e.value.type == "connection_error"
    finally:
        await close_shared_clients()


async def test_execute_without_the_episode_is_refused(tools):
    instance_id, _ = await tools["TextSearch"].create()
    with pytest.raises(TypeError, match="agent_data"):
        await tools["TextSearch"].execute(instance_id, {"query": ["x"]})
