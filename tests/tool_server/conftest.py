"""Fixtures of the tool-server tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import types
from collections.abc import Awaitable, Callable

import pytest
import redis
from aiohttp import web

from neos_core.ports import free_local_port


@pytest.fixture
async def loopback():
    """``await loopback(handler)`` -> base URL of a real aiohttp server on 127.0.0.1 (a free port) that sends every
    path of ``method`` (GET unless given) to ``handler``: the replay servers standing in for web APIs and the web."""
    runners: list[web.AppRunner] = []

    async def start(handler: Callable[[web.Request], Awaitable[web.StreamResponse]], method: str = "GET") -> str:
        app = web.Application()
        app.router.add_route(method, "/{tail:.*}", handler)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def client(world, tmp_path):
    """A test client of our app on the small world: extractive MEI without OCR, memory cache, 64-image registers."""
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.cache import TieredCache
    from tool_server.mei import MEIConfig, build_interface

    mei = build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False))
    app = create_app(
        world=world,
        mei=mei,
        cache=TieredCache.from_config(memory_items=1000),
        settings=ServerSettings(max_register_images=64),
    )
    async with TestClient(TestServer(app)) as c:
        yield c


@pytest.fixture
async def serve(world, tmp_path):
    """``await serve(**settings)`` -> (app, test client) of our app on the small world (memory cache level); the
    ``X-Client`` header names the client to the per-client quotas."""
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.cache import TieredCache
    from tool_server.mei import MEIConfig, build_interface

    clients = []

    async def make(**settings):
        app = create_app(
            world=world,
            mei=build_interface(MEIConfig(log_path=tmp_path / f"mei{len(clients)}.jsonl", ocr=False)),
            cache=TieredCache.from_config(memory_items=1000),
            settings=ServerSettings(client_header="X-Client", **settings),
        )
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return app, client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def redis_url():
    """A redis-server started on a free loopback port, or the existing server NEOS_TEST_REDIS_URL names."""
    if os.environ.get("NEOS_TEST_REDIS_URL"):
        yield os.environ["NEOS_TEST_REDIS_URL"]
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server binary not found: install the Debian package `redis-server` "
                    "(apt-get install -y redis-server) or set NEOS_TEST_REDIS_URL=redis://HOST:PORT/DB")
    port = free_local_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(200):  # wait until it accepts connections (up to ~10 s on a loaded machine)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None:
                    pytest.fail(f"redis-server exited with {proc.returncode}")
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


async def held_body(client, path: str, declared: int, sent: bytes, who: str = "attacker", chunked: bool = False):
    """A raw connection that sends a request's headers and ``sent`` of its body, then nothing."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % declared
    writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nX-Client: %s\r\nContent-Type: application/json\r\n%s\r\n\r\n"
                 % (path.encode(), who.encode(), length))
    writer.write(b"%x\r\n%s\r\n" % (len(sent), sent) if chunked else sent)
    await writer.drain()
    return reader, writer


async def until(predicate, bound_s: float = 20.0) -> None:
    for _ in range(int(bound_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def answer_of(reader) -> tuple[int, dict, bool]:
    """(status, JSON error body, whether the server closes the connection after it: ``Connection: close``)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    body = json.loads(await reader.readexactly(length))
    return int(head.split()[1]), body, b"connection: close" in lines


async def closed(reader, bound_s: float) -> bool:
    return await asyncio.wait_for(reader.read(1), bound_s) == b""


@pytest.fixture
def raw_http() -> types.SimpleNamespace:
    """Raw HTTP/1.1 on loopback for the attack tests: a request whose body stops arriving, its answer read by hand
    (aiohttp's client would not send half a body), and a bounded wait for a condition."""
    return types.SimpleNamespace(held_body=held_body, answer_of=answer_of, closed=closed, until=until)
