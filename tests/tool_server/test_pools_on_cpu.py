"""No head-of-line blocking: heavy work runs in its own bounded pool, cheap calls keep going while it is saturated;
and the session budgets through HTTP."""

from __future__ import annotations

import asyncio
import base64
import io
import threading

import pytest
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from neos_core.world.sources import default_cache_dir
from tool_server.app import RUNNER, ServerSettings, create_app
from tool_server.cache import TieredCache
from tool_server.mei import MEIConfig, build_interface
from tool_server.offline.reverse import ReverseIndex

ORIGIN = "https://neos-world.invalid"
FLAG_FRA, FLAG_MEX = f"{ORIGIN}/media/flag_fra.png", f"{ORIGIN}/media/flag_mex.png"
BOUND_S = 60  # a hang guard, not a latency budget: a call stuck behind the heavy ones never finishes at all


def _png_b64(size: tuple[int, int], colour=(10, 20, 30)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture
async def make_client(world, tmp_path):
    clients: list[TestClient] = []

    async def start(**settings) -> TestClient:
        app = create_app(
            world=world,
            mei=build_interface(MEIConfig(log_path=tmp_path / f"mei{len(clients)}.jsonl", ocr=False)),
            cache=TieredCache.from_config(memory_items=1000),
            settings=ServerSettings(**settings),
        )
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def _json(response) -> tuple[int, dict]:
    return response.status, await response.json()


async def _session(client, **body) -> str:
    status, created = await _json(await client.post("/v1/sessions", json=body))
    assert status == 200, created
    return created["session_id"]


async def _call(client, sid: str, name: str, arguments: dict, **extra) -> tuple[int, dict]:
    body = {"name": name, "arguments": arguments, **extra}
    return await _json(await client.post(f"/v1/sessions/{sid}/call", json=body))


async def test_cheap_calls_finish_while_every_reverse_search_slot_is_held(make_client, world, monkeypatch):
    client = await make_client()
    await asyncio.wrap_future(world._features)  # features loaded: the searches below reach the index
    release, entered, lock = threading.Event(), [], threading.Lock()
    search = ReverseIndex.search

    def held(self, image, *, limit=5):
        with lock:
            entered.append(1)
        release.wait(BOUND_S)
        return search(self, image, limit=limit)

    monkeypatch.setattr(ReverseIndex, "search", held)
    sid = await _session(client)
    heavy = [
        asyncio.create_task(
            _call(client, sid, "ReverseImageSearch", {"image_url": [FLAG_MEX], "goal": f"source {i}"})
        )
        for i in range(12)  # twice the threads of asyncio's default pool on 2 cores, which they all once held
    ]
    pool_size = client.app[RUNNER].ctx.pools.sizes["reverse"]
    while len(entered) < pool_size:
        await asyncio.sleep(0.01)
    try:
        cheap = await asyncio.wait_for(
            asyncio.gather(
                _json(await client.post("/v1/sessions", json={"images": [_png_b64((64, 48))]})),
                _call(client, sid, "FetchImage", {"urls": [FLAG_FRA]}),
                _call(client, sid, "TextSearch", {"query": [f"capital {i}" for i in range(8)]}),
                _json(await client.get("/healthz")),
            ),
            BOUND_S,
        )
        assert [status for status, _ in cheap] == [200, 200, 200, 200]
        crop_call = _call(client, sid, "CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}})
        crop = await asyncio.wait_for(crop_call, BOUND_S)
        assert crop[0] == 200
        assert not any(t.done() for t in heavy) and len(entered) == pool_size  # the pool bounds the heavy work
    finally:
        release.set()
    done = await asyncio.gather(*heavy)
    assert all(status == 200 for status, _ in done)


async def test_fetch_image_and_session_opens_finish_while_every_png_encoding_slot_is_held(make_client, monkeypatch):
    """Crops answered with pixels are PNG-encoded on their own pool: the decoding that FetchImage and session opens
    wait for once queued behind those encodings on the image pool (cheap calls' p50 x4.8 under load)."""
    from tool_server import sessions

    client = await make_client()
    pools = client.app[RUNNER].ctx.pools
    release, entered, lock = threading.Event(), [], threading.Lock()
    encode = sessions.encode_png

    def held(image):
        with lock:
            entered.append(1)
        release.wait(BOUND_S)
        return encode(image)

    monkeypatch.setattr(sessions, "encode_png", held)
    sid = await _session(client, images=[_png_b64((400, 300))])
    crop = {"crop_config": {"img_1": [0, 0, 500, 500]}}
    heavy = [
        asyncio.create_task(_call(client, sid, "CropImage", crop, include_pixels=True))
        for _ in range(pools.sizes["encode"] + pools.sizes["image"])  # more than either pool has threads
    ]
    while len(entered) < pools.sizes["encode"]:
        await asyncio.sleep(0.01)
    try:
        cheap = await asyncio.wait_for(
            asyncio.gather(
                _call(client, sid, "FetchImage", {"urls": [FLAG_FRA]}),
                _json(await client.post("/v1/sessions", json={"images": [_png_b64((64, 48))]})),
            ),
            BOUND_S,
        )
        assert [status for status, _ in cheap] == [200, 200]
        assert not any(t.done() for t in heavy) and len(entered) == pools.sizes["encode"]
    finally:
        release.set()
    done = await asyncio.gather(*heavy)
    assert all(status == 200 and body["images"][0]["png_base64"] for status, body in done)


async def test_calls_waiting_for_ocr_leave_asyncio_s_default_executor_free(monkeypatch):
    """The extractive MEI's OCR (one inference at a time) once ran in asyncio's default executor: calls waiting for it
    held every slot, and the disk cache tier's reads and writes (``asyncio.to_thread``) queued behind them."""
    import os

    from tool_server.mei.ocr import OCR

    ocr, release, entered = OCR(), threading.Event(), []

    def held(png: bytes) -> str:
        entered.append(png)
        release.wait(BOUND_S)
        return ""

    monkeypatch.setattr(ocr, "text_sync", held)
    default_slots = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor on this machine
    waiting = [asyncio.create_task(ocr.text(b"%d" % i)) for i in range(default_slots + 2)]
    try:
        while not entered:
            await asyncio.sleep(0.01)
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "disk read"), BOUND_S / 4) == "disk read"
        assert len(entered) == 1  # one inference at a time, the others queued on OCR's own thread
    finally:
        release.set()
    assert await asyncio.gather(*waiting) == [""] * (default_slots + 2)


async def test_crops_run_on_the_image_pool_not_on_the_event_loop(make_client):
    client = await make_client()
    pools = client.app[RUNNER].ctx.pools
    sid = await _session(client, images=[_png_b64((400, 300))])
    release = threading.Event()
    blockers = [asyncio.ensure_future(pools.run("image", release.wait, BOUND_S)) for _ in range(pools.sizes["image"])]
    crop = asyncio.create_task(_call(client, sid, "CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}}))
    try:
        status, _ = await asyncio.wait_for(_call(client, sid, "TextSearch", {"query": ["Paris"]}), BOUND_S)
        assert status == 200
        await asyncio.sleep(0.2)
        assert not crop.done()  # waiting for the image pool, while the loop answered the search
    finally:
        release.set()
    await asyncio.gather(*blockers)
    status, body = await crop
    assert status == 200 and body["images"][0]["ref"] == "img_2"


async def test_session_image_budget_and_client_quota_over_http(make_client):
    client = await make_client(max_session_image_bytes=4 * 300 * 300 * 2, max_sessions_per_client=2)
    images = [_png_b64((300, 300), (i, 0, 0)) for i in range(3)]  # three 360 kB images: one over the budget
    status, body = await _json(await client.post("/v1/sessions", json={"images": images}))
    assert (status, body["error"]["type"]) == (409, "session_memory_full")
    assert "sessions_active 0" in await (await client.get("/metrics")).text()
    sid = await _session(client, images=images[:2])
    status, body = await _call(client, sid, "CropImage", {"crop_config": {"img_1": [0, 0, 100, 100]}})
    assert (status, body["error"]["type"]) == (409, "session_memory_full")
    await _session(client)
    status, body = await _json(await client.post("/v1/sessions", json={}))
    assert (status, body["error"]["type"]) == (429, "session_quota")
    text = await (await client.get("/metrics")).text()
    assert f"session_image_bytes {4 * 300 * 300 * 2}" in text


async def test_question_images_are_taken_from_the_server_budget_before_they_are_decoded(make_client, monkeypatch):
    """Room on the server for two 300x300 images (and the request body): an open with four is refused before
    decoding the third (its header gives its size), and holds nothing. Only the session's budget was once checked
    while decoding: concurrent opens each decoded up to 512 MiB before the server's budget was asked. The client is
    alone: its 0.5 share does not bind, and the server's budget, not the share, refuses (503, not 429)."""
    from tool_server import app as app_module

    client = await make_client(memory_budget_bytes=4 * 300 * 300 * 2 + 2**16, client_memory_share=0.5)  # + the body
    decoded: list[int] = []
    decode = app_module.decode_base64_image

    def counted(*args, **kwargs):
        decoded.append(1)
        return decode(*args, **kwargs)

    monkeypatch.setattr(app_module, "decode_base64_image", counted)
    images = [_png_b64((300, 300), (i, 0, 0)) for i in range(4)]
    status, body = await _json(await client.post("/v1/sessions", json={"images": images}))
    assert (status, body["error"]["type"], len(decoded)) == (503, "server_memory_full", 2)
    text = await (await client.get("/metrics")).text()
    assert "sessions_active 0" in text and "session_image_bytes 0" in text
    status, body = await _json(await client.post("/v1/sessions", json={"images": images[:2]}))
    assert status == 200 and body["images"] == ["img_1", "img_2"]


async def test_reverse_search_in_spawned_processes_matches_and_survives_a_killed_process(world, monkeypatch):
    """``--search-processes``: spawned (not forked from this process, which runs Ray's and the pools' threads), the
    index memory-mapped; same matches as in threads; a killed process is one counted error, then replaced."""
    import os
    import signal

    from tool_server.errors import ToolError

    mex = Image.open(world.world.image_path("flag_mex")).convert("RGB")
    crop = mex.crop((10, 10, mex.width - 10, mex.height - 10))
    in_threads = await world.reverse_search(crop, 5)
    monkeypatch.setattr(world, "_search_processes", 1)
    try:
        assert await world.reverse_search(crop, 5) == in_threads and in_threads[0].image_id == "flag_mex"
        (pid,) = world._spawned.pids  # the one search process
        assert pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ToolError) as err:  # a counted, bounded error for the call that met the dead process
            await world.reverse_search(crop, 5)
        assert err.value.type == "search_unavailable" and world.search_restarts == 1
        assert await world.reverse_search(crop, 5) == in_threads  # new processes answer later calls
    finally:
        if world._spawned is not None:
            world._spawned.close()
            world._spawned = None


def test_a_server_stopped_by_sigterm_leaves_no_search_process_or_index_file(small_world, tmp_path):
    """``python -m tool_server`` with its default search processes: the processes map the index files, and SIGTERM (how
    operators and ``launch.served`` stop it) ends them and removes the files (the signal's default action left both)."""
    import os
    import subprocess
    import sys
    import time
    import uuid
    from pathlib import Path

    import aiohttp

    server = subprocess.Popen(
        [sys.executable, "-m", "tool_server", "--world", str(small_world), "--port", "0", "--no-ocr",
         "--cache-dir", str(default_cache_dir() / "tool-server"), "--mei-log", str(tmp_path / "mei.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        base = server.stdout.readline().split("listening on ", 1)[1].split()[0]

        async def search() -> None:
            async with aiohttp.ClientSession(base) as http:
                async with http.post("/v1/sessions", json={}) as r:
                    sid = (await r.json())["session_id"]
                goal = f"which flag {uuid.uuid4()}"  # searched here, not read from an earlier run's disk tier
                call = {"name": "ReverseImageSearch", "arguments": {"image_url": [FLAG_MEX], "goal": goal}}
                async with http.post(f"/v1/sessions/{sid}/call", json=call) as r:
                    assert r.status == 200 and (await r.json())["records"][0]["candidates"]

        asyncio.run(search())
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        mapped = {  # the directory of the index files that the search process maps
            Path(line.split()[-1]).parent
            for pid in children
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if line.endswith("descriptors.npy")
        }
        assert len(mapped) == 1
        (index_dir,) = mapped
        assert index_dir.is_dir()
        server.terminate()
        assert server.wait(30) == 0
        for _ in range(100):  # each search process notices within a second or two
            if not any(Path(f"/proc/{pid}").exists() for pid in children):
                break
            time.sleep(0.1)
        assert not any(Path(f"/proc/{pid}").exists() for pid in children)
        assert not index_dir.exists()
    finally:
        if server.poll() is None:
            os.kill(server.pid, 9)
            server.wait()
