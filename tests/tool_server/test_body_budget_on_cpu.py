"""The large request bodies a process reads at once are bounded: each body has its own limit (64 MiB, a session open
with question images), but one client sending many at once would hold all of them, and their decoded copies."""

from __future__ import annotations

import asyncio
import json

import pytest

from tool_server.errors import ToolError
from tool_server.limits import MAX_BODY_BYTES, MAX_CALL_BODY_BYTES, MAX_INFLIGHT_BODY_BYTES, BodyBudget

MIB = 2**20


def test_a_body_that_does_not_fit_is_refused_and_small_ones_always_pass():
    budget = BodyBudget(limit_bytes=3 * MIB)
    with budget.hold(2 * MIB):
        assert budget.used == 2 * MIB
        with pytest.raises(ToolError) as refused:
            with budget.hold(2 * MIB):
                pass
        assert (refused.value.type, refused.value.status, refused.value.field) == ("server_busy", 503, "body")
        with budget.hold(1 * MIB):  # exactly the call limit: not counted
            assert budget.used == 2 * MIB
        with budget.hold(None, has_body=False):  # a GET
            assert budget.used == 2 * MIB
        with pytest.raises(ToolError):  # 2 MiB + (1 MiB + 1 byte) passes 3 MiB
            with budget.hold(MIB + 1):
                pass
    assert budget.used == 0


def test_the_budget_counts_a_body_of_unknown_length_as_the_largest_and_gives_it_back():
    budget = BodyBudget(limit_bytes=MAX_BODY_BYTES + 2 * MIB)
    with budget.hold(None):  # chunked: up to MAX_BODY_BYTES
        assert budget.used == MAX_BODY_BYTES
        with budget.hold(2 * MIB):
            assert budget.used == MAX_BODY_BYTES + 2 * MIB
    with pytest.raises(ValueError):  # an error inside gives the bytes back too
        with budget.hold(3 * MIB):
            raise ValueError
    assert budget.used == 0


def test_shipped_defaults():
    from tool_server.__main__ import parser, server_settings
    from tool_server.app import ServerSettings

    assert MAX_INFLIGHT_BODY_BYTES == 256 * MIB and MAX_CALL_BODY_BYTES == MIB and MAX_BODY_BYTES == 64 * MIB
    assert ServerSettings().max_inflight_body_bytes == 256 * MIB
    args = parser().parse_args(["--world", "w"])
    assert args.inflight_body_mib == 256
    assert server_settings(args, share=4).max_inflight_body_bytes == 256 * MIB  # not split between --workers


def _padded_session(n_bytes: int) -> bytes:
    """A valid session open of exactly ``n_bytes`` (JSON whitespace as padding)."""
    head, tail = b'{"group_id": "g"', b"}"
    return head + b" " * (n_bytes - len(head) - len(tail)) + tail


async def test_a_session_open_that_does_not_fit_beside_one_being_read_gets_503_server_busy(world, tmp_path):
    """One body is held half sent on a raw connection; a second one that would pass the budget is refused at once,
    before its body is read; once the first has been answered the same request succeeds."""
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.mei import MEIConfig, build_interface

    mei = build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False))
    app = create_app(world=world, mei=mei, settings=ServerSettings(max_inflight_body_bytes=3 * MIB))
    body = _padded_session(2 * MIB)
    async with TestClient(TestServer(app)) as client:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body[: MIB])
        await writer.drain()
        for _ in range(200):  # until the server has taken the first body's bytes from the budget
            if _used(app):
                break
            await asyncio.sleep(0.01)
        r = await client.post("/v1/sessions", data=body)
        answer = await r.json()
        assert (r.status, answer["error"]["type"], answer["error"]["field"]) == (503, "server_busy", "body")
        assert (await client.post("/v1/sessions", data=_padded_session(MIB))).status == 200  # a 1 MiB body passes
        writer.write(body[MIB:])
        await writer.drain()
        status_line = await reader.readline()
        assert status_line.split()[1] == b"200"
        writer.close()
        r = await client.post("/v1/sessions", data=body)
        assert r.status == 200 and json.loads(await r.read())["session_id"]
        assert _used(app) == 0
        metrics = await (await client.get("/metrics")).text()
        assert 'tool_errors_total{type="server_busy"} 1' in metrics.splitlines()


def _used(app) -> int:
    from tool_server.app import BODIES

    return app[BODIES].used


async def test_the_workers_router_refuses_a_body_that_does_not_fit_before_reading_it():
    """The --workers router holds a session open's body while it forwards it: its own budget refuses the next one
    (no worker needed to see it: without any, an admitted open would be 503 worker_unavailable)."""
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.workers import Router

    router = Router([], [], bodies=BodyBudget(limit_bytes=3 * MIB))
    async with TestClient(TestServer(router.app())) as client:
        with router._bodies.hold(2 * MIB):
            r = await client.post("/v1/sessions", data=_padded_session(2 * MIB))
            assert (r.status, (await r.json())["error"]["type"]) == (503, "server_busy")
            r = await client.post("/admin/mei_version", data=_padded_session(2 * MIB))
            assert (r.status, (await r.json())["error"]["type"]) == (503, "server_busy")
        r = await client.post("/v1/sessions", data=_padded_session(2 * MIB))
        assert (r.status, (await r.json())["error"]["type"]) == (503, "worker_unavailable")
        metrics = await (await client.get("/metrics")).text()
    assert 'tool_server_router_events_total{event="server_busy"} 2' in metrics.splitlines()


async def test_the_client_sends_a_busy_session_open_again_with_backoff(loopback):
    """Two 503 server_busy, then the session: the open succeeds after two retries; other 503s are raised at once."""
    from aiohttp import web

    from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable

    answers = [(503, "server_busy"), (503, "server_busy"), (200, None), (503, "server_memory_full")]
    seen: list[float] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(asyncio.get_running_loop().time())
        status, type_ = answers.pop(0)
        if status == 200:
            return web.json_response({"session_id": "s_1", "images": []})
        return web.json_response({"error": {"type": type_, "message": "m", "field": "body"}}, status=status)

    url = await loopback(handler, "POST")
    async with ToolServerClient(url, timeout_s=10) as client:
        assert (await client.open_session()).session_id == "s_1"
        assert client.busy_retries == 2 and len(seen) == 3
        assert seen[2] - seen[1] >= 0.09 and seen[1] - seen[0] >= 0.045  # 0.05 s, then 0.1 s
        with pytest.raises(ToolServerUnavailable) as other:
            await client.open_session()
        assert other.value.type == "server_memory_full" and client.busy_retries == 2


async def test_a_session_open_that_stays_busy_fails_within_the_clients_timeout(loopback):
    from aiohttp import web

    from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"type": "server_busy", "message": "m", "field": "body"}}, status=503)

    url = await loopback(handler, "POST")
    async with ToolServerClient(url, timeout_s=0.5) as client:
        start = asyncio.get_running_loop().time()
        with pytest.raises(ToolServerUnavailable) as busy:
            await client.open_session()
        assert busy.value.type == "server_busy" and asyncio.get_running_loop().time() - start < 0.6
        assert client.busy_retries == 3  # 0.05 + 0.1 + 0.2 = 0.35 s slept; the next 0.4 s would pass 0.5 s
