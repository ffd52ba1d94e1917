"""The one structured error every layer raises for bad input; the app turns it into ``{"error": {...}}``."""

from __future__ import annotations

STATUS = {
    "invalid_arguments": 400,
    "invalid_request": 400,
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


class ToolError(Exception):
    """``type`` is a stable machine-readable name; ``field`` is the JSON path of the offending input, if any."""

    def __init__(self, type: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.type = type
        self.message = message
        self.field = field

    @property
    def status(self) -> int:
        return STATUS.get(self.type, 400)

    def to_json(self) -> dict[str, str | None]:
        return {"type": self.type, "message": self.message, "field": self.field}
