"""Tool schemas of both protocols (OpenAI function format) and argument validation against them.

Neos' six tools carry the paper's exact fields and limits (its Figs 11-13); descriptions are our own words.
ModalSearcher's four tools follow its Appendix E: ``t2t_search(query)``, ``t2i_search(query)``,
``i2i_search(image, region)`` and ``read_url(url, goal)``; regions use the same 0..1000 box as CropImage.
Validation is JSON Schema (draft 2020-12); the first error becomes a :class:`ToolError` whose ``field`` is the
path of the offending value inside the request body (``arguments/query/0``). Valid arguments, the common case, are
recognised by a check compiled from the same schema (:func:`_compile`), ~20x cheaper than a jsonschema walk; only
arguments it does not accept go through jsonschema, which decides and words the error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import relevance

from tool_server.errors import ToolError
from tool_server.limits import check_arguments, quote

Protocol = Literal["neos", "modalsearch"]

MAX_BOXES_PER_IMAGE = 5
MAX_BOXES_TOTAL = 10
_BOX = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1000}, "minItems": 4, "maxItems": 4}


def _strings(max_items: int | None, description: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
    if max_items is not None:
        schema["maxItems"] = max_items
    schema["description"] = description
    return schema


def _function(name: str, description: str, properties: dict[str, Any], required: list[str], **extra: Any) -> dict:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        **extra,
        "additionalProperties": False,
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


NEOS_TOOLS = [
    _function(
        "TextSearch",
        "Web search with one or more queries. Every query yields at most 10 results (title, URL, snippet). "
        "Pages and image pixels are not loaded.",
        {"query": _strings(None, "One or more focused search queries (non-empty strings).")},
        ["query"],
    ),
    _function(
        "WebVisit",
        "Read up to five web pages and return the evidence they hold for the goal, with references to images "
        "found on the pages. Those images are not seen until FetchImage loads them.",
        {
            "url": _strings(5, "One to five complete http(s) page URLs."),
            "goal": {"type": "string", "description": "What evidence to look for on these pages."},
        },
        ["url", "goal"],
    ),
    _function(
        "ImageSearch",
        "Find images with up to five text queries. Each query returns at most five candidates ranked for the goal, "
        "as references only (no pixels); load a chosen image URL with FetchImage before relying on how it looks.",
        {
            "query": _strings(5, "One to five image search queries."),
            "goal": {"type": "string", "description": "The visual evidence the candidates are ranked for."},
        },
        ["query", "goal"],
    ),
    _function(
        "ReverseImageSearch",
        "Search by image: up to three loaded image tokens and/or up to three image URLs. Returns textual match "
        "judgements and candidate references for the goal; candidate pixels are never returned.",
        {
            "image_token": _strings(3, "One to three loaded visual-register tokens (img_N)."),
            "image_url": _strings(3, "One to three public http(s) image URLs."),
            "goal": {"type": "string", "description": "What the match should establish (identity, source, ...)."},
        },
        ["goal"],
        anyOf=[{"required": ["image_token"]}, {"required": ["image_url"]}],
    ),
    _function(
        "FetchImage",
        "Load up to five image URLs. Each image that decodes is added to the visual register as a new img_N token, "
        "in request order, and its result record names that token as output_ref.",
        {"urls": _strings(5, "One to five direct image URLs, in the order to load them.")},
        ["urls"],
    ),
    _function(
        "CropImage",
        "Crop loaded images. crop_config maps an img_N token to one [left, top, right, bottom] box in 0..1000 "
        "normalized coordinates, or to a list of such boxes; at most five boxes per image and ten in total. Every "
        "crop becomes a new reusable img_N token, in request order, named as output_ref in its record.",
        {
            "crop_config": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {
                    "anyOf": [_BOX, {"type": "array", "minItems": 1, "maxItems": MAX_BOXES_PER_IMAGE, "items": _BOX}]
                },
                "description": "img_N token -> one normalized box or a list of boxes.",
            }
        },
        ["crop_config"],
    ),
]

MODALSEARCH_TOOLS = [
    _function(
        "t2t_search",
        "Text-to-text web search: the top results (title, snippet, URL, page resource id) for a query.",
        {"query": {"type": "string", "minLength": 1, "description": "The search query."}},
        ["query"],
    ),
    _function(
        "t2i_search",
        "Text-to-image search: the top images (caption, URL, image resource id, source page) for a description.",
        {"query": {"type": "string", "minLength": 1, "description": "A description of the wanted image."}},
        ["query"],
    ),
    _function(
        "i2i_search",
        "Reverse image search of an image, or of a region of it, returning related images and their pages.",
        {
            "image": {
                "type": "string",
                "minLength": 1,
                "description": "An image resource id (image_xxxxxxxx) or img_N.",
            },
            "region": {**_BOX, "description": "Optional [left, top, right, bottom] box in 0..1000 coordinates."},
        },
        ["image"],
    ),
    _function(
        "read_url",
        "Read a page (as Markdown, or the evidence for goal) or download an image, by URL or resource id.",
        {
            "url": {
                "type": "string",
                "minLength": 1,
                "description": "A URL or a page_/image_ resource id from tool output.",
            },
            "goal": {"type": "string", "description": "What evidence to extract from the page."},
        },
        ["url"],
    ),
]

PROTOCOL_OF = {
    t["function"]["name"]: p for p, ts in (("neos", NEOS_TOOLS), ("modalsearch", MODALSEARCH_TOOLS)) for t in ts
}
_VALIDATORS = {
    t["function"]["name"]: Draft202012Validator(t["function"]["parameters"]) for t in (*NEOS_TOOLS, *MODALSEARCH_TOOLS)
}

Check = Callable[[Any], bool]
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _compile(schema: dict[str, Any]) -> Check:
    """``check(v)`` is True exactly when ``schema`` accepts ``v`` (for JSON values; a NaN is left to jsonschema).

    Covers the keywords our tool schemas use and refuses to compile any other, so a schema edit cannot silently
    widen what the fast path accepts. Each keyword applies only to its JSON type, as in JSON Schema.
    """
    unknown = set(schema) - {
        "type", "description", "properties", "required", "additionalProperties", "anyOf", "minProperties",
        "minItems", "maxItems", "items", "minLength", "minimum", "maximum",
    }
    if unknown:
        raise ValueError(f"no fast check for schema keywords {sorted(unknown)}")
    checks: list[Check] = []
    if "type" in schema:
        checks.append(_TYPES[schema["type"]])
    number = _TYPES["number"]
    for key, applies, holds in (
        ("minLength", lambda v: isinstance(v, str), lambda v, n: len(v) >= n),
        ("minimum", number, lambda v, n: v >= n),
        ("maximum", number, lambda v, n: v <= n),
        ("minItems", lambda v: isinstance(v, list), lambda v, n: len(v) >= n),
        ("maxItems", lambda v: isinstance(v, list), lambda v, n: len(v) <= n),
        ("minProperties", lambda v: isinstance(v, dict), lambda v, n: len(v) >= n),
    ):
        if key in schema:
            checks.append(lambda v, a=applies, h=holds, n=schema[key]: not a(v) or h(v, n))
    if "items" in schema:
        item = _compile(schema["items"])
        checks.append(lambda v: not isinstance(v, list) or all(map(item, v)))
    if "required" in schema:
        required = tuple(schema["required"])
        checks.append(lambda v: not isinstance(v, dict) or all(k in v for k in required))
    properties = {k: _compile(s) for k, s in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties", True)
    other: Check | None = None if extra is True else _compile(extra) if isinstance(extra, dict) else (lambda v: False)
    if properties or other is not None:

        def members(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            for k, value in v.items():
                check = properties.get(k, other)
                if check is not None and not check(value):
                    return False
            return True

        checks.append(members)
    if "anyOf" in schema:
        branches = [_compile(s) for s in schema["anyOf"]]
        checks.append(lambda v: any(b(v) for b in branches))
    return lambda v: all(c(v) for c in checks)


_FAST = {t["function"]["name"]: _compile(t["function"]["parameters"]) for t in (*NEOS_TOOLS, *MODALSEARCH_TOOLS)}


def tool_schemas(protocol: Protocol | None = None) -> list[dict[str, Any]]:
    if protocol == "neos":
        return list(NEOS_TOOLS)
    if protocol == "modalsearch":
        return list(MODALSEARCH_TOOLS)
    return [*NEOS_TOOLS, *MODALSEARCH_TOOLS]


def _field(error) -> str:
    path = ["arguments", *(str(p) for p in error.absolute_path)]
    if error.validator == "required" and (m := re.match(r"'(.+?)' is a required property", error.message)):
        path.append(m.group(1))
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        if extra:
            path.append(extra[0])
    return "/".join(path)


def validate(name: Any, arguments: Any) -> dict[str, Any]:
    """Checked arguments of tool ``name``; raises ``ToolError`` (``unknown_tool`` / ``invalid_arguments``, or a
    size limit's ``too_many_items`` / ``input_too_long``, checked first)."""
    if not isinstance(name, str) or name not in _VALIDATORS:
        raise ToolError("unknown_tool", f"unknown tool {quote(name)}; GET /v1/tools lists the tools", "name")
    if not isinstance(arguments, dict):
        raise ToolError("invalid_arguments", f"arguments of {name} must be a JSON object", "arguments")
    check_arguments(arguments)
    if _FAST[name](arguments):
        return arguments
    # the most relevant top-level error, not jsonschema's best_match, which descends into one anyOf branch and
    # would blame a box's first number for what is a wrong shape of the whole value
    error = max(_VALIDATORS[name].iter_errors(arguments), key=relevance, default=None)
    if error is not None:
        field = _field(error)
        if error.validator == "anyOf" and error.validator_value == [
            {"required": ["image_token"]},
            {"required": ["image_url"]},
        ]:
            message = "give image_token or image_url (or both)"
        elif error.validator == "anyOf":
            message = (
                "each crop_config value must be one [left, top, right, bottom] box of four numbers in 0..1000, "
                f"or a list of 1..{MAX_BOXES_PER_IMAGE} such boxes"
            )
        else:
            message = error.message if len(error.message) <= 300 else error.message[:297] + "..."
        raise ToolError("invalid_arguments", f"{name}: {message}", field)
    return arguments
