"""The vLLM-backed MEI server's contract against a stand-in for vLLM's HTTP server (vLLM cannot run on this CPU
machine; the real one runs in ``tests/mei/test_vllm_server_on_gpu.py``). The stand-in answers the routes vLLM 0.24
serves with ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``, ``/reset_prefix_cache``, ``/reset_encoder_cache``,
``/health``, ``/v1/chat/completions``) and records what reached it, so the tests can check the order of reloads and
requests without timing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from verl_ext.mei.server import activate, served_version
from verl_ext.mei.vllm_server import SERVED_NAME, VLLMMEIServer, main, shape_of
from verl_ext.mei.server import create_app

CONFIG = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
          "text_config": {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 151936}}


def checkpoint(root: Path, name: str, **text_overrides) -> Path:
    path = root / name
    path.mkdir()
    config = {**CONFIG, "text_config": {**CONFIG["text_config"], **text_overrides}}
    (path / "config.json").write_text(json.dumps(config))
    return path


class StandInVLLM:
    """A stand-in for ``vllm serve`` (dev mode): answers with the weights it holds; ``hold`` pauses answers."""

    def __init__(self, weights: str) -> None:
        self.weights = weights
        self.events: list[tuple] = []
        self.max_tokens: list[int] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.reload_status = 200

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.events.append(("chat", body["model"], self.weights))
        self.max_tokens.append(body["max_tokens"])
        weights = self.weights
        await self.hold.wait()
        return web.json_response({"object": "chat.completion", "model": body["model"], "choices": [
            {"index": 0, "message": {"role": "assistant", "content": weights}, "finish_reason": "stop"}]})

    async def rpc(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.events.append(("rpc", body["method"], body.get("kwargs")))
        if self.reload_status != 200:
            return web.json_response({"detail": "boom"}, status=self.reload_status)
        self.weights = body["kwargs"]["weights_path"]
        return web.json_response({"results": [None]})

    async def reset(self, request: web.Request) -> web.Response:
        self.events.append(("reset", request.path))
        return web.Response()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/collective_rpc", self.rpc)
        app.router.add_post("/reset_prefix_cache", self.reset)
        app.router.add_post("/reset_encoder_cache", self.reset)
        app.router.add_get("/health", self.health)
        return app


@pytest.fixture
async def stack(tmp_path):
    v0 = checkpoint(tmp_path, "v0")
    vllm = StandInVLLM(str(v0))
    upstream = TestServer(vllm.app())
    await upstream.start_server()
    server = VLLMMEIServer(str(upstream.make_url("")), v0, "v0", max_new_tokens=768)
    front = TestServer(create_app(server))
    await front.start_server()
    async with TestClient(front) as client:
        yield client, vllm, tmp_path, server
    await server.close()
    await front.close()
    await upstream.close()


MESSAGES = [{"role": "user", "content": "hello"}]


async def test_answers_carry_the_version_and_reach_vllm_under_its_served_name(stack):
    client, vllm, _, _ = stack
    r = await client.post("/v1/chat/completions", json={"model": "whatever", "messages": MESSAGES})
    body = await r.json()
    assert r.status == 200 and body["model"] == "v0"
    assert vllm.events == [("chat", SERVED_NAME, vllm.weights)]
    for asked, sent in ((2048, 768), (100, 100)):  # capped as the transformers server caps it
        await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": asked})
        assert vllm.max_tokens[-1] == sent
    assert vllm.max_tokens[0] == 768
    r = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 0})
    assert r.status == 400 and "max_tokens" in (await r.json())["error"]["message"]
    assert (await (await client.get("/admin/version")).json())["version"] == "v0"
    assert (await (await client.get("/health")).json()) == {"status": "ok", "version": "v0"}
    r = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "stream": True})
    assert r.status == 400 and "stream" in (await r.json())["error"]["message"]
    r = await client.post("/v1/chat/completions", data=b"{no")
    assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_json"


async def test_load_reloads_in_place_then_resets_caches_then_switches(stack):
    client, vllm, root, _ = stack
    v1 = checkpoint(root, "v1")
    url = str(client.make_url("")).rstrip("/")
    assert await activate(url, v1, "v1") == "v1"  # the trainer's own client
    assert vllm.events == [("rpc", "reload_weights", {"weights_path": str(v1)}),
                           ("reset", "/reset_prefix_cache"), ("reset", "/reset_encoder_cache")]
    assert await served_version(url) == "v1"
    body = await (await client.post("/v1/chat/completions", json={"messages": MESSAGES})).json()
    assert body["model"] == "v1" and body["choices"][0]["message"]["content"] == str(v1)


async def test_a_load_waits_for_requests_in_flight_and_holds_new_ones(stack):
    """Request A is in vLLM when the load arrives: A finishes on v0 weights and says v0; the reload happens after
    A; request B, sent during the load, reaches vLLM after the reload and says v1."""
    client, vllm, root, server = stack
    v1 = checkpoint(root, "v1")
    vllm.hold.clear()
    a = asyncio.create_task(client.post("/v1/chat/completions", json={"messages": MESSAGES}))
    while not vllm.events:
        await asyncio.sleep(0.01)
    load = asyncio.create_task(client.post("/admin/load", json={"path": str(v1), "version": "v1"}))
    while not server.gate.switching:  # the load waits for A, holding new requests back
        await asyncio.sleep(0.01)
    b = asyncio.create_task(client.post("/v1/chat/completions", json={"messages": MESSAGES}))
    await asyncio.sleep(0.05)
    assert [e[0] for e in vllm.events] == ["chat"]  # neither the reload nor B passed A
    vllm.hold.set()
    ra, rl, rb = await asyncio.gather(a, load, b)
    assert (await ra.json())["model"] == "v0" and (await ra.json())["choices"][0]["message"]["content"].endswith("v0")
    assert (await rl.json())["version"] == "v1"
    assert (await rb.json())["model"] == "v1" and (await rb.json())["choices"][0]["message"]["content"] == str(v1)
    assert [e[0] for e in vllm.events] == ["chat", "rpc", "reset", "reset", "chat"]


async def test_refused_loads_change_nothing(stack):
    client, vllm, root, _ = stack
    wider = checkpoint(root, "wider", hidden_size=256)
    r = await client.post("/admin/load", json={"path": str(wider), "version": "v1"})
    err = (await r.json())["error"]
    assert r.status == 400 and err["type"] == "load_failed" and "hidden_size" in err["message"]
    r = await client.post("/admin/load", json={"path": str(root / "missing"), "version": "v1"})
    assert r.status == 400 and (await r.json())["error"]["type"] == "load_failed"
    r = await client.post("/admin/load", json={"path": str(root / "v0")})
    assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request"
    vllm.reload_status = 500
    r = await client.post("/admin/load", json={"path": str(checkpoint(root, "v1")), "version": "v1"})
    assert r.status == 502 and "reload_weights" in (await r.json())["error"]["message"]
    assert [e for e in vllm.events if e[0] != "rpc"] == []  # no cache reset after a failed reload
    assert (await (await client.get("/admin/version")).json())["version"] == "v0"


async def test_an_unreachable_vllm_is_a_503_not_a_crash(tmp_path):
    server = VLLMMEIServer("http://127.0.0.1:9", checkpoint(tmp_path, "v0"), "v0", timeout_s=5)
    async with TestClient(TestServer(create_app(server))) as client:
        for method, route, body in (("post", "/v1/chat/completions", {"messages": MESSAGES}), ("get", "/health", None)):
            r = await getattr(client, method)(route, json=body)
            assert r.status == 503 and (await r.json())["error"]["type"] == "upstream_unavailable"
    await server.close()


def test_shape_reads_text_config_and_names_bad_files(tmp_path):
    assert shape_of(checkpoint(tmp_path, "a"))["hidden_size"] == 128
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text("{nope")
    with pytest.raises(ValueError, match=r"b/config.json: not JSON"):
        shape_of(tmp_path / "b")


def test_cli_refuses_engine_flags_with_upstream_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(checkpoint(tmp_path, "v0")), "--version", "v0", "--upstream", "http://x", "--",
              "--max-model-len", "4096"])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--upstream" in err
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path), "--version", "v0"])
    assert "no config.json" in capsys.readouterr().err
