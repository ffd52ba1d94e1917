"""Identical misses coalesced across processes through a real Redis server (``tool_server.coalesce``): one backend
call for a group's identical calls in two processes, and every way out without the holder's value counted."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import redis

from neos_core.ports import free_local_port
from neos_core.world.sources import default_cache_dir
from tool_server.cache import TieredCache

# One process of a tool server, reduced to its cache: 4 concurrent identical misses once every process is ready (a
# Redis key NS:go), the backend call counted in Redis (NS:backend_calls) and held open long enough for all to miss.
# NS keeps tests apart on a shared NEOS_TEST_REDIS_URL server.
_PROCESS = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import redis
    from tool_server.cache import TieredCache

    url, name, hold_s, ns = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

    async def main():
        sync = redis.Redis.from_url(url)
        cache = TieredCache.from_config(memory_items=8, redis_url=url)

        async def backend():
            sync.incr(ns + ":backend_calls")
            sync.set(ns + ":leading:" + name, 1)
            await asyncio.sleep(hold_s)
            return b"result of the search"

        sync.incr(ns + ":ready")
        while not sync.exists(ns + ":go"):
            time.sleep(0.01)
        values = await asyncio.gather(*(cache.get_or_compute(ns + ":k", backend) for _ in range(4)))
        print(json.dumps({"values": [v.decode() for v in values], "coalesced": cache.coalesced,
                          "shared": cache.stats()["shared"]}), flush=True)
        await cache.close()

    asyncio.run(main())
    """
)


def _start(url: str, name: str, hold_s: float, ns: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", _PROCESS, url, name, str(hold_s), ns], stdout=subprocess.PIPE,
                            text=True, env=env)


def test_eight_identical_misses_in_two_processes_reach_the_backend_once(redis_url):
    client, ns = redis.Redis.from_url(redis_url), uuid.uuid4().hex
    procs = [_start(redis_url, name, 2.0, ns) for name in ("a", "b")]
    while int(client.get(f"{ns}:ready") or 0) < 2:
        assert all(p.poll() is None for p in procs), "a cache process exited before it was ready"
        time.sleep(0.02)
    client.set(f"{ns}:go", 1)
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert int(client.get(f"{ns}:backend_calls")) == 1
    assert all(o["values"] == ["result of the search"] * 4 for o in outs)
    assert [o["coalesced"] for o in outs] == [3, 3]  # within each process: 3 waiters on its first caller
    shared = sorted(tuple(o["shared"].get(f"lease_{e}", 0) for e in ("leads", "waits", "coalesced")) for o in outs)
    assert shared == [(0, 1, 1), (1, 0, 0)]  # one process computed under the lease, the other got its value
    assert not any(k in o["shared"] for o in outs for k in ("lease_expired", "lease_wait_timeouts", "lease_errors"))
    client.close()


async def test_a_dead_lease_holder_is_taken_over_after_its_lease_counted(redis_url):
    client, ns = redis.Redis.from_url(redis_url), uuid.uuid4().hex
    holder = _start(redis_url, "holder", 3600.0, ns)  # computes "forever": killed while it holds the lease
    client.set(f"{ns}:go", 1)
    while not client.exists(f"{ns}:leading:holder"):
        assert holder.poll() is None
        await asyncio.sleep(0.02)
    # the holder's lease was taken with the default life (10 s): shorten it so the test does not wait for it
    lease = f"neos:tool:lease:{ns}:k"
    assert client.pexpire(lease, 300)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    waiter = TieredCache.from_config(memory_items=8, redis_url=redis_url, lease_max_wait_s=60.0)
    calls = []

    async def backend() -> bytes:
        calls.append(1)
        return b"computed here"

    assert await waiter.get_or_compute(f"{ns}:k", backend) == b"computed here"
    assert len(calls) == 1
    shared = waiter.stats()["shared"]
    assert shared["lease_expired"] == 1 and "lease_leads" not in shared
    assert client.get(f"neos:tool:{ns}:k") == b"computed here"  # shared for the next process
    await waiter.close()
    client.close()


async def test_a_live_holder_past_the_bounded_wait_and_unshareable_results(redis_url):
    holder = TieredCache.from_config(memory_items=8, redis_url=redis_url, lease_s=0.3)  # renewed while computing
    waiter = TieredCache.from_config(memory_items=8, redis_url=redis_url, lease_max_wait_s=0.5)
    release, calls = asyncio.Event(), []

    async def slow() -> bytes:
        calls.append("holder")
        await release.wait()
        return b"late"

    async def fast() -> bytes:
        calls.append("waiter")
        return b"own"

    ns = uuid.uuid4().hex
    leading = asyncio.create_task(holder.get_or_compute(f"{ns}:slow", slow))
    while not calls:
        await asyncio.sleep(0.01)
    assert await waiter.get_or_compute(f"{ns}:slow", fast) == b"own"  # gave up waiting: computed, counted
    assert waiter.stats()["shared"]["lease_wait_timeouts"] == 1 and waiter.stats()["shared"]["lease_waits"] == 1
    release.set()
    assert await leading == b"late" and calls == ["holder", "waiter"]

    # a holder whose result is not shareable (None) tells its waiters to compute their own, without the wait
    gate, started = asyncio.Event(), asyncio.Event()

    async def unshareable() -> None:
        started.set()
        await gate.wait()
        return None

    leading = asyncio.create_task(holder.get_or_compute(f"{ns}:own-register", unshareable))
    await started.wait()
    waiting = asyncio.create_task(waiter.get_or_compute(f"{ns}:own-register", fast))
    while not waiter.stats()["shared"].get("lease_waits", 0) == 2:  # the waiter found the lease held
        await asyncio.sleep(0.01)
    gate.set()
    assert await leading is None and await waiting == b"own"
    assert waiter.stats()["shared"]["lease_unshared"] == 1 and waiter.stats()["shared"]["lease_wait_timeouts"] == 1
    await holder.close()
    await waiter.close()


async def test_redis_down_computes_without_coalescing_counted():
    cache = TieredCache.from_config(memory_items=4, redis_url=f"redis://127.0.0.1:{free_local_port()}/0")

    async def backend() -> bytes:
        return b"v"

    assert await cache.get_or_compute("k", backend) == b"v"
    assert cache.stats()["shared"]["lease_errors"] == 1
    await cache.close()


def test_shipped_lease_settings():
    from tool_server.__main__ import parser

    args = parser().parse_args(["--world", "w"])
    assert (args.redis_lease_s, args.redis_lease_wait_s) == (10.0, 30.0)
    cache = TieredCache.from_config(redis_url="redis://127.0.0.1:1/0")  # no connection until used
    assert (cache._leases.lease_s, cache._leases.max_wait_s) == (10.0, 30.0)


def test_a_groups_identical_calls_through_two_workers_reach_the_backend_once(small_world, tmp_path, redis_url):
    """End to end: ``python -m tool_server --workers 2 --redis-url``, 8 sessions (4 on each worker, the router opens
    them in turn), one identical TextSearch from each at once: one computation, 7 answers from the cache."""
    import aiohttp

    from tool_server.launch import served

    queries = [f"flag {uuid.uuid4().hex[:6]} {i}" for i in range(32)]  # never asked before, on any Redis

    async def group(base: str) -> None:
        async with aiohttp.ClientSession(base) as http:
            sids = []
            for _ in range(8):
                async with http.post("/v1/sessions", json={"images": []}) as r:
                    sids.append((await r.json())["session_id"])
            assert {sid[:3] for sid in sids} == {"s0_", "s1_"}

            async def search(sid: str) -> dict:
                body = {"name": "TextSearch", "arguments": {"query": queries}}
                async with http.post(f"/v1/sessions/{sid}/call", json=body) as r:
                    assert r.status == 200
                    return await r.json()

            answers = await asyncio.gather(*(search(sid) for sid in sids))
            assert len({a["text"] for a in answers}) == 1
            assert sorted(a["cached"] for a in answers) == [False] + [True] * 7
            async with http.get("/metrics") as r:
                metrics = await r.text()
            assert 'cache_events_total{level="shared",event="lease_leads"} 1\n' in metrics

    args = ["--no-ocr", "--workers", "2", "--redis-url", redis_url, "--mei-log", str(tmp_path / "mei.jsonl"),
            "--cache-dir", str(default_cache_dir() / "tool-server")]
    with served(small_world, *args) as base:
        asyncio.run(group(base))
