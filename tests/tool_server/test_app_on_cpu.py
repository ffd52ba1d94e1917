"""The HTTP contract against a real server on loopback (aiohttp TestServer), on the small world."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.request

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from neos_core.world.sources import default_cache_dir
from tool_server.app import CACHE
from tool_server.protocol import tool_schemas
from tool_server.tools import ops

ORIGIN = "https://neos-world.invalid"
FLAG_FRA, FLAG_MEX = f"{ORIGIN}/media/flag_fra.png", f"{ORIGIN}/media/flag_mex.png"


def _png_b64(colour: tuple[int, int, int], size: tuple[int, int] = (8, 6)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _pixels(item: dict) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(item["png_base64"]))).convert("RGB")


async def _session(client, **body) -> str:
    r = await client.post("/v1/sessions", json=body)
    assert r.status == 200, await r.text()
    return (await r.json())["session_id"]


async def _call(client, sid: str, name: str, arguments, status: int = 200, **extra) -> dict:
    r = await client.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": arguments, **extra})
    body = await r.json()
    assert r.status == status, body
    return body


async def test_health_tools_and_protocol_filter(client, world):
    health = await (await client.get("/healthz")).json()
    assert health["status"] == "ok" and health["world"] == world.content_hash
    tools = (await (await client.get("/v1/tools")).json())["tools"]
    assert tools == json.loads(json.dumps(tool_schemas()))
    neos = (await (await client.get("/v1/tools?protocol=neos")).json())["tools"]
    assert [t["function"]["name"] for t in neos][-1] == "CropImage" and len(neos) == 6
    r = await client.get("/v1/tools?protocol=other")
    assert r.status == 400 and (await r.json())["error"]["field"] == "protocol"


async def test_neos_tools_happy_path_and_register(client, world):
    r = await client.post("/v1/sessions", json={"images": [_png_b64((9, 9, 9))]})
    created = await r.json()
    sid = created["session_id"]
    assert created["images"] == ["img_1"]

    ts = await _call(client, sid, "TextSearch", {"query": ["capital of France", "Mexico"]})
    first = [x["url"] for x in ts["records"][0]["results"][:3]]
    assert {f"{ORIGIN}/wiki/France", f"{ORIGIN}/wiki/Paris"} & set(first)
    assert ts["records"][1]["results"][0]["url"] == f"{ORIGIN}/wiki/Mexico" and "Query 2: Mexico" in ts["text"]
    assert ts["images"] == [] and ts["cached"] is False

    wv = await _call(
        client,
        sid,
        "WebVisit",
        {"url": [f"{ORIGIN}/wiki/France", "https://example.com/"], "goal": "What is the capital of France?"},
        turn=3,
    )
    france, outside = wv["records"]
    assert "Paris" in france["evidence"] and len(france["page_images"]) <= 15
    assert FLAG_FRA in [im["url"] for im in france["page_images"]]
    assert outside["error"]["type"] == "offline" and len(wv["mei"]) == 1 and wv["mei"][0]["call_id"]

    im = await _call(client, sid, "ImageSearch", {"query": ["flag of France"], "goal": "the French national flag"})
    candidates = im["records"][0]["candidates"]
    assert 1 <= len(candidates) <= 5 and FLAG_FRA in [c["url"] for c in candidates]
    assert "png_base64" not in json.dumps(im)

    fetched = await _call(client, sid, "FetchImage", {"urls": [FLAG_FRA, f"{ORIGIN}/media/nope.png", FLAG_MEX]})
    assert [r.get("output_ref") for r in fetched["records"]] == ["img_2", None, "img_3"]
    assert fetched["records"][1]["error"]["type"] == "not_found"
    assert [(i["ref"], i["width"], i["height"]) for i in fetched["images"]] == [
        ("img_2", 320, 240),
        ("img_3", 320, 240),
    ]

    crops = await _call(
        client,
        sid,
        "CropImage",
        {"crop_config": {"img_2": [0, 0, 500, 500], "img_1": [[0, 0, 1000, 1000], [250, 0, 1000, 1000]]}},
        include_pixels=True,
    )
    assert [(i["ref"], i["width"], i["height"]) for i in crops["images"]] == [
        ("img_4", 160, 120),
        ("img_5", 8, 6),
        ("img_6", 6, 6),
    ]
    assert _pixels(crops["images"][1]).getpixel((0, 0)) == (9, 9, 9)  # a late crop of the question image
    flag = Image.open(world.world.image_path("flag_fra")).convert("RGB")
    assert _pixels(crops["images"][0]).getpixel((150, 100)) == flag.getpixel((150, 100))  # top-left quarter

    mex_crop = await _call(client, sid, "CropImage", {"crop_config": {"img_3": [100, 150, 700, 800]}})
    assert mex_crop["images"][0]["ref"] == "img_7"
    ris = await _call(
        client, sid, "ReverseImageSearch", {"image_token": ["img_7"], "goal": "which country's flag is this"}
    )
    best = ris["records"][0]["candidates"][0]
    assert best["url"] == FLAG_MEX and best["match_state"] == "visual_match"
    assert f"{ORIGIN}/wiki/Mexico" in [p["url"] for p in best["pages"]] and len(ris["mei"]) == 1

    again = await _call(client, sid, "TextSearch", {"query": ["capital of France", "Mexico"]})
    assert again["cached"] is True and again["text"] == ts["text"]


async def test_structured_errors(client):
    sid = await _session(client)
    assert (await _call(client, sid, "Nope", {}, 404))["error"]["type"] == "unknown_tool"
    err = (await _call(client, sid, "TextSearch", {"query": [""]}, 400))["error"]
    assert (err["type"], err["field"]) == ("invalid_arguments", "arguments/query/0")
    err = (await _call(client, sid, "CropImage", {"crop_config": {"img_1": [0, 0, 10, 10]}}, 400))["error"]
    assert (err["type"], err["field"]) == ("unknown_image", "arguments/crop_config/img_1")
    await _call(client, sid, "FetchImage", {"urls": [FLAG_FRA]})
    err = (await _call(client, sid, "CropImage", {"crop_config": {"img_1": [[0, 0, 10, 10], [600, 0, 500, 10]]}}, 400))[
        "error"
    ]
    assert err["field"] == "arguments/crop_config/img_1/1"
    err = await _call(
        client, sid, "CropImage", {"crop_config": {f"img_{1}": [[0, 0, 500, 500]] * 5, "img_2": [0, 0, 9, 9]}}, 400
    )
    assert err["error"]["type"] == "unknown_image"  # img_2 does not exist; nothing was added
    err = (await _call(client, sid, "ReverseImageSearch", {"image_token": ["img_9"], "goal": "g"}, 400))["error"]
    assert err["field"] == "arguments/image_token/0"
    r = await client.post(f"/v1/sessions/{sid}/call", data=b"{not json")
    assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request"
    r = await client.post("/v1/sessions/s_nope/call", json={"name": "TextSearch", "arguments": {"query": ["x"]}})
    assert r.status == 404 and (await r.json())["error"]["type"] == "unknown_session"
    r = await client.post("/v1/sessions", json={"images": ["!!notbase64"]})
    assert r.status == 400 and (await r.json())["error"]["field"] == "images/0"
    assert (await client.delete(f"/v1/sessions/{sid}")).status == 200
    assert (await client.delete(f"/v1/sessions/{sid}")).status == 404
    assert (await client.get("/nowhere")).status == 404


async def test_modalsearch_tools_and_resource_ids(client):
    sid = await _session(client, group_id="g1")
    hits = (await _call(client, sid, "t2t_search", {"query": "Mexico"}))["records"]
    url = f"{ORIGIN}/wiki/Mexico"
    page_id = "page_" + hashlib.sha256(url.encode()).hexdigest()[:8]
    assert (hits[0]["url"], hits[0]["resource_id"]) == (url, page_id) and page_id in (
        await _call(client, sid, "t2t_search", {"query": "Mexico"})
    )["text"]
    page = await _call(client, sid, "read_url", {"url": page_id})
    assert page["text"].startswith("# Mexico") and page["records"][0]["url"] == url
    evidence = await _call(client, sid, "read_url", {"url": url, "goal": "capital of Mexico"})
    assert "Mexico City" in evidence["records"][0]["evidence"] and len(evidence["mei"]) == 1
    image_id = "image_" + hashlib.sha256(FLAG_MEX.encode()).hexdigest()[:8]
    images = (await _call(client, sid, "t2i_search", {"query": "flag of Mexico"}))["records"]
    assert image_id in [i["resource_id"] for i in images]
    loaded = await _call(client, sid, "read_url", {"url": image_id})
    assert loaded["images"][0]["ref"] == "img_1" and loaded["cached"] is False
    for image in (image_id, "img_1"):
        found = (await _call(client, sid, "i2i_search", {"image": image, "region": [100, 150, 700, 800]}))["records"]
        assert found[0]["resource_id"] == image_id and found[0]["page_url"] == url
    other = await _session(client, group_id="g2")  # the in-group cache does not cross groups
    assert (await _call(client, other, "t2t_search", {"query": "Mexico"}))["cached"] is False
    assert (await _call(client, await _session(client, group_id="g1"), "t2t_search", {"query": "Mexico"}))[
        "cached"
    ] is True


async def test_metrics_exposition(client):
    sid = await _session(client)
    await _call(client, sid, "TextSearch", {"query": ["Paris"]})
    await _call(client, sid, "TextSearch", {"query": [""]}, 400)
    text = await (await client.get("/metrics")).text()
    assert 'tool_requests_total{tool="TextSearch",status="200"} 1' in text
    assert 'tool_requests_total{tool="TextSearch",status="400"} 1' in text
    assert 'tool_errors_total{type="invalid_arguments"} 1' in text
    assert 'cache_events_total{level="memory",event="misses"} 1' in text
    assert re.search(r'tool_latency_seconds_count\{tool="TextSearch"\} 2', text) and "sessions_active 1" in text


async def test_identical_concurrent_calls_run_the_backend_once(client, monkeypatch):
    n, release, runs = 12, asyncio.Event(), []
    search = ops.lexical_search

    async def counted(ctx, query: str, *, batch: int):
        runs.append(query)
        await release.wait()  # held until every request has missed the cache
        return await search(ctx, query, batch=batch)

    monkeypatch.setattr(ops, "lexical_search", counted)
    sids = [await _session(client, group_id="g") for _ in range(n)]
    calls = [asyncio.create_task(_call(client, s, "TextSearch", {"query": ["Mexico City"]})) for s in sids]
    cache = client.app[CACHE]
    while cache.stats()["memory"]["misses"] < n and not any(c.done() for c in calls):
        await asyncio.sleep(0.01)
    release.set()
    bodies = await asyncio.gather(*calls)
    assert runs == ["Mexico City"] and cache.coalesced == n - 1
    assert len({json.dumps(b["records"]) for b in bodies}) == 1 and bodies[0]["records"][0]["results"]
    assert sorted(b["cached"] for b in bodies) == [False] + [True] * (n - 1)
    metrics = await (await client.get("/metrics")).text()
    assert f"cache_coalesced_total {n - 1}" in metrics


async def test_concurrent_image_reads_register_in_every_session(client):
    # read_url of an image adds to the caller's register: never served from another call's result
    sids = [await _session(client) for _ in range(3)]
    first = await _session(client)
    await _call(client, first, "read_url", {"url": FLAG_MEX})
    bodies = await asyncio.gather(*(_call(client, s, "read_url", {"url": FLAG_MEX}) for s in [*sids, sids[0]]))
    assert sorted(b["images"][0]["ref"] for b in bodies) == ["img_1", "img_1", "img_1", "img_2"]
    assert not any(b["cached"] for b in bodies)
    crop = await _call(client, sids[1], "CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}})
    assert crop["images"][0]["ref"] == "img_2"


async def test_two_sessions_never_see_each_others_images(client):
    a, b = (
        await _session(client, images=[_png_b64((255, 0, 0))]),
        await _session(client, images=[_png_b64((0, 0, 255))]),
    )
    await _call(client, a, "FetchImage", {"urls": [FLAG_MEX]})
    err = (await _call(client, b, "CropImage", {"crop_config": {"img_2": [0, 0, 10, 10]}}, 400))["error"]
    assert err["type"] == "unknown_image"
    crops = await asyncio.gather(
        *(
            _call(client, s, "CropImage", {"crop_config": {"img_1": [0, 0, 1000, 1000]}}, include_pixels=True)
            for s in (a, b)
        )
    )
    assert [_pixels(c["images"][0]).getpixel((0, 0)) for c in crops] == [(255, 0, 0), (0, 0, 255)]
    assert [c["images"][0]["ref"] for c in crops] == ["img_3", "img_2"]


async def test_768_concurrent_sessions_do_not_leak(client):
    n = 768
    colours = [(i % 256, i // 256, 77) for i in range(n)]
    sids = await asyncio.gather(*(_session(client, images=[_png_b64(c, (4, 4))]) for c in colours))
    assert len(set(sids)) == n
    crops = await asyncio.gather(
        *(
            _call(
                client,
                s,
                "CropImage",
                {"crop_config": {"img_1": [[0, 0, 500, 500], [500, 500, 1000, 1000]]}},
                include_pixels=True,
            )
            for s in sids
        )
    )
    for colour, crop in zip(colours, crops):
        assert [i["ref"] for i in crop["images"]] == ["img_2", "img_3"]
        assert {_pixels(i).getpixel((0, 0)) for i in crop["images"]} == {colour}


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2000, 2000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    [
        "query",
        "url",
        "goal",
        "image_token",
        "image_url",
        "urls",
        "crop_config",
        "img_1",
        "img_2",
        "image",
        "region",
        "extra",
    ]
)
_ARGS = _JSON | st.dictionaries(_KEYS, _JSON | st.lists(st.integers(-5, 1005), min_size=4, max_size=4), max_size=4)
_NAMES = st.sampled_from([t["function"]["name"] for t in tool_schemas()] + ["nope", ""])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, arguments=_ARGS)
async def test_random_arguments_never_give_a_5xx(client, name, arguments):
    sid = await _session(client, images=[_png_b64((1, 2, 3))])
    r = await client.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": arguments})
    body = await r.json()
    assert r.status < 500, body
    if r.status != 200:
        assert set(body["error"]) == {"type", "message", "field"}


def test_cli_starts_prints_its_address_and_reports_bad_worlds(small_world, tmp_path):
    bad = subprocess.run(
        [sys.executable, "-m", "tool_server", "--world", str(tmp_path / "none"), "--port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "error: --world: " in bad.stderr and "not a world" in bad.stderr
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    stderr = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tool_server",
            "--world",
            str(small_world),
            "--port",
            "0",
            "--no-ocr",
            "--cache-dir",
            str(default_cache_dir() / "tool-server"),
            "--mei-log",
            str(tmp_path / "mei.jsonl"),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"tool_server listening on (http://127\.0\.0\.1:\d+) world ([0-9a-f]{16})", line)
        assert m, line
        with urllib.request.urlopen(m.group(1) + "/healthz", timeout=30) as resp:
            assert json.load(resp)["world"].startswith(m.group(2))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        stderr.close()
    log = (tmp_path / "stderr").read_text()
    assert " DEBUG " not in log, log  # the default --log-level INFO holds for libraries that set their own level


async def test_mei_backed_results_are_cached_per_mei_version(client):
    """A new MEI checkpoint answers afresh: once v1 is activated, a new session (fixed to v1) is not served
    WebVisit's v0 entry, while the v0 session keeps it and TextSearch (no MEI) keeps its entry for both."""
    sid = await _session(client)
    args = {"url": [f"{ORIGIN}/wiki/France"], "goal": "What is the capital of France?"}
    first = await _call(client, sid, "WebVisit", args)
    assert (await _call(client, sid, "WebVisit", args))["cached"] is True
    await _call(client, sid, "TextSearch", {"query": ["Mexico"]})
    assert (await client.post("/admin/mei_version", json={"version": "v1"})).status == 200  # a checkpoint swap
    new = await _session(client)
    fresh = await _call(client, new, "WebVisit", args)
    assert fresh["cached"] is False and fresh["mei"][0]["call_id"] != first["mei"][0]["call_id"]
    assert fresh["mei"][0]["version"] == "v1"
    assert (await _call(client, new, "WebVisit", args))["cached"] is True
    assert (await _call(client, sid, "WebVisit", args))["mei"] == first["mei"]  # the v0 session: its own version
    assert (await _call(client, new, "TextSearch", {"query": ["Mexico"]}))["cached"] is True


def test_cli_checks_its_port_before_loading_the_world(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        # the world does not exist either: the port, checked first, is what is reported
        bad = subprocess.run(
            [sys.executable, "-m", "tool_server", "--world", str(tmp_path / "none"), "--port", str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert bad.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in bad.stderr
    assert "not a world" not in bad.stderr
