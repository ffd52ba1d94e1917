"""Bounded thread pools, one per cost class, for the CPU work of tool calls: never on the event loop, and cheap
work never queued behind heavy work.

One shared pool (asyncio's default executor) let 48 reverse searches hold every slot while FetchImage, small
TextSearches and session opens waited seconds behind them. Here each class has its own pool, sized by the cores:

- ``reverse``: reverse image search (ORB features and matching, ~0.1-1 s each) with ``--search-processes 0``, else
  only the normalization of its query, the search itself running in search processes;
- ``image``: decoding and crops of images up to :data:`LARGE_IMAGE_PIXELS` (PIL releases the GIL): what FetchImage
  and session opens wait for;
- ``large_image``: decoding, crops and PNG encoding of larger images (a 25 Mpx decode takes seconds), half the cores:
  a question or web image is placed by the size its header gives (:func:`decode_cost`), before it is decoded;
- ``encode``: PNG encoding of answers' images up to :data:`LARGE_IMAGE_PIXELS` (crops sent with ``include_pixels``,
  reverse-search queries): it once shared the ``image`` pool with decoding, and FetchImage queued behind crops' PNGs,
  then took any size, and a victim's FetchImage waited up to 10 s behind three clients' 25 Mpx crops;
- ``parse``: HTML pages fetched online turned into text (pure Python, up to the 20 MB page limit);
- ``search``: batches of BM25 text searches (numpy).

What of large bodies and images holds the GIL (parsing, base64) runs in :attr:`Pools.processes`
(:mod:`tool_server.image_processes`), a pool thread waiting on it.

The extractive MEI, built before the server's pools, has pools of its own from :func:`heavy_pool`: OCR (one inference
at a time) and the passage ranking of WebVisit (up to 200,000 characters of a page).

A class's calls queue only behind calls of the same class. One client (:data:`CLIENT`, set by the request's handler)
has at most ``client_heavy_jobs`` jobs queued or running on ``large_image``; past it, 429 ``client_quota``, so no
client can queue the others' large images behind its own. The heavy classes' threads run at a lower OS priority
(nice +10, Linux), so on a saturated core the event loop thread and the cheap classes are scheduled first. Executors
start on first use, so a process forked after the pools object was built (``--workers``) starts its own threads.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal, TypeVar

from tool_server.child_process import HEAVY_NICE
from tool_server.errors import ToolError

if TYPE_CHECKING:
    from tool_server.image_processes import ImageProcesses

T = TypeVar("T")
CostClass = Literal["reverse", "image", "large_image", "encode", "parse", "search"]
HEAVY: frozenset[str] = frozenset({"reverse", "large_image", "encode", "parse"})
LARGE_IMAGE_PIXELS = 4_000_000
CLIENT: ContextVar[str | None] = ContextVar("tool_server_client", default=None)  # whose request runs in this task


def default_sizes(cores: int | None = None) -> dict[CostClass, int]:
    cores = cores or os.cpu_count() or 1
    return {
        "reverse": cores,
        "image": cores,
        "large_image": max(1, cores // 2),
        "encode": cores,
        "parse": max(1, cores // 2),
        "search": cores,
    }


def image_cost(width: int, height: int) -> CostClass:
    """The pool for decoding or cropping an image of this size."""
    return "large_image" if width * height > LARGE_IMAGE_PIXELS else "image"


def decode_cost(size: tuple[int, int] | None) -> CostClass:
    """The pool for decoding an image whose header gave ``size``; one whose header could not be read may be large."""
    return image_cost(*size) if size is not None else "large_image"


def encode_cost(width: int, height: int) -> CostClass:
    """The pool for PNG-encoding an image of this size."""
    return "large_image" if width * height > LARGE_IMAGE_PIXELS else "encode"


def lower_priority() -> None:
    """Thread initializer of the heavy pools: nice this thread (Linux threads have their own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HEAVY_NICE)
    except (AttributeError, OSError):  # not Linux, or not permitted: the pools still separate the classes
        pass


def heavy_pool(name: str, threads: int = 1) -> ThreadPoolExecutor:
    """A bounded pool of heavy work outside :class:`Pools` (niced like its heavy classes); create it on first use, so
    that a process forked before (``--workers``) starts its own threads."""
    return ThreadPoolExecutor(threads, thread_name_prefix=f"pool-{name}", initializer=lower_priority)


class Pools:
    def __init__(self, sizes: dict[CostClass, int] | None = None, client_heavy_jobs: int | None = None) -> None:
        """``client_heavy_jobs``: one client's jobs on ``large_image`` at once (None: not limited)."""
        self.sizes = {**default_sizes(), **(sizes or {})}
        if bad := {k: n for k, n in self.sizes.items() if n < 1}:
            raise ValueError(f"pool sizes must be >= 1, got {bad}")
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self.client_heavy_jobs = client_heavy_jobs
        self.heavy_jobs: Counter[str | None] = Counter()  # large_image jobs queued or running, by client
        self.processes: ImageProcesses | None = None  # large bodies' and images' GIL-holding work (None: threads)

    def executor(self, cost: CostClass) -> ThreadPoolExecutor:
        executor = self._executors.get(cost)
        if executor is None:
            n = self.sizes[cost]
            executor = (
                heavy_pool(cost, n) if cost in HEAVY else ThreadPoolExecutor(n, thread_name_prefix=f"pool-{cost}")
            )
            self._executors[cost] = executor
        return executor

    async def run(self, cost: CostClass, fn: Callable[..., T], *args, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the ``cost`` pool."""
        job = functools.partial(fn, *args, **kwargs)
        if cost != "large_image" or self.client_heavy_jobs is None:
            return await asyncio.get_running_loop().run_in_executor(self.executor(cost), job)
        client = CLIENT.get()
        if self.heavy_jobs[client] >= self.client_heavy_jobs:
            raise ToolError("client_quota", f"this client has {self.client_heavy_jobs} large-image jobs queued or "
                            "running, its limit; retry when one is done")
        self.heavy_jobs[client] += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor(cost), job)
        finally:
            self.heavy_jobs[client] -= 1
            if not self.heavy_jobs[client]:
                del self.heavy_jobs[client]

    def close(self) -> None:
        if self.processes is not None:
            self.processes.close()
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        self._executors.clear()
