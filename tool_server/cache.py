"""Hierarchical tool-result cache (Neos Appendix C.3): process memory -> node-local disk -> shared tier.

Reads go down the levels and promote a hit into every faster level; writes go to all levels. The shared tier is a
directory (e.g. a network file system every node mounts) or a Redis server when ``redis_url`` is given. A level that
fails (disk full, Redis down) counts an error and behaves as a miss: the cache only saves work, so a broken level
must not fail a tool call, and the failure stays visible in :meth:`TieredCache.stats`.

:meth:`TieredCache.get_or_compute` is single-flight: concurrent misses of one key wait for the first caller's
computation instead of repeating it (a rollout group's members often issue the same call at the same moment). With
the Redis tier it is single-flight across processes and nodes too, through a lease per key
(:mod:`tool_server.coalesce`).

Keys come from :func:`cache_key`: SHA-256 of the canonical JSON of ``(tool, arguments, scope)``; ``scope`` is the
rollout group id for ModalSearcher's within-group cache, ``None`` for a global entry.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import orjson

from tool_server.coalesce import RedisLeases
from tool_server.memory import MemoryBudget

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(map(_non_finite, value.values()))
    if isinstance(value, list | tuple):
        return any(map(_non_finite, value))
    return False


def cache_key(tool: str, arguments: dict[str, Any], scope: str | None = None) -> str:
    """SHA-256 hex of the canonical JSON (sorted keys, no whitespace, UTF-8) of ``{tool, arguments, scope}``.

    Raises ``ValueError`` if the arguments are not plain JSON, NaN and infinities included. orjson writes the same
    bytes as ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` at a twentieth of the
    cost (it is on every cached call's path), but writes non-finite floats as ``null``: only then are they looked for.
    """
    try:
        args = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
        canonical = b'{"arguments":%b,"scope":%b,"tool":%b}' % (args, orjson.dumps(scope), orjson.dumps(tool))
    except TypeError as e:  # orjson.JSONEncodeError
        raise ValueError(f"cache_key: arguments of {tool!r} are not plain JSON: {e}") from e
    if b"null" in args and _non_finite(arguments):
        raise ValueError(f"cache_key: arguments of {tool!r} are not plain JSON: NaN or infinity")
    return hashlib.sha256(canonical).hexdigest()


class Level(Protocol):
    name: str
    errors: tuple[type[BaseException], ...]  # failures that mean "this level is unavailable", not a bug

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes) -> None: ...

    async def close(self) -> None: ...


class LRU(Generic[K, V]):
    """A bounded map that forgets its least recently used entry first."""

    def __init__(self, max_items: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._max = max_items

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._max:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class MemoryLevel:
    """The process-memory level: at most ``max_items`` entries and, once :meth:`attach` ed to the process's
    :class:`~tool_server.memory.MemoryBudget`, only the bytes that budget grants (each entry charged its value, its
    key and :data:`ENTRY_OVERHEAD`). It was bounded by entries only: ~2.7 GB per process when full of large
    TextSearch answers. A value that finds no room is not kept here (counted in ``not_kept``); the lower levels
    still store it. The budget reclaims entries, least recently used first, when images or bodies need the room."""

    name = "memory"
    errors: tuple[type[BaseException], ...] = ()
    ENTRY_OVERHEAD = 200  # the key's str object, the ordered dict's entry and links, the bytes object's header

    def __init__(self, max_items: int) -> None:
        if max_items < 1:
            raise ValueError(f"memory_items must be >= 1, got {max_items}")
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._max = max_items
        self._budget: MemoryBudget | None = None
        self.bytes = 0
        self.not_kept = 0

    def attach(self, budget: MemoryBudget) -> None:
        """Draw from ``budget`` from now on (the level must be empty) and give it entries back when it needs room."""
        if self._items:
            raise ValueError("attach the memory level to a budget before it holds entries")
        self._budget = budget
        budget.add_reclaimer(self.reclaim)

    @classmethod
    def _cost(cls, key: str, value: bytes) -> int:
        return len(key) + len(value) + cls.ENTRY_OVERHEAD

    def lookup(self, key: str) -> bytes | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    async def get(self, key: str) -> bytes | None:
        return self.lookup(key)

    def _pop_oldest(self) -> int:
        key, value = self._items.popitem(last=False)
        cost = self._cost(key, value)
        self.bytes -= cost
        if self._budget is not None:
            self._budget.give("cache", cost)
        return cost

    def reclaim(self, need: int) -> int:
        """Drop least recently used entries until ``need`` bytes are freed or none is left; the bytes freed."""
        freed = 0
        while freed < need and self._items:
            freed += self._pop_oldest()
        return freed

    async def set(self, key: str, value: bytes) -> None:
        if key in self._items:  # replaced: the old value's bytes go back first
            self._items.move_to_end(key, last=False)
            self._pop_oldest()
        cost = self._cost(key, value)
        while len(self._items) >= self._max:
            self._pop_oldest()
        if self._budget is not None:
            while not self._budget.take("cache", cost, reclaim=False):
                if not self._items:  # the rest of the budget is held by images and bodies
                    self.not_kept += 1
                    return
                self._pop_oldest()
        self._items[key] = value
        self.bytes += cost

    def __len__(self) -> int:
        return len(self._items)

    async def close(self) -> None:
        self.reclaim(self.bytes)


class DiskLevel:
    """diskcache (sqlite index + files) with its own size-based eviction; blocking calls run in a thread."""

    name = "disk"

    def __init__(self, directory: str | os.PathLike[str], size_limit: int) -> None:
        import diskcache

        self._cache = diskcache.Cache(str(directory), size_limit=size_limit)
        self.errors = (OSError, diskcache.Timeout)

    async def get(self, key: str) -> bytes | None:
        return await asyncio.to_thread(self._cache.get, key)

    async def set(self, key: str, value: bytes) -> None:
        await asyncio.to_thread(self._cache.set, key, value)

    async def close(self) -> None:
        self._cache.close()


class DirectoryLevel:
    """One file per entry under ``dir/ab/<sha256(key)>``, written to a temp file and renamed, so readers on any
    node see a whole value or none. No eviction: a shared store is pruned by its operator."""

    name = "shared"
    errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self._dir / digest[:2] / digest

    def _get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    async def get(self, key: str) -> bytes | None:
        return await asyncio.to_thread(self._get, key)

    async def set(self, key: str, value: bytes) -> None:
        await asyncio.to_thread(self._set, key, value)

    async def close(self) -> None:
        return None


class RedisLevel:
    name = "shared"

    def __init__(self, url: str, *, prefix: str = "neos:tool:", ttl_s: int | None = None) -> None:
        import redis.asyncio
        import redis.exceptions

        self.client = redis.asyncio.from_url(url)
        self.prefix = prefix
        self._ttl = ttl_s
        self.errors = (redis.exceptions.RedisError, OSError)

    async def get(self, key: str) -> bytes | None:
        return await self.client.get(self.prefix + key)

    async def set(self, key: str, value: bytes) -> None:
        await self.client.set(self.prefix + key, value, ex=self._ttl)

    async def close(self) -> None:
        await self.client.aclose()


class TieredCache:
    def __init__(self, levels: list[Level], leases: RedisLeases | None = None) -> None:
        """``leases``: coalesce misses across processes through the shared tier, which must be the last level."""
        if not levels:
            raise ValueError("TieredCache needs at least one level")
        self._levels = levels
        self._leases = leases
        self._memory = levels[0] if isinstance(levels[0], MemoryLevel) else None  # looked up synchronously
        self._stats = {
            lv.name: {"hits": 0, "misses": 0, "errors": 0, "sets": 0, "get_latency_s": 0.0, "set_latency_s": 0.0}
            for lv in levels
        }
        self._pending: dict[str, asyncio.Future[bytes | None]] = {}
        self.coalesced = 0  # misses answered by another caller's concurrent computation

    @classmethod
    def from_config(
        cls,
        *,
        memory_items: int = 10_000,
        disk_dir: str | os.PathLike[str] | None = None,
        disk_size_limit: int = 2**30,
        shared_dir: str | os.PathLike[str] | None = None,
        redis_url: str | None = None,
        redis_ttl_s: int | None = None,
        lease_s: float = 10.0,
        lease_max_wait_s: float = 30.0,
    ) -> TieredCache:
        """``lease_s``/``lease_max_wait_s``: with ``redis_url``, the life of a computing process's lease on a key
        (renewed while it computes: how long a dead holder keeps others waiting) and the longest a process waits for
        another's value before computing it itself."""
        if shared_dir is not None and redis_url is not None:
            raise ValueError("give shared_dir or redis_url for the shared tier, not both")
        levels: list[Level] = [MemoryLevel(memory_items)]
        if disk_dir is not None:
            levels.append(DiskLevel(disk_dir, disk_size_limit))
        if shared_dir is not None:
            levels.append(DirectoryLevel(shared_dir))
        leases = None
        if redis_url is not None:
            shared = RedisLevel(redis_url, ttl_s=redis_ttl_s)
            levels.append(shared)
            leases = RedisLeases(shared.client, shared.prefix, lease_s=lease_s, max_wait_s=lease_max_wait_s)
        return cls(levels, leases)

    def _memory_get(self, key: str) -> bytes | None:
        """The memory level's lookup, without a coroutine: a hit there is the cached call's whole cache path."""
        stats = self._stats[MemoryLevel.name]
        start = time.perf_counter()
        value = self._memory.lookup(key)
        stats["get_latency_s"] += time.perf_counter() - start
        stats["misses" if value is None else "hits"] += 1
        return value

    async def get(self, key: str) -> bytes | None:
        if self._memory is None:
            return await self._get_from(0, key)
        value = self._memory_get(key)  # a memory hit returns without awaiting anything
        return value if value is not None else await self._get_from(1, key)

    async def _get_from(self, first: int, key: str) -> bytes | None:
        for depth in range(first, len(self._levels)):
            level = self._levels[depth]
            stats = self._stats[level.name]
            start = time.perf_counter()
            try:
                value = await level.get(key)
            except level.errors as e:
                stats["errors"] += 1
                log.warning("cache level %s failed on get: %s", level.name, e)
                value = None
            stats["get_latency_s"] += time.perf_counter() - start
            if value is None:
                stats["misses"] += 1
                continue
            stats["hits"] += 1
            for faster in self._levels[:depth]:
                await self._set_level(faster, key, value)
            return value
        return None

    async def _set_level(self, level: Level, key: str, value: bytes) -> None:
        stats = self._stats[level.name]
        start = time.perf_counter()
        try:
            await level.set(key, value)
            stats["sets"] += 1
        except level.errors as e:
            stats["errors"] += 1
            log.warning("cache level %s failed on set: %s", level.name, e)
        stats["set_latency_s"] += time.perf_counter() - start

    async def set(self, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"TieredCache stores bytes, got {type(value).__name__}")
        for level in self._levels:
            await self._set_level(level, key, value)

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[bytes | None]]) -> bytes | None:
        """The value of ``key``: from a level, else from ``compute()``, stored in every level.

        While one caller computes a key, others that miss it await that computation. ``compute`` returns None for a
        result that must not be shared (it changed the caller's own state): then, as after a failed computation
        (whose exception goes to its caller only), each waiting caller runs its own ``compute``.
        """
        value = await self.get(key)
        if value is not None:
            return value

        async def computed() -> bytes | None:
            value = await compute()
            if value is not None:
                await self.set(key, value)
            return value

        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.get_running_loop().create_future()
            value = None
            try:
                value = await (computed() if self._leases is None else self._across_processes(key, computed))
            finally:
                del self._pending[key]
                pending.set_result(value)
            return value
        value = await asyncio.shield(pending)  # shielded: a waiter's cancellation must not cancel the others' wait
        if value is not None:
            self.coalesced += 1
            return value
        return await computed()

    async def _across_processes(self, key: str, computed: Callable[[], Awaitable[bytes | None]]) -> bytes | None:
        """This process's miss under the key's lease: computed here, or another process's value, which is then
        kept in this process's faster levels."""
        value, here = await self._leases.compute_once(key, computed)
        if value is not None and not here:
            for level in self._levels[:-1]:
                await self._set_level(level, key, value)
        return value

    def attach(self, budget: MemoryBudget) -> None:
        """The memory level draws from the process's memory budget (:meth:`MemoryLevel.attach`)."""
        if self._memory is not None:
            self._memory.attach(budget)

    def stats(self) -> dict[str, dict[str, float]]:
        """Per level: ``hits``, ``misses``, ``errors``, ``sets`` and summed ``get_latency_s`` / ``set_latency_s``;
        with leases, the shared level's ``lease_<event>`` counts too (:mod:`tool_server.coalesce`)."""
        stats = {name: dict(s) for name, s in self._stats.items()}
        if self._memory is not None:
            stats[MemoryLevel.name]["not_kept"] = self._memory.not_kept
        if self._leases is not None:
            stats[self._levels[-1].name].update({f"lease_{e}": n for e, n in self._leases.events.items()})
        return stats

    async def close(self) -> None:
        for level in self._levels:
            await level.close()
