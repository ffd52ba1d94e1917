"""The server's event loop: uvloop by default when installed, asyncio's own on request."""

from __future__ import annotations

import asyncio

import pytest

from tool_server.loop import loop_name, run, uvloop_available


async def _name() -> str:
    await asyncio.sleep(0)
    return loop_name()


@pytest.mark.skipif(not uvloop_available(), reason="uvloop is a pinned dependency but optional at run time")
def test_run_uses_uvloop_unless_told_not_to():
    assert run(_name()) == "uvloop"
    assert run(_name(), use_uvloop=False) == "asyncio"


async def test_healthz_names_the_loop(tool_server):
    from aiohttp import ClientSession

    async with ClientSession() as http, http.get(tool_server.make_url("/healthz")) as r:
        assert (await r.json())["event_loop"] == "asyncio"  # pytest-asyncio's loop, not uvloop
