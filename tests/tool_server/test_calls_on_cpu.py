"""Checked call bodies and their memo (tool_server.calls), and JSON errors for requests no route takes."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from tool_server.app import CALLS
from tool_server.calls import CallMemo, ToolCall, parse_call
from tool_server.errors import ToolError


def _call(name: str = "TextSearch") -> ToolCall:
    return ToolCall(name, {"query": ["x"]}, None, False)


def test_memo_keeps_the_most_recently_used_small_bodies():
    memo = CallMemo(max_items=2, max_body=16)
    a, b, c = _call(), _call(), _call()
    memo.put(b"a", a)
    memo.put(b"b", b)
    assert memo.get(b"a") is a  # now the most recent: b is the one to go
    memo.put(b"c", c)
    assert (memo.get(b"a"), memo.get(b"b"), memo.get(b"c")) == (a, None, c)
    memo.put(b"x" * 17, _call())  # over max_body: not kept, nothing evicted
    assert memo.get(b"x" * 17) is None and len(memo) == 2


def test_parse_call_checks_every_field():
    call = parse_call({"name": "TextSearch", "arguments": {"query": ["a"]}, "turn": 3, "include_pixels": True})
    assert (call.name, call.arguments, call.turn, call.include_pixels, call.key) == (
        "TextSearch",
        {"query": ["a"]},
        3,
        True,
        None,
    )
    for body, type_, field in (
        ({"name": "TextSearch", "arguments": {"query": ["a"]}, "turn": -1}, "invalid_request", "turn"),
        ({"name": "TextSearch", "arguments": {"query": ["a"]}, "turn": True}, "invalid_request", "turn"),
        ({"name": "TextSearch", "arguments": {"query": ["a"]}, "include_pixels": 1}, "invalid_request", "include_pixels"),
        ({"name": "Nope", "arguments": {}}, "unknown_tool", "name"),
        ({"name": "TextSearch", "arguments": {"query": []}}, "invalid_arguments", "arguments/query"),
    ):
        with pytest.raises(ToolError) as e:
            parse_call(body)
        assert (e.value.type, e.value.field) == (type_, field)


def _png_b64(colour: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def _post(client, sid: str, body: bytes) -> dict:
    r = await client.post(f"/v1/sessions/{sid}/call", data=body)
    assert r.status == 200, await r.text()
    return await r.json()


async def test_a_repeated_body_is_checked_once_and_keyed_per_session_register(client):
    """Sessions share a repeated body's checked call, but an image token in it means each session's own pixels:
    the cache key of ``img_1`` is never taken from the memo of another session's call."""
    red, blue = _png_b64((200, 0, 0)), _png_b64((0, 0, 200))
    sids = []
    for images in ([red], [blue], [red]):
        r = await client.post("/v1/sessions", json={"images": images})
        sids.append((await r.json())["session_id"])
    body = json.dumps({"name": "ReverseImageSearch", "arguments": {"image_token": ["img_1"], "goal": "what is it"}})
    first, other, same = [await _post(client, sid, body.encode()) for sid in sids]
    assert (first["cached"], other["cached"], same["cached"]) == (False, False, True)
    assert len(client.app[CALLS]) == 1
    text = json.dumps({"name": "TextSearch", "arguments": {"query": ["Paris"]}}).encode()
    assert [(await _post(client, sid, text))["cached"] for sid in sids] == [False, True, True]
    assert len(client.app[CALLS]) == 2
    spaced = text.replace(b", ", b",  ")  # another body of the same call: checked again, same cache entry
    assert (await _post(client, sids[0], spaced))["cached"] is True and len(client.app[CALLS]) == 3


async def test_requests_no_route_takes_get_json_errors(client):
    r = await client.get("/nowhere")
    assert r.status == 404 and (await r.json())["error"]["type"] == "not_found"
    r = await client.get("/v1/sessions")  # the path exists for POST
    assert r.status == 405 and (await r.json())["error"]["type"] == "method_not_allowed"
    r = await client.put("/v1/sessions/s_x/call", data=b"{}")
    assert r.status == 405 and (await r.json())["error"]["type"] == "method_not_allowed"
    metrics = await (await client.get("/metrics")).text()
    assert 'tool_errors_total{type="method_not_allowed"} 2' in metrics
    assert 'tool_errors_total{type="not_found"} 1' in metrics
