"""The one structured error every layer raises for bad input; the app turns it into ``{"error": {...}}``."""

from __future__ import annotations

STATUS = {
    "invalid_arguments": 400,
    "invalid_request": 400,
    "input_too_long": 400,  # tool_server.limits
    "too_many_items": 400,
    "body_too_large": 413,
    "unknown_image": 400,
    "bad_image": 400,
    "image_too_large": 400,
    "register_full": 409,
    "unknown_tool": 404,
    "unknown_session": 404,
    "not_found": 404,
    "offline": 404,
    "ambiguous_resource": 400,
    "too_many_sessions": 429,
    "session_quota": 429,  # one client holds its share of the server's sessions
    "session_memory_full": 409,  # one session's images hold its pixel budget
    "server_memory_full": 503,  # the process's memory budget is held by sessions too recently used to evict
    "server_busy": 503,  # the request bodies being read at once fill their budget (bodies.BodyBudget)
    "body_timeout": 408,  # a body fell behind the minimum rate (bodies.BodyBudget); its connection is closed
    "image_process_failed": 503,  # an image process died mid-call (tool_server.image_processes); a retry gets new ones
    "client_quota": 429,  # one client holds its share of bodies, image memory or heavy work; the others go on
    # online mode (tool_server.online.web)
    "blocked_url": 403,
    "too_large": 413,
    "unsupported_content": 415,
    "fetch_failed": 502,
    "search_unavailable": 503,
    "public_url_required": 503,
    # the MEI now serves another version than the session's (Neos §3.5: one MEI version per trajectory): tool-caused
    "mei_version_changed": 503,  # a register image cannot go to the reverse-image API without --public-base-url
}


MAX_MESSAGE_CHARS = 1_000
MAX_FIELD_CHARS = 200


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


class ToolError(Exception):
    """``type`` is a stable machine-readable name; ``field`` is the JSON path of the offending input, if any.

    Message and field are clipped (a backstop: messages quote values through :func:`tool_server.limits.quote`), so
    no error body grows with the size of a client's value.
    """

    def __init__(self, type: str, message: str, field: str | None = None) -> None:
        message = _clip(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.type = type
        self.message = message
        self.field = None if field is None else _clip(field, MAX_FIELD_CHARS)

    def __reduce__(self):  # raised in an image process, it crosses back pickled (Exception's keeps only args)
        return (ToolError, (self.type, self.message, self.field))

    @property
    def status(self) -> int:
        return STATUS.get(self.type, 400)

    def to_json(self) -> dict[str, str | None]:
        return {"type": self.type, "message": self.message, "field": self.field}
