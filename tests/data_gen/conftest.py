"""A real chat-completions server (aiohttp) on loopback, on its own thread: the model steps that run inside the
synchronous synthesizers block their caller, so their server cannot share the test's event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web


@dataclass
class ChatServer:
    """``reply(body) -> str`` answers each request (an ``int`` is sent as that HTTP status); ``seen`` logs bodies."""

    url: str = ""
    reply: Callable[[dict], str | int] = lambda body: "{}"
    seen: list[dict] = field(default_factory=list)


@pytest.fixture
def threaded_chat():
    server = ChatServer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        server.seen.append(body)
        content = server.reply(body)
        if isinstance(content, int):
            return web.Response(status=content, text="unavailable")
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": content}}]})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        server.url = f"http://127.0.0.1:{port}/v1"
        return runner

    runner = asyncio.run_coroutine_threadsafe(start(), loop).result()
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
