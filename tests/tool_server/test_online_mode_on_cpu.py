"""Online mode end to end: the HTTP app with online backends against a replay server on 127.0.0.1 that plays both
the search API (recorded JSON shape) and the web (pages and an image). Page and image fetches go through
SafeFetcher, so with the private network not allowed every fetch of the replay's pages (and of 10.x) is refused per
item with a 403-class ``blocked_url`` record, while the operator-configured search API still answers."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from tool_server.app import create_app
from tool_server.cache import TieredCache
from tool_server.errors import STATUS
from tool_server.mei import MEIConfig, build_interface
from tool_server.net import SafeFetcher
from tool_server.online import RetryPolicy, SerpClient
from tool_server.online.web import OnlineBackends

PAGE = """<html><head><title>Ada Lovelace | Replay</title><style>p {color: red}</style>
<script>var hidden = "never in the text";</script></head>
<body><h1>Ada Lovelace</h1><p>Ada Lovelace wrote the first published algorithm for the Analytical Engine.</p>
<p>She was born in London in 1815.</p><img src="/portrait.png" alt="portrait of Ada"></body></html>"""


def _png(mode: str = "RGB", colour: tuple[int, ...] = (10, 200, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (6, 4), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
async def replay(loopback):
    """The search API and the 'web' on one loopback server; ``hits`` counts requests per path."""
    hits: dict[str, int] = {}
    base = {}

    async def handle(request: web.Request) -> web.Response:
        hits[request.path] = hits.get(request.path, 0) + 1
        if request.path == "/search.json":
            results = [{"title": "Ada Lovelace", "link": f"{base['url']}/ada", "snippet": "English mathematician."}]
            return web.json_response({"organic_results": results})
        if request.path == "/ada":
            return web.Response(text=PAGE, content_type="text/html")
        if request.path == "/portrait.png":
            return web.Response(body=_png(), content_type="image/png")
        if request.path == "/clear.png":  # transparent, stored black (as Nepal's flag stores its page)
            return web.Response(body=_png("RGBA", (0, 0, 0, 0)), content_type="image/png")
        return web.Response(status=404, text="no such page")

    base["url"] = await loopback(handle)
    return base["url"], hits


async def _client(world, tmp_path, replay_url: str, *, allow_private: bool) -> TestClient:
    online = OnlineBackends(
        SafeFetcher(allow_private=allow_private, timeout_s=5),
        SerpClient(replay_url, "test-key", rate_per_s=None, retry=RetryPolicy(max_retries=0)),
    )
    mei = build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False))
    app = create_app(world=world, mei=mei, cache=TieredCache.from_config(memory_items=100), online=online)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def _call(client: TestClient, name: str, arguments: dict, **extra) -> tuple[int, dict]:
    sid = (await (await client.post("/v1/sessions", json={})).json())["session_id"]
    r = await client.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": arguments, **extra})
    return r.status, await r.json()


async def test_private_targets_are_refused_per_item_without_a_5xx(world, tmp_path, replay):
    base, hits = replay
    client = await _client(world, tmp_path, base, allow_private=False)
    try:
        status, found = await _call(client, "TextSearch", {"query": ["ada lovelace"]})
        assert status == 200 and found["records"][0]["results"][0]["url"] == f"{base}/ada"  # the API is configured
        status, visit = await _call(
            client, "WebVisit", {"url": [f"{base}/ada", "http://10.1.2.3/admin", "http://[::1]:9/x"], "goal": "who"}
        )
        assert status == 200
        errors = [r["error"]["type"] for r in visit["records"]]
        assert errors == ["blocked_url"] * 3 and STATUS["blocked_url"] == 403
        assert "Error (blocked_url)" in visit["text"]
        status, fetched = await _call(client, "FetchImage", {"urls": [f"{base}/portrait.png"]})
        assert status == 200 and fetched["records"][0]["error"]["type"] == "blocked_url" and not fetched["images"]
        status, reverse = await _call(client, "ReverseImageSearch", {"image_url": [f"{base}/portrait.png"], "goal": "x"})
        assert status == 200 and reverse["records"][0]["error"]["type"] == "blocked_url"
        assert set(hits) == {"/search.json"}  # no page or image request ever reached the replay server
    finally:
        await client.close()


async def test_allowed_private_network_reads_pages_and_loads_images(world, tmp_path, replay):
    base, hits = replay
    client = await _client(world, tmp_path, base, allow_private=True)
    try:
        status, visit = await _call(client, "WebVisit", {"url": [f"{base}/ada"], "goal": "when was Ada Lovelace born"})
        assert status == 200, visit
        record = visit["records"][0]
        assert record["title"] == "Ada Lovelace | Replay" and "1815" in record["evidence"]
        assert "never in the text" not in json.dumps(record)  # script text is not page text
        assert record["page_images"] == [
            {"image_id": None, "url": f"{base}/portrait.png", "alt": "portrait of Ada", "caption": ""}
        ]
        status, fetched = await _call(client, "FetchImage", {"urls": [f"{base}/portrait.png", f"{base}/gone.png"]})
        assert status == 200 and fetched["records"][0]["output_ref"] == "img_1"
        assert (fetched["records"][0]["width"], fetched["records"][0]["height"]) == (6, 4)
        assert fetched["records"][1]["error"]["type"] == "not_found"
        status, clear = await _call(client, "FetchImage", {"urls": [f"{base}/clear.png"]}, include_pixels=True)
        assert status == 200, clear
        pixels = Image.open(io.BytesIO(base64.b64decode(clear["images"][0]["png_base64"])))
        assert pixels.convert("RGB").getpixel((0, 0)) == (255, 255, 255)  # on white, as a page shows it; was black
        status, world_page = await _call(
            client, "WebVisit", {"url": ["https://neos-world.invalid/wiki/Mexico"], "goal": "capital"}
        )
        assert status == 200 and "Mexico City" in world_page["records"][0]["evidence"]  # world URLs stay offline
        assert hits["/ada"] == 1
    finally:
        await client.close()


def test_cli_online_switches(small_world, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = [sys.executable, "-m", "tool_server", "--world", str(small_world), "--port", "0"]
    repo = Path(__file__).resolve().parents[2]
    missing = subprocess.run([*run, "--online"], capture_output=True, text=True, env=env, cwd=repo, timeout=120, check=False)
    assert missing.returncode == 1 and "NEOS_SERP_BASE_URL" in missing.stderr
    lone = subprocess.run(
        [*run, "--allow-private-network"], capture_output=True, text=True, env=env, cwd=repo, timeout=120, check=False
    )
    assert lone.returncode == 2 and "only applies with --online" in lone.stderr
    public = subprocess.run(
        [*run, "--public-base-url", "https://tools.example"], capture_output=True, text=True, env=env, cwd=repo,
        timeout=120, check=False,
    )
    assert public.returncode == 2 and "--public-base-url only applies with --online" in public.stderr
