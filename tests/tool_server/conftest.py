"""Fixtures of the tool-server tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
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
