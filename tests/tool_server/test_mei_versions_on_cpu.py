"""One MEI version per trajectory (Neos §3.5) through the real tool server, its result cache and a model MEI on
loopback: the version is fixed when a session is created (the active one, learned from the admin call), cache entries
are keyed by it, a checkpoint activated between two calls of one session never reaches that session, and a fallback
answer is never cached as a model result."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tool_server.app import RUNNER, SESSIONS, ServerSettings, create_app
from tool_server.cache import TieredCache
from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.log import MEILog

ORIGIN = "https://neos-world.invalid"
WEB = {"rational": "The page names the capital.", "evidence": "Paris is the capital.", "summary": "Paris",
       "relevant_images": []}


class ScriptedMEIServer:
    """A chat-completions endpoint answering valid WebVisit JSON under ``served`` (as our MEI server reports its
    checkpoint in ``model``), or HTTP 500 while ``down``; counts the requests."""

    def __init__(self) -> None:
        self.served = "v0"
        self.answer = WEB
        self.down = False
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.down:
            return web.Response(status=500, text="down")
        return web.json_response({"model": self.served,
                                  "choices": [{"message": {"role": "assistant", "content": json.dumps(self.answer)}}]})


@pytest.fixture
async def setup(world, loopback, tmp_path):
    model = ScriptedMEIServer()
    url = await loopback(model.handle, "POST")
    mei = build_interface(MEIConfig(endpoint=f"{url}/v1", max_retries=1, retry_backoff_s=0, ocr=False,
                                    log_path=tmp_path / "mei.jsonl", fsync_every=1))
    app = create_app(world=world, mei=mei, cache=TieredCache.from_config(memory_items=100),
                     settings=ServerSettings(max_register_images=8))
    async with TestClient(TestServer(app)) as client:
        yield client, model, app, tmp_path / "mei.jsonl"


async def _session(c, **body) -> dict:
    r = await c.post("/v1/sessions", json=body)
    assert r.status == 200
    return await r.json()


async def _visit(c, sid: str, page: str, turn: int) -> tuple[int, dict]:
    r = await c.post(f"/v1/sessions/{sid}/call", json={"name": "WebVisit", "turn": turn, "arguments": {
        "url": [f"{ORIGIN}/wiki/{page}"], "goal": "capital of France"}})
    return r.status, await r.json()


async def test_activation_between_two_calls_of_one_session(setup):
    c, model, app, log_path = setup
    assert (await (await c.get("/admin/mei_version")).json())["version"] is None  # nothing activated or heard yet
    r = await c.post("/admin/mei_version", json={"version": "v0"})
    assert await r.json() == {"version": "v0", "previous": None, "interface": "model"}

    old = await _session(c)
    assert old["mei_version"] == "v0"
    status, first = await _visit(c, old["session_id"], "France", 0)
    assert status == 200 and [(m["version"], m["outcome"]) for m in first["mei"]] == [("v0", "valid")]
    assert not first["cached"] and model.requests == 1

    # the trainer activates v1: the MEI server answers as v1 from now on, and the tool server is told
    model.served = "v1"
    assert await (await c.post("/admin/mei_version", json={"version": "v1"})).json() == {"version": "v1",
                                                                                         "previous": "v0", "interface": "model"}
    # the old session keeps v0: its v0 entry may serve it, and a new answer (now v1) is refused, not mixed in
    status, again = await _visit(c, old["session_id"], "France", 1)
    assert status == 200 and again["cached"] and again["mei"] == first["mei"]
    status, refused = await _visit(c, old["session_id"], "Paris", 2)
    assert status == 503 and refused["error"]["type"] == "mei_version_changed"
    assert model.requests == 2

    # a new session is fixed to v1: the v0 entry for the same arguments is never served to it
    new = await _session(c)
    assert new["mei_version"] == "v1"
    status, fresh = await _visit(c, new["session_id"], "France", 0)
    assert status == 200 and not fresh["cached"] and [m["version"] for m in fresh["mei"]] == ["v1"]
    assert model.requests == 3
    # ... and a session may be fixed explicitly (the version the trainer put in its request)
    assert (await _session(c, mei_version="v0"))["mei_version"] == "v0"

    counters = app[RUNNER].ctx.mei.counters()
    assert (counters["version_mismatch"], counters["activations"], counters["valid"]) == (1, 2, 2)
    records = MEILog.read(log_path).records
    assert [(r.mei_version, r.outcome) for r in records] == [("v0", "valid"), ("v1", "error"), ("v1", "valid")]


async def test_a_fallback_answer_is_not_cached_as_the_models(setup):
    c, model, app, _ = setup
    await c.post("/admin/mei_version", json={"version": "v0"})
    sid = (await _session(c))["session_id"]
    model.down = True
    status, fallback = await _visit(c, sid, "France", 0)
    assert status == 200 and [(m["version"], m["outcome"]) for m in fallback["mei"]] == [("v0", "fallback")]
    model.down = False  # the MEI recovered: the same call is answered by the model, not by the cached fallback
    status, recovered = await _visit(c, sid, "France", 1)
    assert status == 200 and not recovered["cached"]
    assert [m["outcome"] for m in recovered["mei"]] == ["valid"]
    status, cached = await _visit(c, sid, "France", 2)
    assert cached["cached"] and cached["mei"] == recovered["mei"]  # a model result is cached as before


async def test_an_unannounced_version_is_fixed_by_the_sessions_first_answer(setup):
    """No activation and no version configured: the session starts unfixed, its MEI calls run uncached, and the first
    answer fixes it (and becomes the server's active version for later sessions)."""
    c, model, app, _ = setup
    model.served = "v3"
    created = await _session(c)
    assert created["mei_version"] is None
    status, body = await _visit(c, created["session_id"], "France", 0)
    assert status == 200 and [m["version"] for m in body["mei"]] == ["v3"]
    assert app[SESSIONS].get(created["session_id"]).mei_version == "v3"
    assert (await _session(c))["mei_version"] == "v3"
    r = await c.post("/admin/mei_version", json={"version": ""})
    assert r.status == 400 and (await r.json())["error"]["field"] == "version"


async def test_the_trainers_announcement_reaches_the_tool_server(setup):
    """``verl_ext.mei.server.announce``, what the trainer calls after the MEI server loads a checkpoint."""
    from verl_ext.mei.server import announce

    c, _, _, _ = setup
    url = str(c.make_url("")).rstrip("/")
    assert await announce(url, "v5") == "v5"
    assert (await _session(c))["mei_version"] == "v5"
    with pytest.raises(RuntimeError, match="refused MEI version"):
        await announce(url, "")


async def test_entries_of_the_earlier_key_format_are_never_read(setup):
    """A disk or shared cache written before fallbacks were kept out may hold fallbacks under ``WebVisit@mei=v0``:
    the key format changed, so they are never served (an entry under the current format is, as a control)."""
    from tool_server.app import CACHE
    from tool_server.cache import cache_key

    c, model, app, _ = setup
    await c.post("/admin/mei_version", json={"version": "v0"})
    sid = (await _session(c))["session_id"]

    def args(page: str) -> dict:
        return {"url": [f"{ORIGIN}/wiki/{page}"], "goal": "capital of France"}

    stale = b'{"text":"stale","records":[],"mei":[{"call_id":"old","version":"v0"}]}'
    await app[CACHE].set(cache_key("WebVisit@mei=v0", args("France")), stale)
    await app[CACHE].set(cache_key("WebVisit@mei:v0", args("Paris")), stale)
    status, body = await _visit(c, sid, "France", 0)
    assert status == 200 and not body["cached"] and body["text"] != "stale" and model.requests == 1
    status, body = await _visit(c, sid, "Paris", 1)
    assert body["cached"] and body["text"] == "stale" and model.requests == 1


async def test_two_runs_sharing_one_cache_never_get_each_others_answers(world, loopback, tmp_path):
    """Run A and run B (each with its own MEI buffer, as the trainer makes it) train their first MEI and announce it;
    their tool servers share one directory cache tier. Run B's WebVisit must reach run B's MEI, not come from the
    entry run A's MEI left under the same arguments (bare ``v1`` names made them one key)."""
    from verl_ext.mei.buffer import MEIBuffer
    from verl_ext.mei.server import announce

    versions, answers = [], []
    for run in ("A", "B"):
        buffer = MEIBuffer(tmp_path / f"run-{run}")
        version = buffer.next_version()  # the name the trainer gives its first trained MEI (_update_mei)
        buffer.close()
        model = ScriptedMEIServer()
        model.served, model.answer = version, {**WEB, "summary": f"Paris, says run {run}'s MEI"}
        url = await loopback(model.handle, "POST")
        mei = build_interface(MEIConfig(endpoint=f"{url}/v1", max_retries=1, retry_backoff_s=0, ocr=False,
                                        log_path=tmp_path / f"mei-{run}.jsonl", fsync_every=1))
        cache = TieredCache.from_config(memory_items=100, shared_dir=tmp_path / "shared-cache")
        app = create_app(world=world, mei=mei, cache=cache, settings=ServerSettings(max_register_images=8))
        async with TestClient(TestServer(app)) as c:
            await announce(str(c.make_url("")).rstrip("/"), version)
            status, body = await _visit(c, (await _session(c))["session_id"], "France", 0)
        assert status == 200 and not body["cached"] and model.requests == 1, (run, body)
        assert [m["version"] for m in body["mei"]] == [version]
        versions.append(version)
        answers.append(json.dumps(body))
    assert versions[0] != versions[1]
    assert "run A's MEI" in answers[0] and "run B's MEI" in answers[1] and "run A's MEI" not in answers[1]


async def test_a_tool_server_without_a_model_mei_refuses_the_trainers_announcement(client):
    """A tool server started without --mei-endpoint answers with the extractive interface: co-evolution would train
    checkpoints no call ever reaches while logging every call under the announced version."""
    from verl_ext.mei.server import announce

    assert (await (await client.get("/admin/mei_version")).json())["interface"] == "extractive"
    with pytest.raises(RuntimeError, match=r"extractive interface, not a model MEI: trainer\.v1\.neos\.mei\.enable=true "
                       r"needs it started with --mei-endpoint"):
        await announce(str(client.make_url("")).rstrip("/"), "v0")
