"""Bounded thread pools, one per cost class, for the CPU work of tool calls: never on the event loop, and cheap
work never queued behind heavy work.

One shared pool (asyncio's default executor) let 48 reverse searches hold every slot while FetchImage, small
TextSearches and session opens waited seconds behind them. Here each class has its own pool, sized by the cores:

- ``reverse``: reverse image search (ORB features and matching, ~0.1-1 s each) with ``--search-processes 0``, else
  only the normalization of its query, the search itself running in search processes;
- ``image``: decoding and crops of images up to :data:`LARGE_IMAGE_PIXELS` (PIL releases the GIL): what FetchImage
  and session opens wait for;
- ``large_image``: the same for larger images (a 25 Mpx decode takes seconds);
- ``encode``: PNG encoding of answers' images (crops sent with ``include_pixels``, reverse-search queries), of any
  size: it once shared the ``image`` pool with decoding, and FetchImage queued behind crops' PNGs;
- ``parse``: HTML pages fetched online turned into text (pure Python, up to the 20 MB page limit);
- ``search``: batches of BM25 text searches (numpy).

The extractive MEI, built before the server's pools, has pools of its own from :func:`heavy_pool`: OCR (one inference
at a time) and the passage ranking of WebVisit (up to 200,000 characters of a page).

A class's calls queue only behind calls of the same class. The heavy classes' threads run at a lower OS priority
(nice +10, Linux), so on a saturated core the event loop thread and the cheap classes are scheduled first. Executors
start on first use, so a process forked after the pools object was built (``--workers``) starts its own threads.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar

T = TypeVar("T")
CostClass = Literal["reverse", "image", "large_image", "encode", "parse", "search"]
HEAVY: frozenset[str] = frozenset({"reverse", "large_image", "encode", "parse"})
HEAVY_NICE = 10
LARGE_IMAGE_PIXELS = 4_000_000


def default_sizes(cores: int | None = None) -> dict[CostClass, int]:
    cores = cores or os.cpu_count() or 1
    return {
        "reverse": cores,
        "image": cores,
        "large_image": cores,
        "encode": cores,
        "parse": max(1, cores // 2),
        "search": cores,
    }


def image_cost(width: int, height: int) -> CostClass:
    """The pool for decoding or cropping an image of this size (PNG encoding goes to ``encode``)."""
    return "large_image" if width * height > LARGE_IMAGE_PIXELS else "image"


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
    def __init__(self, sizes: dict[CostClass, int] | None = None) -> None:
        self.sizes = {**default_sizes(), **(sizes or {})}
        if bad := {k: n for k, n in self.sizes.items() if n < 1}:
            raise ValueError(f"pool sizes must be >= 1, got {bad}")
        self._executors: dict[str, ThreadPoolExecutor] = {}

    def executor(self, cost: CostClass) -> ThreadPoolExecutor:
        executor = self._executors.get(cost)
        if executor is None:
            n = self.sizes[cost]
            executor = heavy_pool(cost, n) if cost in HEAVY else ThreadPoolExecutor(n, thread_name_prefix=f"pool-{cost}")
            self._executors[cost] = executor
        return executor

    async def run(self, cost: CostClass, fn: Callable[..., T], *args, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the ``cost`` pool."""
        return await asyncio.get_running_loop().run_in_executor(
            self.executor(cost), functools.partial(fn, *args, **kwargs)
        )

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        self._executors.clear()
