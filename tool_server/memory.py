"""One memory budget per server process, in bytes, that every cache and buffer of client data draws from.

Register images (decoded pixels and their cached PNG encodings), the result cache's memory level, request bodies
being read and tool-call answers being written each used to have a bound of their own, or none (bodies up to 1 MiB,
cached PNGs, answers, a cache bounded by entries): together they could take several times the configured image
budget. Here each draws from one budget and is refused, or makes room, before it would be exceeded. Room is made by
the reclaimers, cheapest loss first: the result cache's memory level gives back entries (it is only a cache) before
the session store evicts idle sessions.
One event loop per process: no await between a check and its charge, so no lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Literal

from tool_server.allocator import Trimmer

Kind = Literal["images", "cache", "bodies", "responses"]
Reclaimer = Callable[[int], int]  # reclaimer(need) frees up to ``need`` bytes (or more), returns how many


class MemoryBudget:
    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"memory budget must be >= 1 byte, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used: Counter[str] = Counter()  # by kind
        self.refused: Counter[str] = Counter()  # takes refused, by kind
        self._reclaimers: list[Reclaimer] = []
        self.trimmer = Trimmer()  # what is given back is counted toward the next malloc_trim

    @property
    def total(self) -> int:
        return sum(self.used.values())

    def free(self) -> int:
        return self.limit_bytes - self.total

    def add_reclaimer(self, reclaim: Reclaimer) -> None:
        """Reclaimers run in the order added when a take does not fit."""
        self._reclaimers.append(reclaim)

    def take(self, kind: Kind, nbytes: int, *, reclaim: bool = True) -> bool:
        """Charge ``nbytes`` to ``kind`` if they fit, after reclaiming what is missing (unless ``reclaim`` is false:
        the cache does not evict itself for itself here); False, with nothing charged, if they do not."""
        missing = nbytes - self.free()
        if missing > 0 and reclaim:
            for reclaimer in self._reclaimers:
                missing -= reclaimer(missing)
                if missing <= 0:
                    break
        if nbytes > self.free():
            self.refused[kind] += 1
            return False
        self.used[kind] += nbytes
        return True

    def give(self, kind: Kind, nbytes: int) -> None:
        self.used[kind] -= nbytes
        self.trimmer.released_bytes(nbytes)
        if self.used[kind] < 0:
            raise AssertionError(f"memory budget: {kind} gave back {-self.used[kind]} bytes more than it took")
