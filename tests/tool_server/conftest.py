"""Fixtures of the tool-server tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable

import pytest
import redis
from aiohttp import web


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    port = free_port()
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
