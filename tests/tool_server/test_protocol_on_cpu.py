"""Tool schemas (Neos Figs 11-13, ModalSearcher App. E) and argument validation."""

from __future__ import annotations

import pytest

from tool_server.errors import ToolError
from tool_server.protocol import tool_schemas, validate


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
