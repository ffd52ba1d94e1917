"""The MEI server over loopback with the tiny VL model: chat completions answer the serving checkpoint's version,
structured errors for bad input, a checkpoint swap between calls; and the whole path tool server -> MEI server, where
the MEI log records v0 for one trajectory's calls and v1 after the swap."""

import base64
import io

import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from tool_server.app import ServerSettings, create_app as create_tool_app
from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.log import MEILog
from verl_ext.mei.server import MEIServer, activate, create_app, load_checkpoint

ORIGIN = "https://neos-world.invalid"


@pytest.fixture(scope="module")
def v1_dir(tiny_vl_model_dir, tmp_path_factory):
    """A second checkpoint: the tiny model with its language weights nudged, saved as train_mei saves one."""
    out = tmp_path_factory.mktemp("mei-v1")
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.model.language_model.embed_tokens.weight.add_(0.05)
    model.save_pretrained(out)
    AutoProcessor.from_pretrained(tiny_vl_model_dir).save_pretrained(out)
    return out


@pytest.fixture
async def mei_server(tiny_vl_model_dir):
    server = TestServer(create_app(MEIServer(load_checkpoint(tiny_vl_model_dir, "v0", max_new_tokens=8))))
    await server.start_server()
    yield server
    await server.close()


def png_url(color) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


async def test_chat_versions_errors_and_swap(mei_server, v1_dir, tmp_path):
    async with TestClient(mei_server) as client:
        messages = [{"role": "system", "content": "JSON only."},
                    {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                 {"type": "image_url", "image_url": {"url": png_url("red")}}]}]
        request = {"model": "mei", "messages": messages, "temperature": 0.0, "max_tokens": 4,
                   "response_format": {"type": "json_object"}}
        r = await client.post("/v1/chat/completions", json=request)
        body = await r.json()
        assert r.status == 200 and body["model"] == "v0"
        assert isinstance(body["choices"][0]["message"]["content"], str) and body["usage"]["completion_tokens"] <= 4
        bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]
        r = await client.post("/v1/chat/completions", json={"messages": bad})
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_messages"
        r = await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": -1})
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request"
        r = await client.post("/v1/chat/completions", data=b"{nope")
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_json"

        r = await client.post("/admin/load", json={"path": str(tmp_path / "missing"), "version": "v9"})
        assert r.status == 400 and (await r.json())["error"]["type"] == "load_failed"
        assert (await (await client.get("/admin/version")).json())["version"] == "v0"  # unchanged
        r = await client.post("/admin/load", json={"path": str(v1_dir), "version": "v1"})
        assert (await r.json()) == {"version": "v1", "previous": "v0"}
        r = await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
        assert (await r.json())["model"] == "v1"
        assert (await (await client.get("/v1/models")).json())["data"][0]["id"] == "v1"


async def test_health_answers_the_probe_of_rllms_gateway(mei_server):
    """Issue 34: rLLM's model gateway sends ``GET /health`` to each worker (``rllm_model_gateway.session_router``,
    its URL without ``/v1``) and routes only to those that answer 200; without it: "No healthy workers available"."""
    async with TestClient(mei_server) as client:
        r = await client.get("/health")
        assert r.status == 200 and await r.json() == {"status": "ok", "version": "v0"}


async def test_tool_server_records_the_version_that_served_each_call(mei_server, v1_dir, world, tmp_path):
    mei_url = str(mei_server.make_url("")).rstrip("/")
    mei = build_interface(MEIConfig(endpoint=mei_url + "/v1", model="mei", max_tokens=8,
                                    max_retries=0, max_page_chars=1500, ocr=False, log_path=tmp_path / "mei.jsonl"))
    app = create_tool_app(world=world, mei=mei, cache=None, settings=ServerSettings(max_register_images=8))

    async def web_visit(client, sid, turn):
        r = await client.post(f"/v1/sessions/{sid}/call", json={
            "name": "WebVisit", "arguments": {"url": [f"{ORIGIN}/wiki/France"], "goal": "capital of France"},
            "turn": turn})
        body = await r.json()
        assert r.status == 200, body
        return [m["version"] for m in body["mei"]]

    async with TestClient(TestServer(app)) as client:
        first = (await (await client.post("/v1/sessions", json={})).json())["session_id"]
        assert await web_visit(client, first, 0) + await web_visit(client, first, 1) == ["v0", "v0"]
        assert await activate(mei_url, v1_dir, "v1") == "v1"  # between rollout rounds, then the tool server is told
        assert (await client.post("/admin/mei_version", json={"version": "v1"})).status == 200
        second = (await (await client.post("/v1/sessions", json={})).json())["session_id"]
        assert await web_visit(client, second, 0) == ["v1"]
    records = MEILog.read(tmp_path / "mei.jsonl").records
    assert [(r.session_id, r.turn, r.mei_version) for r in records] == [
        (first, 0, "v0"), (first, 1, "v0"), (second, 0, "v1")]
    assert all(r.messages and r.messages[0]["role"] == "system" for r in records)  # inputs kept for SFT
    with pytest.raises(RuntimeError, match="refused"):
        await activate(mei_url, tmp_path / "missing", "v2")


async def test_resume_makes_the_server_serve_the_buffers_latest_checkpoint(mei_server, v1_dir, tmp_path):
    from verl_ext.mei.buffer import MEIBuffer
    from verl_ext.mei.server import served_version
    from verl_ext.trainer.mei_coevolution import resume_served_version

    url = str(mei_server.make_url("")).rstrip("/")
    buffer = MEIBuffer(tmp_path / "mei", initial_version="v0")
    assert await resume_served_version(buffer, url) is None  # before any MEI update: the initial checkpoint stays
    buffer.mark_mei_update("v1", end_offset=0, checkpoint=str(v1_dir))
    buffer.close()  # the trainer exits
    resumed = MEIBuffer(tmp_path / "mei", initial_version="v0")  # what a restarted trainer opens
    assert await resume_served_version(resumed, url) == "v1"
    assert await served_version(url) == "v1"  # what a fresh run checks against trainer.v1.neos.mei.initial_version
