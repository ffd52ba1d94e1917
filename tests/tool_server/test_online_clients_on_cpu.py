"""Online backend clients against a replay server on loopback serving recorded response shapes (fixtures/)."""

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiohttp import web

from tool_server.online import (
    BackendError,
    ImageResult,
    LensClient,
    ReaderClient,
    RetryPolicy,
    SerpClient,
    TextResult,
    TokenBucket,
)

FIXTURES = Path(__file__).parent / "fixtures"
FAST = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.01)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class Replay:
    """Per path, a script of replies: ("json", fixture name) | ("status", code) | ("raw", text) | ("hang", None)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[tuple[str, object]]] = {}
        self.seen: list[web.Request] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request)
        key = "/search.json" if request.path == "/search.json" else "/reader"
        kind, value = self.scripts[key].pop(0)
        if kind == "json":
            return web.Response(text=fixture(value), content_type="application/json")
        if kind == "status":
            return web.Response(status=value, text="slow down", headers={"Retry-After": "0"} if value == 429 else {})
        if kind == "raw":
            return web.Response(text=value, content_type="application/json")
        await self.release.wait()
        return web.Response(text="{}")


@pytest.fixture
async def replay(loopback):
    r = Replay()
    r.base = await loopback(r.handle)
    yield r
    r.release.set()  # before the server stops: hanging handlers return


async def test_web_and_image_search_map_records(replay):
    replay.scripts["/search.json"] = [("json", "serp_web.json"), ("json", "serp_images.json")]
    serp = SerpClient(replay.base, "KEY", retry=FAST, rate_per_s=None)
    web_results = await serp.web_search("eiffel tower architect", k=10)
    images = await serp.image_search("eiffel tower")
    await serp.close()
    assert web_results == [
        TextResult("Eiffel Tower - Wikipedia", "https://en.wikipedia.org/wiki/Eiffel_Tower",
                   "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris."),
        TextResult("Gustave Eiffel", "https://en.wikipedia.org/wiki/Gustave_Eiffel",
                   "Alexandre Gustave Eiffel was a French civil engineer."),
    ]  # the item without a link is dropped
    assert images[0] == ImageResult("https://upload.wikimedia.org/tour_eiffel_night.jpg", "Eiffel Tower at night",
                                    "https://commons.wikimedia.org/wiki/File:Tour_Eiffel_night.jpg")
    assert len(images) == 2
    q = replay.seen[0].query
    assert (q["engine"], q["q"], q["api_key"], q["num"]) == ("google", "eiffel tower architect", "KEY", "10")
    assert replay.seen[1].query["engine"] == "google_images"


async def test_lens_and_reader(replay):
    replay.scripts["/search.json"] = [("json", "lens.json")]
    replay.scripts["/reader"] = [("json", "reader.json")]
    lens = LensClient(replay.base, "KEY", retry=FAST, rate_per_s=None)
    matches = await lens.reverse("https://example.org/query.jpg")
    await lens.close()
    assert [m.url for m in matches] == ["https://example.org/eiffel.jpg", "https://thumbs.example/lens2.jpg"]
    assert matches[1].source_page_url == "https://example.jp/tokyo"
    assert replay.seen[0].query["url"] == "https://example.org/query.jpg"
    reader = ReaderClient(replay.base, "RKEY", retry=FAST, rate_per_s=None)
    page = await reader.read("https://en.wikipedia.org/wiki/Eiffel_Tower")
    await reader.close()
    assert page.title == "Eiffel Tower" and page.text.startswith("# Eiffel Tower\n\nThe Eiffel Tower")
    assert replay.seen[1].headers["Authorization"] == "Bearer RKEY"
    assert replay.seen[1].path.endswith("/en.wikipedia.org/wiki/Eiffel_Tower")


async def test_429_then_200_and_5xx_then_200_are_retried(replay):
    replay.scripts["/search.json"] = [("status", 429), ("json", "serp_web.json"), ("status", 503), ("status", 500),
                                      ("json", "serp_web.json")]
    serp = SerpClient(replay.base, "KEY", retry=FAST, rate_per_s=None)
    assert len(await serp.web_search("x")) == 2
    assert len(await serp.web_search("x")) == 2
    assert serp.http.retries == 3
    await serp.close()


@pytest.mark.parametrize("script,kind", [
    ([("status", 500)] * 3, "http_error"),           # retries exhausted
    ([("status", 429)] * 3, "rate_limited"),
    ([("status", 403)], "http_error"),               # not retried
    ([("raw", "{not json")], "malformed"),
    ([("raw", '{"organic_results": {"a": 1}}')], "malformed"),
    ([("json", "serp_error.json")], "api_error"),
    ([("hang", None)] * 3, "timeout"),
])
async def test_failures_are_structured(replay, script, kind):
    replay.scripts["/search.json"] = list(script)
    serp = SerpClient(replay.base, "KEY", retry=FAST, rate_per_s=None, timeout_s=0.2)
    with pytest.raises(BackendError) as e:
        await serp.web_search("x")
    await serp.close()
    assert e.value.kind == kind
    assert len(replay.seen) == len(script)  # 403 / malformed: one request; retryable: 1 + max_retries


async def test_reader_malformed_and_missing_config(replay, monkeypatch):
    replay.scripts["/reader"] = [("raw", json.dumps({"code": 200, "data": {"title": "x"}}))]
    reader = ReaderClient(replay.base, retry=FAST, rate_per_s=None)
    with pytest.raises(BackendError) as e:
        await reader.read("https://example.org/")
    await reader.close()
    assert e.value.kind == "malformed"
    monkeypatch.delenv("NEOS_SERP_API_KEY", raising=False)
    monkeypatch.setenv("NEOS_SERP_BASE_URL", replay.base)
    with pytest.raises(BackendError) as e:
        SerpClient.from_env()
    assert e.value.kind == "config" and "NEOS_SERP_API_KEY" in str(e.value)


async def test_token_bucket_waits_for_tokens():
    now = [0.0]
    sleeps: list[float] = []

    async def fake_sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    bucket = TokenBucket(rate=10.0, burst=2, clock=lambda: now[0], sleep=fake_sleep)
    for _ in range(4):
        await bucket.acquire()
    assert sleeps == pytest.approx([0.1, 0.1])  # the burst of 2 is free, then one token per 1/rate seconds
    now[0] += 10  # long idle: refills to the burst, not beyond
    sleeps.clear()
    for _ in range(3):
        await bucket.acquire()
    assert sleeps == pytest.approx([0.1])


def test_backoff_grows_with_jitter_and_honours_retry_after():
    p = RetryPolicy(max_retries=5, base_delay_s=1.0, max_delay_s=5.0)
    rng = random.Random(0)
    delays = [p.delay(n, None, rng) for n in range(5)]
    for n, d in enumerate(delays):
        cap = min(5.0, 2.0**n)
        assert cap * 0.5 <= d <= cap
    assert p.delay(0, "3", rng) == 3.0 and p.delay(0, "60", rng) == 5.0
