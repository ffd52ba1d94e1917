"""Size limits on every input the server accepts, and the one way an error quotes a client's value.

The tool schemas the policy reads stay the papers' (Neos' TextSearch takes "one or more" queries, with no upper
bound); these limits are the server's own resource bounds, checked before the schema so that an oversized request
costs no more than reading it. A limit error names the field and quotes at most :data:`QUOTE_CHARS` characters of
the value, so a 10 MiB value cannot turn into a 10 MiB error body.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tool_server.errors import ToolError

MAX_LIST_ITEMS = 32  # TextSearch's queries per call (the other tools' lists are 3..5 by their schemas)
MAX_TEXT_CHARS = 2_000  # a query or goal
MAX_URL_CHARS = 4_096  # a URL, resource id or img_N token
MAX_GROUP_ID_CHARS = 256
MAX_VERSION_CHARS = 256  # an MEI version: kept on every session and part of its MEI-backed cache keys
MAX_CROP_IMAGES = 10  # crop_config keys; Neos caps the boxes of a call at ten in total
MAX_CALL_BODY_BYTES = 1 * 2**20  # a tool call never carries pixels (question images go to POST /v1/sessions)
MAX_BODY_BYTES = 64 * 2**20  # one request body: question images arrive base64 in a session open
MAX_INFLIGHT_BODY_BYTES = 256 * 2**20  # the large bodies of every request being read or decoded at once
QUOTE_CHARS = 64

_FIELD_CHARS = {
    "query": MAX_TEXT_CHARS,
    "goal": MAX_TEXT_CHARS,
    "url": MAX_URL_CHARS,
    "urls": MAX_URL_CHARS,
    "image_url": MAX_URL_CHARS,
    "image": MAX_URL_CHARS,
    "image_token": MAX_URL_CHARS,
}


def quote(value: Any, chars: int = QUOTE_CHARS) -> str:
    """``repr`` of ``value``, or of its first ``chars`` characters and its length when it is longer."""
    if isinstance(value, str) and len(value) > chars:
        return f"{value[:chars]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= chars + 2 else f"{text[:chars]}... ({type(value).__name__})"


def check_text(value: str, limit: int, field: str) -> None:
    if len(value) > limit:
        raise ToolError("input_too_long", f"{len(value)} characters; the limit is {limit}: {quote(value)}", field)


def check_items(value: list | dict, limit: int, field: str) -> None:
    if len(value) > limit:
        raise ToolError("too_many_items", f"{len(value)} items; the limit is {limit}", field)


def check_arguments(arguments: Any) -> None:
    """Raise ``too_many_items`` / ``input_too_long`` for a list or string argument over its limit.

    Only sizes are checked here; types and shapes are the schema's (a value of the wrong type passes through to it).
    """
    if not isinstance(arguments, dict):
        return
    for key, value in arguments.items():
        field = f"arguments/{key[:QUOTE_CHARS]}"
        limit = _FIELD_CHARS.get(key, MAX_TEXT_CHARS)
        if isinstance(value, str):
            check_text(value, limit, field)
        elif isinstance(value, list):
            check_items(value, MAX_LIST_ITEMS, field)
            for i, item in enumerate(value):
                if isinstance(item, str):
                    check_text(item, limit, f"{field}/{i}")
        elif key == "crop_config" and isinstance(value, dict):
            check_items(value, MAX_CROP_IMAGES, field)
            for ref in value:
                check_text(ref, MAX_URL_CHARS, field)


class BodyBudget:
    """Bytes of large request bodies (session opens, announcements: up to :data:`MAX_BODY_BYTES` each) a process
    reads and decodes at once. Each body is bounded alone, but one client sending many at once would hold them all,
    and their decoded copies, in memory; a body that does not fit is refused before it is read (503
    ``server_busy``: retry later), never queued. A body of unknown length counts as the largest allowed. Bodies of at
    most :data:`MAX_CALL_BODY_BYTES` (tool calls) are not counted: a large one never makes a small one wait.
    One event loop per process: no await between the check and the charge, so no lock."""

    def __init__(self, limit_bytes: int = MAX_INFLIGHT_BODY_BYTES, body_bytes: int = MAX_BODY_BYTES) -> None:
        self.limit_bytes, self.body_bytes, self.used = limit_bytes, body_bytes, 0

    @contextlib.contextmanager
    def hold(self, content_length: int | None, has_body: bool = True) -> Iterator[None]:
        n = (self.body_bytes if has_body else 0) if content_length is None else content_length
        if n <= MAX_CALL_BODY_BYTES:
            yield
            return
        if self.used + n > self.limit_bytes:  # counted where the error is answered (tool_errors_total)
            raise ToolError("server_busy", f"{n} bytes would pass the {self.limit_bytes} bytes of request bodies "
                            "this server reads at once; retry later", "body")
        self.used += n
        try:
            yield
        finally:
            self.used -= n
