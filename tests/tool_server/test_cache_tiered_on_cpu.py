"""TieredCache: read-through with promotion, per-level stats, shared tier as a directory and as a real Redis server."""

import asyncio

import pytest

from neos_core.ports import free_local_port
from tool_server.cache import TieredCache, cache_key


def test_cache_key_is_canonical_and_scoped():
    a = cache_key("TextSearch", {"query": ["x", "y"], "k": 5})
    assert a == cache_key("TextSearch", {"k": 5, "query": ["x", "y"]})  # key order does not matter
    assert len(a) == 64 and int(a, 16) >= 0
    assert a != cache_key("TextSearch", {"query": ["y", "x"], "k": 5})
    assert a != cache_key("TextSearch", {"query": ["x", "y"], "k": 5}, scope="group-1")
    assert a != cache_key("ImageSearch", {"query": ["x", "y"], "k": 5})
    with pytest.raises(ValueError):
        cache_key("T", {"x": float("nan")})
    with pytest.raises(ValueError):
        cache_key("T", {"x": object()})


async def test_memory_lru_evicts_least_recently_used():
    cache = TieredCache.from_config(memory_items=2)
    await cache.set("a", b"1")
    await cache.set("b", b"2")
    assert await cache.get("a") == b"1"  # a is now most recent
    await cache.set("c", b"3")  # evicts b
    assert await cache.get("b") is None
    assert await cache.get("a") == b"1" and await cache.get("c") == b"3"
    assert cache.stats()["memory"]["hits"] == 3 and cache.stats()["memory"]["misses"] == 1
    with pytest.raises(TypeError):
        await cache.set("d", "not bytes")


async def test_promotion_from_disk_and_shared_directory(tmp_path):
    writer = TieredCache.from_config(memory_items=8, disk_dir=tmp_path / "n1", shared_dir=tmp_path / "shared")
    await writer.set("k", b"value")
    await writer.close()
    # another node: own memory and disk, same shared directory
    reader = TieredCache.from_config(memory_items=8, disk_dir=tmp_path / "n2", shared_dir=tmp_path / "shared")
    assert await reader.get("k") == b"value"  # memory miss, disk miss, shared hit -> promoted
    assert await reader.get("k") == b"value"  # memory hit
    s = reader.stats()
    assert (s["memory"]["misses"], s["disk"]["misses"], s["shared"]["hits"]) == (1, 1, 1)
    assert s["memory"]["hits"] == 1 and s["disk"]["sets"] == 1 and s["memory"]["sets"] == 1
    assert s["shared"]["get_latency_s"] > 0
    await reader.close()
    # a third cache on n2's disk alone finds the promoted entry there
    disk_only = TieredCache.from_config(memory_items=8, disk_dir=tmp_path / "n2")
    assert await disk_only.get("k") == b"value"
    assert disk_only.stats()["disk"]["hits"] == 1
    await disk_only.close()
    assert await TieredCache.from_config(shared_dir=tmp_path / "shared").get("missing") is None


def test_shared_dir_and_redis_together_is_refused(tmp_path):
    with pytest.raises(ValueError):
        TieredCache.from_config(shared_dir=tmp_path, redis_url="redis://127.0.0.1:1")


async def test_redis_shared_tier(redis_url, tmp_path):
    a = TieredCache.from_config(memory_items=4, redis_url=redis_url)
    b = TieredCache.from_config(memory_items=4, disk_dir=tmp_path / "b", redis_url=redis_url)
    await a.set("k", b"\x00bytes\xff")
    assert await b.get("k") == b"\x00bytes\xff"
    assert await b.get("k") == b"\x00bytes\xff"
    s = b.stats()
    assert (s["memory"]["misses"], s["disk"]["misses"], s["shared"]["hits"], s["memory"]["hits"]) == (1, 1, 1, 1)
    assert await b.get("absent") is None and b.stats()["shared"]["misses"] == 1
    await a.close()
    await b.close()


async def test_unreachable_redis_counts_errors_and_misses():
    cache = TieredCache.from_config(memory_items=4, redis_url=f"redis://127.0.0.1:{free_local_port()}/0")
    await cache.set("k", b"v")  # memory gets it, redis fails
    assert await cache.get("k") == b"v"
    assert await cache.get("other") is None
    s = cache.stats()
    assert s["shared"]["errors"] == 2 and s["shared"]["misses"] == 1 and s["memory"]["hits"] == 1
    await cache.close()


async def test_concurrent_misses_of_one_key_compute_once():
    cache = TieredCache.from_config(memory_items=8)
    release, calls = asyncio.Event(), []

    async def compute() -> bytes:
        calls.append(1)
        await release.wait()  # every caller has missed before the first computation ends
        return b"result"

    waiters = [asyncio.create_task(cache.get_or_compute("k", compute)) for _ in range(16)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiters) == [b"result"] * 16
    assert len(calls) == 1 and cache.coalesced == 15
    assert await cache.get("k") == b"result" and cache.stats()["memory"]["sets"] == 1
    assert await cache.get_or_compute("k", compute) == b"result" and len(calls) == 1  # now a plain hit


async def test_unshareable_or_failed_computations_are_not_handed_to_waiters():
    cache = TieredCache.from_config(memory_items=8)
    release, calls = asyncio.Event(), []

    async def private() -> None:  # e.g. a result that added to the caller's visual register
        calls.append(1)
        await release.wait()

    waiters = [asyncio.create_task(cache.get_or_compute("p", private)) for _ in range(4)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiters) == [None] * 4
    assert len(calls) == 4 and cache.coalesced == 0 and await cache.get("p") is None

    fail, attempts = asyncio.Event(), []

    async def fails_first() -> bytes:
        attempts.append(1)
        if len(attempts) == 1:
            await fail.wait()
            raise RuntimeError("backend down")
        return b"second try"

    leader = asyncio.create_task(cache.get_or_compute("f", fails_first))
    follower = asyncio.create_task(cache.get_or_compute("f", fails_first))
    await asyncio.sleep(0)
    assert len(attempts) == 1  # the follower waits on the leader
    fail.set()
    with pytest.raises(RuntimeError):
        await leader  # the exception goes to the caller that computed, not to the one waiting on it
    assert await follower == b"second try" and len(attempts) == 2 and await cache.get("f") == b"second try"


async def test_cancelled_waiter_does_not_cancel_the_computation():
    cache = TieredCache.from_config(memory_items=8)
    release = asyncio.Event()

    async def compute() -> bytes:
        await release.wait()
        return b"v"

    leader = asyncio.create_task(cache.get_or_compute("k", compute))
    await asyncio.sleep(0)
    impatient, patient = (asyncio.create_task(cache.get_or_compute("k", compute)) for _ in range(2))
    await asyncio.sleep(0)
    impatient.cancel()
    release.set()
    assert await leader == b"v" and await patient == b"v" and impatient.cancelled()
