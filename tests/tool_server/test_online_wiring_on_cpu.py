"""Online backends wired into both protocols' tools, against one replay server on 127.0.0.1 that plays the SERP API
(web, image and Lens engines), a page-reader service and the web (an HTML page and a PNG).

The replay's Lens engine does what the real one does: it GETs the query image URL it is given, so a session image
must really be served at the tool server's public URL while the search runs. Page and image fetches of the tool
server go through SafeFetcher, which lets through the replay server's own (address, port) only: every other
loopback port, private and link-local address stays refused, also for URLs handed to the reader.
"""

from __future__ import annotations

import base64
import io

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from PIL import Image

from neos_core.ports import free_local_port
from tool_server.app import RUNNER, create_app
from tool_server.cache import TieredCache
from tool_server.mei import MEIConfig, build_interface
from tool_server.net import SafeFetcher
from tool_server.offline.world import resource_id
from tool_server.online import LensClient, ReaderClient, RetryPolicy
from tool_server.online.public import PublicImages
from tool_server.online.web import OnlineBackends

HTML = """<html><head><title>Ada Lovelace | Replay</title></head><body>
<p>Ada Lovelace wrote the first published algorithm.</p><p>She was born in London in 1815.</p>
<img src="/portrait.png" alt="portrait of Ada"></body></html>"""
NO_RETRY = RetryPolicy(max_retries=0)


def _png(size: tuple[int, int] = (6, 4), colour: tuple[int, int, int] = (10, 200, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


class Replay:
    """``hits`` counts requests per engine / path; ``lens_fetched`` holds what the Lens engine downloaded."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.lens_urls: list[str] = []
        self.lens_fetched: list[tuple[int, bytes]] = []
        self.reader_paths: list[str] = []
        self.reader_fails = False
        self.base = ""

    def _hit(self, key: str) -> None:
        self.hits[key] = self.hits.get(key, 0) + 1

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        if path == "/search.json":
            engine = request.query["engine"]
            self._hit(engine)
            assert request.query["api_key"] == "KEY"
            if engine == "google":
                results = [{"title": "Ada Lovelace", "link": f"{self.base}/ada", "snippet": "English mathematician."}]
                return web.json_response({"organic_results": results})
            if engine == "google_images":
                image = {"original": f"{self.base}/portrait.png", "title": "Portrait of Ada", "link": f"{self.base}/ada"}
                results = [image]
                return web.json_response({"images_results": results})
            url = request.query["url"]
            self.lens_urls.append(url)
            async with aiohttp.ClientSession() as http, http.get(url) as r:  # the API downloads the query image
                self.lens_fetched.append((r.status, await r.read()))
            match = {"title": "Ada Lovelace - Replay", "link": f"{self.base}/ada", "image": f"{self.base}/portrait.png"}
            return web.json_response({"visual_matches": [match]})
        if path.startswith("/reader/"):
            self._hit("reader")
            self.reader_paths.append(request.raw_path)
            if self.reader_fails:
                return web.Response(status=500, text="reader down")
            content = (
                "# Ada Lovelace\n\nAccording to the reader, Ada Lovelace was born on 10 December 1815.\n\n"
                f"![Portrait of Ada]({self.base}/portrait.png)"
            )
            return web.json_response({"data": {"title": "Ada Lovelace (reader)", "url": f"{self.base}/ada",
                                               "content": content}})
        self._hit(path)
        if path == "/ada":
            return web.Response(text=HTML, content_type="text/html")
        if path == "/portrait.png":
            return web.Response(body=_png(), content_type="image/png")
        return web.Response(status=404, text="no such page")


@pytest.fixture
async def replay(loopback):
    r = Replay()
    r.base = await loopback(r.handle)
    r.port = int(r.base.rsplit(":", 1)[1])
    return r


@pytest.fixture
async def serve(world, tmp_path, replay):
    """``await serve(public=..., reader=...)`` -> a TestClient of an online tool server wired to the replay."""
    clients: list[TestClient] = []

    async def start(*, public: bool = True, reader: bool = False) -> TestClient:
        port = free_local_port()
        search = LensClient(replay.base, "KEY", rate_per_s=None, retry=NO_RETRY)
        online = OnlineBackends(
            SafeFetcher(allowed_endpoints=[("127.0.0.1", replay.port)], timeout_s=5),
            search,
            lens=search,
            reader=ReaderClient(f"{replay.base}/reader", rate_per_s=None, retry=NO_RETRY) if reader else None,
            public=PublicImages(f"http://127.0.0.1:{port}") if public else None,
        )
        mei = build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False))
        app = create_app(world=world, mei=mei, cache=TieredCache.from_config(memory_items=100), online=online)
        client = TestClient(TestServer(app, host="127.0.0.1", port=port))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def _session(client: TestClient, **body) -> str:
    r = await client.post("/v1/sessions", json=body)
    assert r.status == 200, await r.text()
    return (await r.json())["session_id"]


async def _call(client: TestClient, sid: str, name: str, arguments: dict) -> tuple[int, dict]:
    r = await client.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": arguments})
    return r.status, await r.json()


async def test_text_and_image_search_of_both_protocols_go_to_the_search_api(serve, replay):
    client = await serve()
    sid = await _session(client)
    status, text = await _call(client, sid, "TextSearch", {"query": ["ada lovelace"]})
    assert status == 200 and text["records"][0]["results"][0]["url"] == f"{replay.base}/ada"
    status, images = await _call(client, sid, "ImageSearch", {"query": ["ada portrait"], "goal": "Ada's face"})
    assert status == 200, images
    (candidate,) = images["records"][0]["candidates"]
    assert (candidate["image_id"], candidate["url"], candidate["caption"], candidate["source_url"]) == (
        None, f"{replay.base}/portrait.png", "Portrait of Ada", f"{replay.base}/ada"
    )
    status, t2t = await _call(client, sid, "t2t_search", {"query": "ada lovelace"})
    assert status == 200 and t2t["records"][0]["resource_id"] == resource_id("page", f"{replay.base}/ada")
    status, t2i = await _call(client, sid, "t2i_search", {"query": "ada portrait"})
    assert status == 200
    assert t2i["records"][0]["resource_id"] == resource_id("image", f"{replay.base}/portrait.png")
    assert t2i["records"][0]["page_resource_id"] == resource_id("page", f"{replay.base}/ada")
    # the ids of web results name those resources in later calls: read_url of the image id loads it
    status, loaded = await _call(client, sid, "read_url", {"url": t2i["records"][0]["resource_id"]})
    assert status == 200 and loaded["records"][0]["output_ref"] == "img_1", loaded
    assert (loaded["records"][0]["width"], loaded["records"][0]["height"]) == (6, 4)
    assert replay.hits == {"google": 2, "google_images": 2, "/portrait.png": 1}


async def test_reverse_search_of_a_session_image_serves_it_at_a_public_url_only_during_the_call(serve, replay):
    client = await serve(public=True)
    question = _png((8, 6), (200, 10, 10))
    sid = await _session(client, images=[base64.b64encode(question).decode()])
    status, found = await _call(client, sid, "ReverseImageSearch", {"image_token": ["img_1"], "goal": "who"})
    assert status == 200, found
    (candidate,) = found["records"][0]["candidates"]
    assert candidate["url"] == f"{replay.base}/portrait.png" and candidate["method"] == "reverse_image_api"
    assert candidate["pages"] == [{"title": "Ada Lovelace - Replay", "url": f"{replay.base}/ada"}]
    (public_url,) = replay.lens_urls
    assert public_url.startswith(f"{client.make_url('/v1/public-images/')}")
    status, fetched = replay.lens_fetched[0]
    assert status == 200 and Image.open(io.BytesIO(fetched)).getpixel((0, 0)) == (200, 10, 10)
    async with aiohttp.ClientSession() as http, http.get(public_url) as r:
        assert r.status == 404  # withdrawn once the search returned
    # i2i_search of a region: the API gets the crop, not the register image
    status, i2i = await _call(client, sid, "i2i_search", {"image": "img_1", "region": [0, 0, 500, 500]})
    assert status == 200 and i2i["records"][0]["page_url"] == f"{replay.base}/ada", i2i
    assert Image.open(io.BytesIO(replay.lens_fetched[1][1])).size == (4, 3)


async def test_reverse_search_by_web_url_hands_the_url_over_and_refuses_blocked_ones(serve, replay):
    client = await serve(public=False)
    sid = await _session(client, images=[base64.b64encode(_png()).decode()])
    web_url = f"{replay.base}/portrait.png"
    status, found = await _call(
        client, sid, "ReverseImageSearch",
        {"image_url": [web_url, "http://10.0.0.7/x.png"], "image_token": ["img_1"], "goal": "who"},
    )
    assert status == 200
    token, by_url, blocked = found["records"]
    assert token["error"]["type"] == "public_url_required" and "--public-base-url" in token["error"]["message"]
    assert by_url["candidates"][0]["url"] == web_url
    assert blocked["error"]["type"] == "blocked_url"
    assert replay.lens_urls == [web_url]  # the web image by its own URL; nothing else reached the API
    status, refused = await _call(client, sid, "i2i_search", {"image": "img_1"})
    assert status == 503 and refused["error"]["type"] == "public_url_required"
    assert refused["error"]["field"] == "arguments/image"


async def test_pages_are_read_through_the_reader_after_the_address_checks(serve, replay):
    client = await serve(reader=True)
    sid = await _session(client)
    other = free_local_port()  # loopback, but not the replay's port
    urls = [f"{replay.base}/ada", f"http://localhost:{other}/admin", "http://10.1.2.3/", "http://[::1]/x"]
    status, visit = await _call(client, sid, "WebVisit", {"url": urls, "goal": "when was Ada Lovelace born"})
    assert status == 200
    ok, *refused = visit["records"]
    assert "10 December 1815" in ok["evidence"] and ok["title"] == "Ada Lovelace (reader)"
    assert ok["page_images"] == [
        {"image_id": None, "url": f"{replay.base}/portrait.png", "alt": "Portrait of Ada", "caption": ""}
    ]
    assert [r["error"]["type"] for r in refused] == ["blocked_url"] * 3
    assert replay.hits["reader"] == 1 and "/ada" in replay.reader_paths[0]  # only the allowed URL was handed on
    assert "/ada" not in replay.hits  # the reader answered: no direct fetch
    status, page = await _call(client, sid, "read_url", {"url": resource_id("page", f"{replay.base}/ada")})
    assert status == 404  # a page id no result named yet is unknown
    await _call(client, sid, "t2t_search", {"query": "ada"})
    status, page = await _call(client, sid, "read_url", {"url": resource_id("page", f"{replay.base}/ada")})
    assert status == 200 and page["records"][0]["markdown"].startswith("# Ada Lovelace (reader)\n\n# Ada Lovelace")
    assert page["records"][0]["images"][0]["resource_id"] == resource_id("image", f"{replay.base}/portrait.png")


async def test_a_failing_reader_falls_back_to_a_direct_fetch(serve, replay, world):
    client = await serve(reader=True)
    replay.reader_fails = True
    sid = await _session(client)
    status, visit = await _call(client, sid, "WebVisit", {"url": [f"{replay.base}/ada"], "goal": "when born"})
    assert status == 200 and "born in London in 1815" in visit["records"][0]["evidence"], visit
    assert visit["records"][0]["title"] == "Ada Lovelace | Replay"  # the HTML page's own title
    assert replay.hits["reader"] == 1 and replay.hits["/ada"] == 1
    assert client.server.app[RUNNER].ctx.online.reader_fallbacks == 1
    metrics = await (await client.get("/metrics")).text()
    assert 'online_events_total{event="reader_fallbacks"} 1' in metrics
    assert 'online_events_total{event="reader_retries"} 0' in metrics  # NO_RETRY: the 500 was final


async def test_question_images_by_url_load_through_the_safe_fetcher(serve, replay):
    client = await serve()
    r = await client.post("/v1/sessions", json={"images": [f"{replay.base}/portrait.png"]})
    assert r.status == 200 and (await r.json())["images"] == ["img_1"]
    sid = (await r.json())["session_id"]
    status, crop = await _call(client, sid, "CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}})
    assert status == 200 and (crop["records"][0]["width"], crop["records"][0]["height"]) == (3, 2)
    # a question image loaded from the web is reverse-searched by its own URL, no public URL needed
    status, found = await _call(client, sid, "ReverseImageSearch", {"image_token": ["img_1"], "goal": "who"})
    assert status == 200 and replay.lens_urls == [f"{replay.base}/portrait.png"]
    for bad, kind, status_code in (
        ("http://10.0.0.1/a.png", "blocked_url", 403),
        (f"http://127.0.0.1:{free_local_port()}/a.png", "blocked_url", 403),
        (f"{replay.base}/missing.png", "not_found", 404),
    ):
        r = await client.post("/v1/sessions", json={"images": [f"{replay.base}/portrait.png", bad]})
        error = (await r.json())["error"]
        assert (r.status, error["type"], error["field"]) == (status_code, kind, "images/1")
