"""Client connections on a budget (issue 35, item 5): a cap whose excess gets a 503 JSON answer and a closed socket
while the open connections keep working, an idle keep-alive timeout and a header timeout, set by the CLI."""

from __future__ import annotations

import json
import socket
import time
from contextlib import ExitStack

import pytest

from tool_server.launch import served

CAP, KEEPALIVE_S, HEADER_TIMEOUT_S = 8, 3.0, 0.5
GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def address(small_world, tmp_path_factory):
    args = ("--no-ocr", "--mei-log", str(tmp_path_factory.mktemp("mei") / "mei.jsonl"), "--max-connections", str(CAP),
            "--keepalive-s", str(KEEPALIVE_S), "--header-timeout-s", str(HEADER_TIMEOUT_S))
    with served(small_world, *args) as base:
        host, port = base.removeprefix("http://").split(":")
        yield host, int(port)


def _connect(address) -> socket.socket:
    return socket.create_connection(address, timeout=5)


def _read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as closed)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _status(s: socket.socket) -> int:
    s.sendall(GET)
    head = s.recv(65536)
    return int(head.split(b" ", 2)[1])


def test_a_connection_over_the_cap_gets_503_json_and_the_open_ones_keep_working(address):
    with ExitStack() as stack:
        held = [stack.enter_context(_connect(address)) for _ in range(CAP)]
        time.sleep(0.2)  # all accepted
        for _ in range(3):
            with _connect(address) as extra:
                answer = _read_all(extra)
            head, body = answer.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 503") and b"application/json" in head, answer
            assert json.loads(body)["error"]["type"] == "too_many_connections"
        assert [_status(s) for s in held] == [200] * CAP
    time.sleep(0.2)  # the held connections closed: room again
    with _connect(address) as s:
        assert _status(s) == 200


def test_a_request_trickling_its_headers_is_cut_at_the_header_timeout(address):
    with _connect(address) as s:
        start = time.monotonic()
        try:
            for byte in GET[:-4]:  # a byte every 0.1 s, never finishing the headers
                s.sendall(bytes([byte]))
                time.sleep(0.1)
                if time.monotonic() - start > KEEPALIVE_S:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert _read_all(s) == b""
        assert time.monotonic() - start < KEEPALIVE_S  # cut by the header timeout, not the keep-alive one


def test_an_idle_connection_is_closed_after_the_keepalive_timeout(address):
    with _connect(address) as s:
        assert _status(s) == 200
        start = time.monotonic()
        s.settimeout(KEEPALIVE_S + 5)
        assert _read_all(s) == b""
        assert KEEPALIVE_S - 0.5 < time.monotonic() - start < KEEPALIVE_S + 2


@pytest.mark.parametrize(
    "request_bytes",
    [b"BAD\x01 / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
     b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n"],
    ids=["bad-method", "long-line", "long-header"],
)
def test_a_request_aiohttp_cannot_parse_gets_our_json_error(address, request_bytes):
    assert_json_400(address, request_bytes)


def assert_json_400(address, request_bytes: bytes) -> None:
    """The server answers ``request_bytes`` with a 4xx whose body is our JSON error, then closes."""
    with _connect(address) as s:
        s.sendall(request_bytes)
        head, body = _read_all(s).split(b"\r\n\r\n", 1)
    assert head.split(b" ", 2)[1].startswith(b"4") and b"application/json" in head, head
    assert json.loads(body)["error"]["type"] == "bad_http_request"


def test_sigterm_drains_in_flight_requests_for_drain_s_then_cancels_them():
    # A request still running when the server stops gets drain_s to finish; past it, its handler is cancelled and the
    # stop completes (aiohttp's own 60 s outlasts the 30 s callers wait before killing the server). The handler here
    # would take 5 s: a drain of 0.2 s cancels it, a drain of 30 s lets it finish.
    import asyncio

    import aiohttp
    from aiohttp import web

    from tool_server.connections import ConnectionLimits, GuardedAppRunner

    async def stop_with_a_request_in_flight(drain_s: float) -> str:
        outcome: list[str] = []
        started = asyncio.Event()

        async def slow(request: web.Request) -> web.Response:
            started.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise
            outcome.append("finished")
            return web.json_response({})

        app = web.Application()
        app.router.add_get("/slow", slow)
        runner = GuardedAppRunner(app, ConnectionLimits(drain_s=drain_s))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        async with aiohttp.ClientSession() as http:
            request = asyncio.create_task(http.get(f"http://127.0.0.1:{port}/slow"))
            await started.wait()
            await runner.cleanup()
            request.cancel()
        return outcome[0] if outcome else "neither"

    assert asyncio.run(stop_with_a_request_in_flight(0.2)) == "cancelled"
    assert asyncio.run(stop_with_a_request_in_flight(30)) == "finished"
