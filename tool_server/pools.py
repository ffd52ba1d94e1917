"""Bounded thread pools, one per cost class, for the CPU work of tool calls: never on the event loop, and cheap
work never queued behind heavy work.

One shared pool (asyncio's default executor) let 48 reverse searches hold every slot while FetchImage, small
TextSearches and session opens waited seconds behind them. Here each class has its own pool, sized by the cores:

- ``reverse``: reverse image search (ORB features and matching, ~0.1-1 s each; OpenCV releases the GIL);
- ``image``: decoding, crops and PNG encoding of register images (PIL releases the GIL in its C loops);
- ``parse``: HTML pages fetched online turned into text (pure Python, up to the 20 MB page limit);
- ``search``: batches of BM25 text searches (numpy).

A class's calls queue only behind calls of the same class. Executors start on first use, so a process forked after
the pools object was built (``--workers``) starts its own threads.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar

T = TypeVar("T")
CostClass = Literal["reverse", "image", "parse", "search"]


def default_sizes(cores: int | None = None) -> dict[CostClass, int]:
    cores = cores or os.cpu_count() or 1
    return {"reverse": cores, "image": cores, "parse": max(1, cores // 2), "search": cores}


class Pools:
    def __init__(self, sizes: dict[CostClass, int] | None = None) -> None:
        self.sizes = {**default_sizes(), **(sizes or {})}
        if bad := {k: n for k, n in self.sizes.items() if n < 1}:
            raise ValueError(f"pool sizes must be >= 1, got {bad}")
        self._executors: dict[str, ThreadPoolExecutor] = {}

    def executor(self, cost: CostClass) -> ThreadPoolExecutor:
        executor = self._executors.get(cost)
        if executor is None:
            executor = self._executors[cost] = ThreadPoolExecutor(self.sizes[cost], thread_name_prefix=f"pool-{cost}")
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
