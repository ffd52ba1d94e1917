"""Model-backed MEI against a real OpenAI-compatible HTTP endpoint on loopback: valid, malformed, truncated, slow and
failing answers, each leading to its documented outcome, counter and log record."""

import asyncio
import base64
import hashlib
import json

import pytest
from aiohttp import web

from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of, load_images
from tool_server.mei.schema import ImageView, MEIContext, PageView

PAGE = PageView(
    url="https://neos-world.invalid/wiki/Eiffel_Tower",
    title="Eiffel Tower",
    text="The Eiffel Tower was designed by Gustave Eiffel's company.\n\nBerlin is in Germany.",
    images=[ImageView(url="https://neos-world.invalid/media/a.png", caption="Eiffel Tower", alt="tower")],
)
CTX = MEIContext(session_id="s1", turn=2, tool="WebVisit")
GOOD = {
    "rational": "The page names the designer.",
    "evidence": "The Eiffel Tower was designed by Gustave Eiffel's company.",
    "summary": "Designed by Gustave Eiffel's company.",
    "relevant_images": [{"alt": "tower", "url": "https://neos-world.invalid/media/a.png", "caption": "The tower"}],
}


class FakeModelServer:
    """Answers each POST with the next scripted reply: ("content", str) | ("status", int) | ("slow", str); the
    ``model`` field of answers is ``served`` when set (a checkpoint version, as our MEI server reports it)."""

    def __init__(self) -> None:
        self.served: str | None = None
        self.script: list[tuple[str, object]] = []
        self.requests: list[dict] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        kind, value = self.script.pop(0)
        if kind == "status":
            return web.Response(status=value, text="overloaded")
        if kind == "slow":
            await self.release.wait()  # held until the test ends; the client times out first
        body = {"choices": [{"message": {"role": "assistant", "content": value}, "finish_reason": "stop"}]}
        if self.served is not None:
            body["model"] = self.served
        return web.json_response(body)


@pytest.fixture
async def server():
    fake = FakeModelServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}/v1"
    yield fake
    fake.release.set()
    await runner.cleanup()


def make(server, tmp_path, **kw):
    cfg = MEIConfig(endpoint=server.url, model="mei-test", version="mei-v7", timeout_s=kw.pop("timeout_s", 5.0),
                    max_retries=2, retry_backoff_s=0, ocr=False, log_path=tmp_path / "mei.jsonl", **kw)
    return build_interface(cfg)


async def test_valid_answer_is_logged_with_call_id(server, tmp_path):
    server.script = [("content", json.dumps(GOOD))]
    mei = make(server, tmp_path)
    call = await mei.web_visit(goal="Who designed the Eiffel Tower?", page=PAGE, ctx=CTX)
    await mei.close()
    assert call.outcome == "valid" and call.version == mei.version == "mei-v7"  # the server reported no version
    assert call.evidence.summary == GOOD["summary"]
    req = server.requests[0]
    assert req["model"] == "mei-test" and req["response_format"] == {"type": "json_object"}
    assert "Who designed the Eiffel Tower?" in req["messages"][1]["content"]
    [rec] = MEILog.read(tmp_path / "mei.jsonl").records
    assert (rec.call_id, rec.outcome, rec.session_id, rec.turn, rec.tool, rec.mei_version) == (
        call.call_id, "valid", "s1", 2, "WebVisit", "mei-v7")
    assert rec.input["goal"] == "Who designed the Eiffel Tower?" and rec.input["page"]["url"] == PAGE.url
    assert rec.output == GOOD
    counters = mei.counters()
    assert (counters["calls"], counters["valid"], counters["fallback"]) == (1, 1, 0)


async def test_malformed_json_is_repaired(server, tmp_path):
    server.script = [("content", "```json\n" + json.dumps(GOOD)[:-1] + ",}\n```")]
    mei = make(server, tmp_path)
    call = await mei.web_visit(goal="designer", page=PAGE, ctx=CTX)
    await mei.close()
    assert call.outcome == "repaired" and call.evidence.evidence == GOOD["evidence"]
    assert mei.counters()["repaired"] == 1


async def test_truncated_then_valid_is_retried(server, tmp_path):
    truncated = json.dumps(GOOD)[:60]  # cut inside "evidence": repair cannot supply summary / relevant_images
    server.script = [("content", truncated), ("content", json.dumps(GOOD))]
    mei = make(server, tmp_path)
    call = await mei.web_visit(goal="designer", page=PAGE, ctx=CTX)
    await mei.close()
    assert call.outcome == "retried"
    c = mei.counters()
    assert (c["invalid"], c["retried"]) == (1, 1)
    [rec] = MEILog.read(tmp_path / "mei.jsonl").records
    assert rec.attempts[0].startswith("invalid") and rec.attempts[1] == "valid"


async def test_slow_answer_times_out_then_retries(server, tmp_path):
    server.script = [("slow", json.dumps(GOOD)), ("content", json.dumps(GOOD))]
    mei = make(server, tmp_path, timeout_s=0.2)
    call = await mei.web_visit(goal="designer", page=PAGE, ctx=CTX)
    await mei.close()
    assert call.outcome == "retried"
    assert mei.counters()["timeout"] == 1


async def test_http_errors_fall_back_to_extractive(server, tmp_path):
    server.script = [("status", 500)] * 3
    mei = make(server, tmp_path)
    call = await mei.web_visit(goal="Who designed the Eiffel Tower?", page=PAGE, ctx=CTX)
    await mei.close()
    assert call.outcome == "fallback" and call.version == "mei-v7"
    assert "Extractive" in call.evidence.rational
    assert call.evidence.evidence == "The Eiffel Tower was designed by Gustave Eiffel's company."
    c = mei.counters()
    assert (c["http_error"], c["fallback"], c["calls"]) == (3, 1, 1)
    assert len(server.requests) == 3  # 1 + max_retries


async def test_hallucinated_image_url_and_bad_index_are_rejected(server, tmp_path):
    bad = dict(GOOD, relevant_images=[{"alt": "x", "url": "https://neos-world.invalid/media/zzz.png", "caption": "x"}])
    server.script = [("content", json.dumps(bad))] * 3
    mei = make(server, tmp_path)
    assert (await mei.web_visit(goal="designer", page=PAGE, ctx=CTX)).outcome == "fallback"
    cands = [ImageView(url="https://neos-world.invalid/media/a.png", caption="tower")]
    out_of_range = {"rational": "r", "candidates": [{"index": 1, "relevance": "high", "caption": "c"}]}
    server.script = [("content", json.dumps(out_of_range))] * 3
    call = await mei.image_search(goal="tower", query="tower", candidates=cands, ctx=CTX)
    await mei.close()
    assert call.outcome == "fallback" and call.evidence.candidates[0].index == 0
    assert mei.counters()["invalid"] == 6


async def test_reverse_search_sends_query_image_first(server, tmp_path):
    q = ImageView(url="https://neos-world.invalid/media/q.png", png=b"QUERY")
    cands = [ImageView(url="https://neos-world.invalid/media/c0.png", png=b"CAND0"),
             ImageView(url="https://neos-world.invalid/media/c1.png")]  # no pixels: metadata only
    answer = {"rational": "r", "candidates": [{"index": 0, "match_state": "visual_match", "caption": "same"}]}
    server.script = [("content", json.dumps(answer))]
    mei = make(server, tmp_path)
    call = await mei.reverse_image_search(goal="same place?", query_image=q, candidates=cands, ctx=CTX)
    await mei.close()
    assert call.evidence.candidates[0].match_state == "visual_match"
    parts = server.requests[0]["messages"][1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(b).decode() for b in (b"QUERY", b"CAND0")]
    [rec] = MEILog.read(tmp_path / "mei.jsonl").records
    assert rec.input["candidates"][1]["png_sha256"] is None and rec.input["query_image"]["png_sha256"]


async def test_served_version_and_sent_messages_are_logged(server, tmp_path):
    """The version is the one the answering server reported (not the configured one), per call; the messages the
    model was sent are logged with images moved into the blob store and come back byte-identical."""
    q = ImageView(url="https://neos-world.invalid/media/q.png", png=b"QUERY")
    cands = [ImageView(url="https://neos-world.invalid/media/c0.png", png=b"CAND0")]
    answer = {"rational": "r", "candidates": [{"index": 0, "match_state": "visual_match", "caption": "same"}]}
    mei = make(server, tmp_path)
    server.served, server.script = "mei-v0", [("content", json.dumps(answer))]
    first = await mei.reverse_image_search(goal="same?", query_image=q, candidates=cands, ctx=CTX)
    server.served, server.script = "mei-v1", [("content", "not json")] * 3
    second = await mei.reverse_image_search(goal="same?", query_image=q, candidates=cands, ctx=CTX)
    await mei.close()
    assert (first.version, second.version, second.outcome) == ("mei-v0", "mei-v1", "fallback")
    recs = MEILog.read(tmp_path / "mei.jsonl").records
    assert [r.mei_version for r in recs] == ["mei-v0", "mei-v1"]
    logged = recs[0].messages[1]["content"]
    assert [p["image_url"]["url"] for p in logged if p["type"] == "image_url"] == [
        "blob:sha256:" + hashlib.sha256(b).hexdigest() for b in (b"QUERY", b"CAND0")]
    blobs = BlobStore(blobs_dir_of(tmp_path / "mei.jsonl"))
    assert load_images(recs[0].messages, blobs) == server.requests[0]["messages"]

