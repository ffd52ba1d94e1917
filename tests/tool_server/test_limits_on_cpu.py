"""Input limits: every list, string and id a client sends is bounded, and an error quotes at most a short prefix."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from tool_server.errors import ToolError
from tool_server.limits import (
    MAX_CALL_BODY_BYTES,
    MAX_GROUP_ID_CHARS,
    MAX_LIST_ITEMS,
    MAX_TEXT_CHARS,
    MAX_URL_CHARS,
    MAX_VERSION_CHARS,
    QUOTE_CHARS,
    quote,
)
from tool_server.protocol import validate
from tool_server.sessions import VisualRegister

HUGE = "x" * (10 * 2**20)


def test_quote_keeps_a_short_prefix_and_the_length():
    assert quote("abc") == "'abc'"
    q = quote(HUGE)
    assert q.startswith("'" + "x" * QUOTE_CHARS + "'") and str(len(HUGE)) in q and len(q) < QUOTE_CHARS + 40
    assert len(quote(list(range(10**5)))) < QUOTE_CHARS + 20


@pytest.mark.parametrize(
    ("name", "arguments", "type_", "field"),
    [
        ("TextSearch", {"query": ["q"] * (MAX_LIST_ITEMS + 1)}, "too_many_items", "arguments/query"),
        ("TextSearch", {"query": ["q", "y" * (MAX_TEXT_CHARS + 1)]}, "input_too_long", "arguments/query/1"),
        ("WebVisit", {"url": ["https://x/" + HUGE], "goal": "g"}, "input_too_long", "arguments/url/0"),
        ("WebVisit", {"url": ["https://x/a"], "goal": HUGE}, "input_too_long", "arguments/goal"),
        ("t2t_search", {"query": HUGE}, "input_too_long", "arguments/query"),
        ("i2i_search", {"image": "img_" + "1" * (MAX_URL_CHARS + 1)}, "input_too_long", "arguments/image"),
        (
            "CropImage",
            {"crop_config": {f"img_{i}": [0, 0, 9, 9] for i in range(1, 12)}},
            "too_many_items",
            "arguments/crop_config",
        ),
    ],
)
def test_oversized_arguments_are_refused_naming_the_field(name, arguments, type_, field):
    with pytest.raises(ToolError) as err:
        validate(name, arguments)
    assert (err.value.type, err.value.status, err.value.field) == (type_, 400, field)
    assert len(err.value.message) < 200  # never the value itself


def test_limits_leave_the_papers_schemas_and_paper_sized_calls_alone():
    assert validate("TextSearch", {"query": ["q"] * MAX_LIST_ITEMS})
    assert validate("WebVisit", {"url": ["https://x/a"] * 5, "goal": "g" * MAX_TEXT_CHARS})


def test_an_unknown_tool_or_field_of_any_size_gives_a_short_error():
    with pytest.raises(ToolError) as err:
        validate(HUGE, {})
    assert err.value.type == "unknown_tool" and len(err.value.message) < 200
    with pytest.raises(ToolError) as err:
        validate("TextSearch", {"query": ["a"], HUGE: 1})
    assert err.value.type == "invalid_arguments"
    assert len(err.value.message) <= 1000 and len(err.value.field) <= 200


@pytest.mark.parametrize(
    "ref", ["img_²", "img_١", "img_1" + "0" * 5000, "img_" + "9" * 4300, "img_0", "img_", "img_-1"]
)
def test_only_ascii_decimal_image_ids_name_a_register_image(ref):
    register = VisualRegister(4)
    register.append(Image.new("RGB", (2, 2)), "question")  # img_1 exists: "img_١" must not reach it
    with pytest.raises(ToolError) as err:
        register.get(ref, "arguments/image")
    assert (err.value.type, err.value.status, err.value.field) == ("unknown_image", 400, "arguments/image")
    assert len(err.value.message) < 200


async def _post(client, path: str, body) -> tuple[int, dict]:
    r = await client.post(path, data=body if isinstance(body, bytes) else json.dumps(body))
    return r.status, await r.json()


async def test_http_limits_answer_4xx_naming_the_field(client):
    status, body = await _post(client, "/v1/sessions", {"group_id": "g" * (MAX_GROUP_ID_CHARS + 1)})
    assert (status, body["error"]["type"], body["error"]["field"]) == (400, "input_too_long", "group_id")
    status, body = await _post(client, "/v1/sessions", {"images": ["https://x/" + "a" * MAX_URL_CHARS]})
    assert (status, body["error"]["field"]) == (400, "images/0")
    status, body = await _post(client, "/v1/sessions", {})
    sid = body["session_id"]
    # 40,000 queries in a 1.3 MB body once took 12 s and a 191 MB answer
    call = f"/v1/sessions/{sid}/call"
    status, body = await _post(client, call, {"name": "TextSearch", "arguments": {"query": ["q"] * 40_000}})
    assert (status, body["error"]["type"], body["error"]["field"]) == (400, "too_many_items", "arguments/query")
    status, body = await _post(client, call, b'{"name": "TextSearch", "pad": "' + b"x" * MAX_CALL_BODY_BYTES + b'"}')
    assert (status, body["error"]["type"], body["error"]["field"]) == (413, "body_too_large", "body")
    crop = {"name": "CropImage", "arguments": {"crop_config": {"img_²": [0, 0, 9, 9]}}}
    status, body = await _post(client, call, crop)
    assert (status, body["error"]["type"]) == (400, "unknown_image")
    search = {"name": "TextSearch", "arguments": {"query": ["a"]}}
    r = await client.post(f"/v1/sessions/s_{'z' * 4000}/call", json=search)
    assert r.status == 404 and len(await r.read()) < 400


async def test_an_mei_version_is_bounded_where_a_client_gives_it(client):
    """A session's MEI version is kept on the session and hashed into each MEI-backed cache key: a 60 MB version in a
    session body (within its 64 MiB limit) was taken as is."""
    for path, field in (("/v1/sessions", "mei_version"), ("/admin/mei_version", "version")):
        status, body = await _post(client, path, {field: "v" * (60 * 2**20)})
        assert (status, body["error"]["type"], body["error"]["field"]) == (400, "input_too_long", field)
        assert len(json.dumps(body)) < 400
        assert (await _post(client, path, {field: "v" * MAX_VERSION_CHARS}))[0] == 200
    status, body = await _post(client, "/v1/sessions", {})
    assert body["mei_version"] == "v" * MAX_VERSION_CHARS  # the announced version, fixed on the next session
