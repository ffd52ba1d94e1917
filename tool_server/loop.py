"""The event loop the server (and its benchmark's load generator) runs on: uvloop when installed, else asyncio's.

uvloop's libuv transports and C protocol callbacks cut aiohttp's per-request cost on the cached path (socket
reads/writes, call_soon, timer handling) by about a quarter; the choice is made once per process, at ``run``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run(main: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``asyncio.run(main)`` on a uvloop loop when ``use_uvloop`` and uvloop is installed."""
    if use_uvloop and uvloop_available():
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def loop_name() -> str:
    """The running loop's implementation, as ``/healthz`` and the benchmark report it: ``uvloop`` or ``asyncio``."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


async def until_terminated() -> None:
    """Return when the process gets SIGTERM (how operators, ``launch.served`` and the benchmark stop a server), so the
    caller's cleanup runs: killed by the signal's default action, a server left its search processes' index files
    behind."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
