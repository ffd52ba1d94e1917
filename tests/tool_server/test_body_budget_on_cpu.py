"""Request bodies are read within budgets (``tool_server.bodies``): charged by the bytes that arrived, never by the
declared length; a declared length over the limit refused before a byte is read; a body that falls behind the
minimum rate cut; small bodies (tool calls) counted too; one client's bodies held to its share."""

from __future__ import annotations

import asyncio

import pytest

from tool_server.app import BODIES
from tool_server.bodies import BodyBudget, BodyLimits
from tool_server.limits import MAX_BODY_BYTES, MAX_CALL_BODY_BYTES

MIB = 2**20
KIB = 2**10


def test_shipped_defaults():
    from tool_server.__main__ import parser
    from tool_server.assembly import server_settings
    from tool_server.app import ServerSettings

    assert MAX_CALL_BODY_BYTES == MIB and MAX_BODY_BYTES == 64 * MIB
    limits = BodyLimits()
    assert (limits.inflight_bytes, limits.call_reserve_bytes, limits.client_share) == (256 * MIB, 32 * MIB, 0.5)
    assert (limits.grace_s, limits.min_rate_bps, limits.contention_s) == (10.0, MIB, 10.0)
    assert ServerSettings().bodies == limits
    args = parser().parse_args(["--world", "w"])
    assert server_settings(args, share=4).bodies == limits  # not split between --workers: the router's bounds all
    args = parser().parse_args(["--world", "w", "--inflight-body-mib", "64", "--body-grace-s", "2",
                                "--body-min-kib-per-s", "100", "--client-share", "0.25"])
    assert server_settings(args).bodies == BodyLimits(64 * MIB, 8 * MIB, 0.25, 2.0, 100 * KIB)


def _padded_session(n_bytes: int) -> bytes:
    """A valid session open of exactly ``n_bytes`` (JSON whitespace as padding)."""
    head, tail = b'{"group_id": "g"', b"}"
    return head + b" " * (n_bytes - len(head) - len(tail)) + tail


def used(app) -> int:
    return app[BODIES].used


async def test_a_declared_length_over_the_limit_is_413_before_a_byte_is_read(serve, raw_http):
    """Content-Length 255 MiB and 5 bytes sent: it was charged 255 MiB (over the per-body limit) until it closed."""
    app, client = await serve()
    reader, writer = await raw_http.held_body(client, "/v1/sessions", 255 * MIB, b'{"gro')
    status, body, closing = await raw_http.answer_of(reader)
    assert (status, body["error"]["type"], body["error"]["field"], closing) == (413, "body_too_large", "body", True)
    sid = (await (await client.post("/v1/sessions", json={})).json())["session_id"]
    reader, writer = await raw_http.held_body(client, f"/v1/sessions/{sid}/call", MIB + 1, b"{")
    assert (await raw_http.answer_of(reader))[:1] == (413,)  # a tool call over 1 MiB
    assert used(app) == 0


async def test_a_stalled_body_is_charged_what_it_sent_then_cut_and_counted(serve, raw_http):
    """Declared 2 MiB, 100 kB sent: the budget holds 100 kB (not 2 MiB), an honest 2 MiB open passes beside it, and
    past the grace the stalled body is cut (408 body_timeout, connection closed) and counted."""
    app, client = await serve(bodies=BodyLimits(inflight_bytes=5 * MIB, call_reserve_bytes=MIB // 2, grace_s=1.0))
    reader, writer = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 100_000)
    await raw_http.until(lambda: used(app) == 100_000)
    r = await client.post("/v1/sessions", data=_padded_session(2 * MIB), headers={"X-Client": "honest"})
    assert r.status == 200 and (await r.json())["session_id"]
    status, body, closing = await raw_http.answer_of(reader)
    assert (status, body["error"]["type"], closing) == (408, "body_timeout", True)
    assert await raw_http.closed(reader, 5)  # cut at once: not drained for aiohttp's 10 s lingering time
    assert used(app) == 0
    metrics = await (await client.get("/metrics")).text()
    assert 'tool_errors_total{type="body_timeout"} 1' in metrics.splitlines()
    writer.close()


async def test_large_bodies_leave_the_call_reserve_and_a_client_over_its_share_gets_429(serve, raw_http):
    """3 MiB of bodies, 0.5 MiB of it for calls only, half per client while another competes. Beside an honest
    client holding 1 kB, the attacker's third 0.7 MiB body passes its 1.5 MiB share: 429 client_quota, connection
    closed; the honest client's session open and call still pass, and a 1 MiB call fits beside large bodies holding
    all they may."""
    app, client = await serve(bodies=BodyLimits(inflight_bytes=3 * MIB, call_reserve_bytes=MIB // 2))
    waiting = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 1_000, who="honest")
    await raw_http.until(lambda: used(app) == 1_000)
    held = [await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 700_000) for _ in range(2)]
    await raw_http.until(lambda: used(app) == 1_401_000)
    reader, _ = (await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 700_000))
    status, body, closing = await raw_http.answer_of(reader)
    assert (status, body["error"]["type"], closing) == (429, "client_quota", True)
    assert used(app) == 1_401_000
    honest = {"X-Client": "honest"}
    r = await client.post("/v1/sessions", data=_padded_session(1_100_000), headers=honest)  # 2.5 MB of large: fits
    sid = (await r.json())["session_id"]
    big = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 1_100_000, who="third")  # to the large limit
    await raw_http.until(lambda: used(app) == 2_501_000)
    call = {"name": "TextSearch", "arguments": {"query": ["Paris"]}}
    r = await client.post(f"/v1/sessions/{sid}/call", json=call, headers=honest)  # the call reserve is left
    assert r.status == 200
    for _, writer in [*held, big, waiting]:
        writer.close()
    await raw_http.until(lambda: used(app) == 0)


async def test_a_lone_client_may_fill_the_body_budget_and_is_held_to_its_share_once_another_competes(serve, raw_http):
    """3 MiB of bodies, 0.5 MiB for calls only, half per client. Alone, the attacker holds three 0.7 MiB bodies (2.1
    MB, past its 1.5 MiB share: borrowed, counted) and its fourth passes the 2.5 MiB left to large bodies: 503
    server_busy, the budget's own refusal. Once another client holds a body, the attacker's next is 429."""
    app, client = await serve(bodies=BodyLimits(inflight_bytes=3 * MIB, call_reserve_bytes=MIB // 2))
    held = [await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 700_000) for _ in range(3)]
    await raw_http.until(lambda: used(app) == 2_100_000)
    reader, _ = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 700_000)
    status, body, closing = await raw_http.answer_of(reader)
    assert (status, body["error"]["type"], closing) == (503, "server_busy", True)
    await raw_http.until(lambda: used(app) == 2_100_000)  # what the fourth had taken is given back
    waiting = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 1_000, who="honest")
    await raw_http.until(lambda: used(app) == 2_101_000)
    reader, _ = await raw_http.held_body(client, "/v1/sessions", 2 * MIB, b" " * 1_000)
    status, body, closing = await raw_http.answer_of(reader)
    assert (status, body["error"]["type"], closing) == (429, "client_quota", True)
    borrowed = app[BODIES].share.borrowed
    assert borrowed >= 2  # the third body's last chunk at least, and the fourth's first
    for _, writer in [*held, waiting]:
        writer.close()
    await raw_http.until(lambda: used(app) == 0)
    metrics = (await (await client.get("/metrics")).text()).splitlines()
    assert f'client_share_borrowed_total{{budget="bodies"}} {borrowed}' in metrics


async def test_the_workers_router_reads_bodies_within_its_own_budget(raw_http):
    """The --workers router holds a body while it forwards it: charged as it arrives, over-limit declared lengths
    refused before reading (no worker needed to see it: without any, an admitted open is 503 worker_unavailable)."""
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.workers import Router

    router = Router([], [], bodies=BodyBudget(BodyLimits(inflight_bytes=5 * MIB, call_reserve_bytes=MIB // 2)))
    async with TestClient(TestServer(router.app())) as client:
        router._bodies.used = 4 * MIB  # bodies being read: a 1 MiB large body does not fit the 4.5 MiB large part
        r = await client.post("/v1/sessions", data=_padded_session(MIB))
        assert (r.status, (await r.json())["error"]["type"]) == (503, "server_busy")
        router._bodies.used = 0
        reader, writer = await raw_http.held_body(client, "/v1/sessions", 65 * MIB, b"{")
        assert (await raw_http.answer_of(reader))[:1] == (413,)
        writer.close()
        r = await client.post("/v1/sessions", data=_padded_session(2 * MIB))
        assert (r.status, (await r.json())["error"]["type"]) == (503, "worker_unavailable")
        metrics = await (await client.get("/metrics")).text()
    lines = metrics.splitlines()
    assert 'tool_server_router_events_total{event="server_busy"} 1' in lines
    assert 'tool_server_router_events_total{event="body_too_large"} 1' in lines
    assert router._bodies.used == 0


async def test_the_client_sends_a_busy_session_open_again_with_backoff(loopback):
    """A 503 server_busy, a 429 client_quota and a 503 image_process_failed, then the session: the open succeeds after
    three retries; other refusals are raised at once."""
    from aiohttp import web

    from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable

    answers = [(503, "server_busy"), (429, "client_quota"), (503, "image_process_failed"), (200, None),
               (503, "server_memory_full")]
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
        assert client.busy_retries == 3 and len(seen) == 4
        assert seen[2] - seen[1] >= 0.09 and seen[1] - seen[0] >= 0.045  # 0.05 s, then 0.1 s
        with pytest.raises(ToolServerUnavailable) as other:
            await client.open_session()
        assert other.value.type == "server_memory_full" and client.busy_retries == 3


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


async def test_a_body_a_middleware_read_first_still_reaches_the_tool(tool_server_with):
    """A logging or auth middleware that reads the body (``request.text()``) leaves aiohttp's stream empty; the
    call still gets its arguments (the rehearsal's fault middleware does this: every call was invalid_request)."""
    from aiohttp import ClientSession, web

    seen: list[str] = []

    @web.middleware
    async def reads_first(request, handler):
        if request.method == "POST":
            seen.append(await request.text())
        return await handler(request)

    server = await tool_server_with(middlewares=[reads_first])
    async with ClientSession(str(server.make_url(""))) as http:
        async with http.post("/v1/sessions", json={"images": []}) as r:
            session = (await r.json())["session_id"]
        call = {"name": "TextSearch", "arguments": {"query": ["France"]}}
        async with http.post(f"/v1/sessions/{session}/call", json=call) as r:
            body = await r.json()
    assert r.status == 200 and "France" in body["text"], body
    assert len(seen) == 2 and "France" in seen[1]
