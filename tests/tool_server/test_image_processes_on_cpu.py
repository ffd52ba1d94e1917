"""Large bodies and images through the image processes (``--image-processes``, ``--image-process-min-kib``): the
same answers as in threads, errors that keep their type and field, long strings cut out of a body only where they
are whole strings; and answers charged to the memory budget while they are written."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import socket

import numpy as np
import orjson
import pytest
from PIL import Image

from tool_server.app import MEMORY, RUNNER
from tool_server.errors import STATUS, ToolError
from tool_server.image_processes import CUT_MARK, ImageProcesses, SharedFile, _cut

from .conftest import until as raw_http_until

KIB = 1024


def _noise_png(size: tuple[int, int]) -> bytes:
    pixels = np.random.default_rng(1).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


async def _open_and_crop(client, images: list[str]) -> tuple[dict, dict]:
    r = await client.post("/v1/sessions", json={"images": images, "group_id": "g"})
    opened = await r.json()
    assert r.status == 200, opened
    body = {"name": "CropImage", "arguments": {"crop_config": {"img_1": [0, 0, 1000, 500]}}, "include_pixels": True}
    r = await client.post(f"/v1/sessions/{opened['session_id']}/call", json=body)
    crop = await r.json()
    assert r.status == 200, crop
    return opened, crop


async def test_large_opens_and_crops_in_processes_answer_as_threads_do(serve):
    """A 300x200 noise PNG (~180 KB) over a 64 KiB threshold: its body is cut and parsed, it is decoded and its crop's
    base64 made in a process; the register, the crop's pixels and the kept PNG match a server without processes."""
    png = _noise_png((300, 200))
    image = "data:image/png;base64," + base64.b64encode(png).decode()
    app, client = await serve(image_processes=1, image_process_min_bytes=64 * KIB)
    _, plain = await serve(image_processes=0)
    opened, crop = await _open_and_crop(client, [image, image])
    expected_open, expected_crop = await _open_and_crop(plain, [image, image])
    assert opened["images"] == expected_open["images"] == ["img_1", "img_2"]
    assert crop["images"] == expected_crop["images"]
    assert (crop["images"][0]["width"], crop["images"][0]["height"]) == (300, 100)
    cropped = Image.open(io.BytesIO(base64.b64decode(crop["images"][0]["png_base64"])))
    source = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert np.array_equal(np.asarray(cropped), source[:100])
    assert app[RUNNER].ctx.pools.processes.jobs == {"cut": 1, "decode": 2, "b64encode": 1}
    # the question image's PNG came back with its pixels, kept as is: asking its pixels encodes nothing
    body = {"name": "CropImage", "arguments": {"crop_config": {"img_1": [0, 0, 1000, 1000]}}, "include_pixels": True}
    r = await client.post(f"/v1/sessions/{opened['session_id']}/call", json=body)
    assert base64.b64decode((await r.json())["images"][0]["png_base64"]) != png  # a crop: a new PNG of its own
    assert app[MEMORY].used["responses"] == 0


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("A" * 100_001 + "=", ("bad_image", "images/0")),  # not base64 (padding inside)
        (base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"x" * 100_000).decode(), ("bad_image", "images/0")),
    ],
)
async def test_an_image_refused_in_a_process_keeps_its_error_type_and_field(serve, image, expected):
    app, client = await serve(image_processes=1, image_process_min_bytes=64 * KIB)
    r = await client.post("/v1/sessions", json={"images": [image]})
    error = (await r.json())["error"]
    assert (r.status, error["type"], error["field"]) == (400, *expected)
    assert app[MEMORY].used["images"] == 0


async def test_a_long_string_outside_the_images_is_refused_not_taken_as_its_placeholder(serve):
    _, client = await serve(image_processes=1, image_process_min_bytes=64 * KIB)
    r = await client.post("/v1/sessions", json={"images": [], "group_id": "Q" * 70_000})
    error = (await r.json())["error"]
    assert (r.status, error["type"], error["field"]) == (400, "input_too_long", "group_id")


def _cut_of(body: bytes, min_chars: int = 8) -> tuple[bytes, list[tuple[int, int]]]:
    file = SharedFile()
    try:
        file.write(body)
        return _cut(file.path, len(body), min_chars)
    finally:
        file.close()


def test_cut_replaces_whole_strings_only():
    body = b'{"a": "ab\\"QUJDREVGR0g=", "images": ["data:image/png;base64,QUJDREVGR0g=", "short"]}'
    small, spans = _cut_of(body)
    # the string after an escaped quote is inside another string: left alone; the image is cut
    assert orjson.loads(small) == {"a": 'ab"QUJDREVGR0g=', "images": [CUT_MARK + "0", "short"]}
    assert [body[o : o + n] for o, n in spans] == [b"data:image/png;base64,QUJDREVGR0g="]


def test_a_cut_that_does_not_start_a_string_leaves_a_body_that_does_not_parse():
    body = json.dumps(["x", *[1] * 20, "y"], separators=(",", ":")).encode()  # '",1,1,...,1,"' looks like a string
    small, spans = _cut_of(body)
    assert spans
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(small)


async def test_an_answer_is_charged_while_it_is_written_and_refused_when_it_does_not_fit(serve):
    """A crop with pixels read by nobody (a receive buffer of 4 KiB): its ~12 MB answer stays charged to
    ``responses`` until the client reads it; with a budget it cannot fit, it is 503 server_busy, nothing charged."""
    png = _noise_png((2000, 1500))
    app, client = await serve(image_processes=0)
    r = await client.post("/v1/sessions", json={"images": [base64.b64encode(png).decode()]})
    sid = (await r.json())["session_id"]
    body = orjson.dumps({"name": "CropImage", "arguments": {"crop_config": {"img_1": [0, 0, 1000, 1000]}},
                         "include_pixels": True})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((client.host, client.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"POST /v1/sessions/%s/call HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (sid.encode(), len(body), body))
    await raw_http_until(lambda: app[MEMORY].used["responses"] > len(png))  # written, not yet read
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(v) for k, _, v in (line.partition(b":") for line in head.lower().split(b"\r\n"))
                  if k == b"content-length")
    assert len(await reader.readexactly(length)) == length > 4 * len(png) // 3
    await raw_http_until(lambda: app[MEMORY].used["responses"] == 0)
    writer.close()

    png = _noise_png((700, 600))
    small, client = await serve(image_processes=0, memory_budget_bytes=3 * 700 * 600 * 4)
    r = await client.post("/v1/sessions", json={"images": [base64.b64encode(png).decode()]})
    sid = (await r.json())["session_id"]
    r = await client.post(f"/v1/sessions/{sid}/call", data=body)
    error = (await r.json())["error"]
    assert (r.status, error["type"]) == (503, "server_busy")
    assert small[MEMORY].used["responses"] == 0 and small[MEMORY].refused["responses"] == 1


def test_a_dead_image_process_fails_its_call_with_a_retry_and_the_next_call_gets_new_processes():
    processes = ImageProcesses(1, max_pixels=10**6, min_bytes=16)
    body = json.dumps({"images": ["x" * 64], "group_id": "g"}).encode()
    try:
        small, cuts = processes.cut_long_strings(body)
        assert len(cuts) == 1 and processes.restarts == 0
        for cut in {id(c.file): c.file for c in cuts.values()}.values():
            cut.close()
        for pid in list(processes._pool._processes):  # the OOM killer, say
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ToolError) as failed:
            processes.cut_long_strings(body)
        assert failed.value.type == "image_process_failed" and STATUS[failed.value.type] == 503
        assert processes.restarts == 1
        small, cuts = processes.cut_long_strings(body)  # a new pool
        assert len(cuts) == 1 and processes.restarts == 1
        for cut in {id(c.file): c.file for c in cuts.values()}.values():
            cut.close()
    finally:
        processes.close()
