"""Tool schemas (Neos Figs 11-13, ModalSearcher App. E) and argument validation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tool_server.errors import ToolError
from tool_server.protocol import _FAST, _VALIDATORS, _compile, tool_schemas, validate


def _params(name: str) -> dict:
    return next(t["function"]["parameters"] for t in tool_schemas() if t["function"]["name"] == name)


def test_both_protocols_are_listed_and_filterable():
    names = [t["function"]["name"] for t in tool_schemas()]
    assert names == [
        "TextSearch",
        "WebVisit",
        "ImageSearch",
        "ReverseImageSearch",
        "FetchImage",
        "CropImage",
        "t2t_search",
        "t2i_search",
        "i2i_search",
        "read_url",
    ]
    assert [t["function"]["name"] for t in tool_schemas("modalsearch")] == names[6:]
    assert all(
        t["type"] == "function" and t["function"]["parameters"]["additionalProperties"] is False for t in tool_schemas()
    )


def test_neos_fields_and_limits_are_the_papers():
    assert _params("TextSearch")["properties"]["query"]["minItems"] == 1
    assert "maxItems" not in _params("TextSearch")["properties"]["query"]
    assert (
        _params("WebVisit")["required"] == ["url", "goal"] and _params("WebVisit")["properties"]["url"]["maxItems"] == 5
    )
    assert _params("ImageSearch")["properties"]["query"]["maxItems"] == 5
    ris = _params("ReverseImageSearch")
    assert ris["required"] == ["goal"] and ris["anyOf"] == [{"required": ["image_token"]}, {"required": ["image_url"]}]
    assert ris["properties"]["image_token"]["maxItems"] == 3 and ris["properties"]["image_url"]["maxItems"] == 3
    assert _params("FetchImage")["properties"]["urls"]["maxItems"] == 5
    crop = _params("CropImage")["properties"]["crop_config"]
    single, many = crop["additionalProperties"]["anyOf"]
    assert (
        single["items"] == {"type": "number", "minimum": 0, "maximum": 1000}
        and single["minItems"] == single["maxItems"] == 4
    )
    assert many["maxItems"] == 5 and crop["minProperties"] == 1


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("TextSearch", {}, "arguments/query"),
        ("TextSearch", {"query": []}, "arguments/query"),
        ("TextSearch", {"query": [""]}, "arguments/query/0"),
        ("TextSearch", {"query": ["a"], "k": 3}, "arguments/k"),
        ("WebVisit", {"url": ["u"] * 6, "goal": "g"}, "arguments/url"),
        ("WebVisit", {"url": ["u"]}, "arguments/goal"),
        ("ReverseImageSearch", {"goal": "g"}, "arguments"),
        ("ReverseImageSearch", {"goal": "g", "image_token": ["img_1"] * 4}, "arguments/image_token"),
        ("CropImage", {"crop_config": {}}, "arguments/crop_config"),
        ("CropImage", {"crop_config": {"img_1": [0, 0, 1001, 5]}}, "arguments/crop_config/img_1"),
        ("CropImage", {"crop_config": {"img_1": [[0, 0, 5, 5]] * 6}}, "arguments/crop_config/img_1"),
        ("i2i_search", {"image": "img_1", "region": [0, 0, 10]}, "arguments/region"),
        ("read_url", {"goal": "g"}, "arguments/url"),
    ],
)
def test_invalid_arguments_name_the_field(name, arguments, field):
    with pytest.raises(ToolError) as err:
        validate(name, arguments)
    assert err.value.type == "invalid_arguments" and err.value.status == 400
    assert err.value.field == field


def test_valid_arguments_pass_and_unknown_tools_are_404():
    assert validate("CropImage", {"crop_config": {"img_1": [0, 0, 10, 10], "img_2": [[0, 0, 5, 5]]}})
    assert validate("ReverseImageSearch", {"goal": "g", "image_url": ["https://x/y.png"]})
    with pytest.raises(ToolError) as err:
        validate("Nope", {})
    assert (err.value.type, err.value.status, err.value.field) == ("unknown_tool", 404, "name")
    with pytest.raises(ToolError) as err:
        validate("TextSearch", ["not", "an", "object"])
    assert err.value.field == "arguments"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 1005) | st.floats(-5, 1005, allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)
_VALID = {
    "TextSearch": {"query": ["a", "b"]},
    "WebVisit": {"url": ["https://x/a"], "goal": "g"},
    "ImageSearch": {"query": ["a"], "goal": ""},
    "ReverseImageSearch": {"image_token": ["img_1"], "image_url": ["https://x/i.png"], "goal": "g"},
    "FetchImage": {"urls": ["https://x/i.png", "https://x/j.png"]},
    "CropImage": {"crop_config": {"img_1": [0, 0, 10.5, 1000], "img_2": [[0, 0, 5, 5], [1, 1, 2, 2]]}},
    "t2t_search": {"query": "a"},
    "t2i_search": {"query": "a"},
    "i2i_search": {"image": "img_1", "region": [0, 0, 500, 500]},
    "read_url": {"url": "page_0123abcd", "goal": "g"},
}


def _mutate(value, data):
    """``value`` with one random edit somewhere inside it: drop/add a member, replace a value, or change a leaf."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], data), *value[i + 1 :]]
    edits = ["replace"] + (["drop", "add"] if isinstance(value, (dict, list)) and value else [])
    edit = data.draw(st.sampled_from(edits))
    if edit == "replace":
        return data.draw(_JSON | st.just("") | st.just(1001) | st.just(-1))
    if isinstance(value, dict):
        if edit == "drop":
            return {k: v for k, v in value.items() if k != data.draw(st.sampled_from(sorted(value)))}
        return {**value, data.draw(st.sampled_from(["k", "goal", "image_url", "img_3"])): data.draw(_JSON)}
    return value[1:] if edit == "drop" else [*value, *[value[0]] * data.draw(st.integers(1, 5))]


@settings(max_examples=500, deadline=None)
@given(name=st.sampled_from(sorted(_VALID)), data=st.data())
def test_compiled_check_accepts_exactly_what_jsonschema_accepts(name, data):
    assert set(_VALID) == set(_FAST)
    arguments = _VALID[name]
    for _ in range(data.draw(st.integers(0, 2))):
        arguments = _mutate(arguments, data)
    # the fast path decides acceptance on its own: a disagreement would let bad input through or reject good input
    assert _FAST[name](arguments) == _VALIDATORS[name].is_valid(arguments)


def test_compiled_check_refuses_keywords_it_does_not_know():
    with pytest.raises(ValueError, match="pattern"):
        _compile({"type": "string", "pattern": "^img_"})
