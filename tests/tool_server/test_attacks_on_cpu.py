"""Issue 35's attacks at small scale, on loopback: what an honest client gets while they run, and that the bytes the
process accounts for stay within its memory budget. The body attacks are in ``test_body_budget_on_cpu.py``."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading

import numpy as np
from PIL import Image

from tool_server.app import MEMORY, RUNNER, SESSIONS
from tool_server.bodies import BodyLimits
from tool_server.offline.pixels import png_as_is

MIB = 2**20
BOUND_S = 30.0


def _png(size: tuple[int, int], noise: bool = False, colour=(10, 20, 30)) -> bytes:
    if noise:  # incompressible: its PNG is about as large as its pixels
        image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    else:
        image = Image.new("RGB", size, colour)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _open(client, who: str, images: list[str] = ()) -> tuple[int, dict]:
    r = await client.post("/v1/sessions", json={"images": list(images)}, headers={"X-Client": who})
    return r.status, await r.json()


async def _call(client, who: str, sid: str, name: str, arguments: dict, pixels: bool = False) -> tuple[int, dict]:
    body = {"name": name, "arguments": arguments, "include_pixels": pixels}
    r = await client.post(f"/v1/sessions/{sid}/call", json=body, headers={"X-Client": who})
    return r.status, await r.json()


def _within_budget(app) -> bool:
    memory = app[MEMORY]
    return 0 <= memory.total <= memory.limit_bytes


async def test_stalled_tool_call_bodies_are_bounded_and_the_honest_open_succeeds(serve, raw_http):
    """40 tool calls stalled after 100 kB each (issue: 1,500 just under 1 MiB took 2.7 GB, none counted) while an
    honest client holds a body of its own: the attacker's bodies stop at its share of the body budget (ten of them in
    1 MiB; 429 for the other 30), the process's accounted bytes stay in budget, the honest open and call pass."""
    app, client = await serve(memory_budget_bytes=16 * MIB, bodies=BodyLimits(inflight_bytes=2 * MIB,
                                                                              call_reserve_bytes=MIB // 4))
    status, opened = await _open(client, "attacker")
    path = f"/v1/sessions/{opened['session_id']}/call"
    honest_body = await raw_http.held_body(client, path, 900_000, b" " * 1_000, who="honest")  # it competes
    await raw_http.until(lambda: app[MEMORY].used["bodies"] == 1_000)
    held = [await raw_http.held_body(client, path, 900_000, b" " * 100_000) for _ in range(40)]
    await raw_http.until(lambda: app[MEMORY].used["bodies"] == 1_001_000)
    assert _within_budget(app)
    status, honest = await _open(client, "honest", [_b64(_png((64, 48)))])
    assert status == 200, honest
    status, _ = await _call(client, "honest", honest["session_id"], "TextSearch", {"query": ["Paris"]})
    assert status == 200
    for _, writer in [*held, honest_body]:
        writer.close()
    await raw_http.until(lambda: app[MEMORY].used["bodies"] == 0)
    metrics = await (await client.get("/metrics")).text()
    assert 'tool_errors_total{type="client_quota"} 30' in metrics.splitlines()


async def test_kept_pngs_and_cache_entries_draw_from_the_memory_budget(serve, world):
    """A noise image's PNG kept for reuse is charged to the register (it was not: ~115 MB a session uncounted), the
    cache's memory level is charged its bytes, and images take room back from the cache before being refused."""
    app, client = await serve(memory_budget_bytes=4 * MIB, client_memory_share=1.0)
    question = _png((600, 600), noise=True)
    assert png_as_is(question) and len(question) > MIB
    status, opened = await _open(client, "a", [_b64(question)])
    sid = opened["session_id"]
    register = app[SESSIONS].get(sid).register
    assert register.bytes == 4 * 600 * 600 + len(question)  # the question's own PNG, kept to be sent as is
    for i in range(30):  # uncached searches fill the cache's memory level with the budget's free bytes
        assert (await _call(client, "a", sid, "TextSearch", {"query": [f"flag {i}", f"capital {i}"]}))[0] == 200
    cached = app[MEMORY].used["cache"]
    assert cached > 0 and _within_budget(app)
    status, crop = await _call(client, "a", sid, "CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}}, True)
    assert status == 200 and crop["images"][0]["png_base64"]
    assert register.bytes > 4 * 600 * 600 + 4 * 300 * 300 and _within_budget(app)  # the crop and its PNG
    status, other = await _open(client, "b", [_b64(_png((500, 500)))])  # 1 MB of pixels: the cache gives room
    assert status == 200, other
    assert app[MEMORY].used["cache"] < cached and _within_budget(app)
    assert app[MEMORY].used["images"] == app[SESSIONS].image_bytes


async def test_a_client_over_its_image_share_gets_429_and_others_still_open(serve):
    """One address filling the image budget kept every other at 503 server_memory_full; now, beside a client holding
    images, it stops at its share (429 client_quota) and the others' opens succeed."""
    app, client = await serve(memory_budget_bytes=4 * MIB, client_memory_share=0.5)
    png = _png((300, 300))
    image = _b64(png)
    assert (await _open(client, "honest0", [image]))[0] == 200  # 360,000 bytes of pixels and the kept PNG
    statuses = [(await _open(client, "hog", [image]))[0] for _ in range(8)]
    assert 5 * (4 * 300 * 300 + len(png)) <= 2 * MIB < 5 * (4 * 300 * 300 + len(png)) + 4 * 300 * 300
    assert statuses == [200] * 5 + [429] * 3  # 5 x 361 kB within its 2 MiB share, the sixth's pixels past it
    r = await client.post("/v1/sessions", json={"images": [image]}, headers={"X-Client": "hog"})
    assert (r.status, r.headers["Retry-After"]) == (429, "1")  # held back a second: no refusal loop at full speed
    assert [(await _open(client, f"honest{i}", [image]))[0] for i in range(1, 4)] == [200] * 3
    assert _within_budget(app)


async def test_a_lone_client_borrows_the_whole_image_budget_and_a_newcomer_takes_its_share_back(serve):
    """With --client-share 0.5 a client alone got half the server; now it may fill all of it (server_memory_full,
    not client_quota, when it is full). A second client then evicts the borrower's least recently used session to
    make room (preempted), and the borrower, now beside another, is held to its share."""
    app, client = await serve(memory_budget_bytes=4 * MIB, client_memory_share=0.5)
    png = _png((300, 300))
    image = _b64(png)
    per = 4 * 300 * 300 + len(png)  # a session's pixels and kept PNG
    body = len(json.dumps({"images": [image]}))  # charged to the memory budget while its open is answered
    fits = (4 * MIB - body) // per
    assert fits == 11  # 11 x ~361 kB + the last open's body within 4 MiB; the 12th's pixels do not fit
    opened = [await _open(client, "hog", [image]) for _ in range(fits + 1)]
    assert [status for status, _ in opened] == [200] * fits + [503]
    assert opened[-1][1]["error"]["type"] == "server_memory_full"
    assert app[SESSIONS].share.held["hog"] == fits * per > 2 * MIB and _within_budget(app)
    status, honest = await _open(client, "honest", [image])
    assert status == 200, honest
    assert app[SESSIONS].evictions == {"preempted": 1}
    first = opened[0][1]["session_id"]
    status, lost = await _call(client, "hog", first, "TextSearch", {"query": ["Paris"]})
    assert (status, lost["error"]["type"]) == (404, "unknown_session")
    status, refused = await _open(client, "hog", [image])
    assert (status, refused["error"]["type"]) == (429, "client_quota")
    metrics = (await (await client.get("/metrics")).text()).splitlines()
    assert 'sessions_evicted_total{reason="preempted"} 1' in metrics
    # borrowed: the pixels and the PNG of sessions 6 to 11, and the pixels of the 12th (then refused by the budget)
    assert 'client_share_borrowed_total{budget="images"} 13' in metrics
    assert _within_budget(app)


async def test_image_work_is_placed_by_size(serve, monkeypatch):
    """Question images over 4 Mpx are decoded on large_image (all went to image, where 25 Mpx opens held another
    client's FetchImage 0.8 s), and so are the PNGs of crops over 4 Mpx (all went to encode, on every rollout's
    path); the small ones stay on the cheap pools."""
    from tool_server import app as app_module
    from tool_server import sessions

    threads: list[tuple[str, str]] = []
    decode, encode = app_module.decode_base64_image, sessions.encode_png

    def decoding(*args, **kwargs):
        threads.append(("decode", threading.current_thread().name.rsplit("_", 1)[0]))
        return decode(*args, **kwargs)

    def encoding(image):
        threads.append(("encode", threading.current_thread().name.rsplit("_", 1)[0]))
        return encode(image)

    monkeypatch.setattr(app_module, "decode_base64_image", decoding)
    monkeypatch.setattr(sessions, "encode_png", encoding)
    app, client = await serve()
    status, opened = await _open(client, "a", [_b64(_png((2100, 2000))), _b64(_png((100, 100)))])
    assert status == 200, opened
    sid = opened["session_id"]
    crops = {"crop_config": {"img_1": [0, 0, 1000, 1000]}}
    assert (await _call(client, "a", sid, "CropImage", crops, pixels=True))[0] == 200
    crops = {"crop_config": {"img_2": [0, 0, 1000, 1000]}}
    assert (await _call(client, "a", sid, "CropImage", crops, pixels=True))[0] == 200
    assert threads == [("decode", "pool-large_image"), ("decode", "pool-image"),
                       ("encode", "pool-large_image"), ("encode", "pool-encode")]


async def test_a_world_image_fetched_with_pixels_is_sent_as_its_file(serve, world):
    app, client = await serve()
    image = next(im for im in world.world.images.values() if png_as_is(world.image_bytes(im.id)))
    status, opened = await _open(client, "a")
    status, fetched = await _call(client, "a", opened["session_id"], "FetchImage", {"urls": [image.url]}, True)
    assert status == 200
    assert base64.b64decode(fetched["images"][0]["png_base64"]) == world.image_bytes(image.id)


async def test_large_image_work_cannot_be_queued_by_one_client_and_cheap_opens_go_on(serve, monkeypatch, raw_http):
    """One client's large-image jobs are bounded (429 past them), so it cannot queue the others' behind its own;
    small opens do not wait for the large pool while it is held."""
    from tool_server import app as app_module

    release = threading.Event()
    decode = app_module.decode_base64_image

    def held(*args, **kwargs):
        if threading.current_thread().name.startswith("pool-large_image"):
            release.wait(BOUND_S)
        return decode(*args, **kwargs)

    monkeypatch.setattr(app_module, "decode_base64_image", held)
    app, client = await serve(client_heavy_jobs=1)
    large, small = _b64(_png((2100, 2000))), _b64(_png((64, 48)))
    first = asyncio.create_task(_open(client, "hog", [large]))
    await raw_http.until(lambda: app[RUNNER].ctx.pools.heavy_jobs["hog"] == 1)
    try:
        status, body = await asyncio.wait_for(_open(client, "hog", [large]), BOUND_S)
        assert (status, body["error"]["type"]) == (429, "client_quota")
        other = asyncio.create_task(_open(client, "honest", [large]))  # queued behind one job, not a client's many
        status, _ = await asyncio.wait_for(_open(client, "honest", [small]), BOUND_S)
        assert status == 200 and not other.done()
    finally:
        release.set()
    assert (await first)[0] == 200 and (await other)[0] == 200
    assert _within_budget(app)
