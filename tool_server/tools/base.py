"""What every tool handler gets (:class:`ToolContext`) and returns (:class:`Observation`)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tool_server.mei.schema import EvidenceInterface, ImageView, MEICall, MEIContext
from tool_server.offline.world import OfflineWorld
from tool_server.sessions import RegisteredImage, Session

MAX_PAGE_IMAGES = 15


@dataclass(slots=True)
class Observation:
    text: str  # what the policy reads
    records: list[dict[str, Any]]  # structured per-item results
    images: list[RegisteredImage] = field(default_factory=list)  # register entries this call created
    mei: list[dict[str, str]] = field(default_factory=list)
    cached: bool = False

    def to_json(self, *, include_pixels: bool) -> dict[str, Any]:
        images = []
        for entry in self.images:
            item: dict[str, Any] = {"ref": entry.ref, "width": entry.width, "height": entry.height}
            if include_pixels:
                item["png_base64"] = base64.b64encode(entry.png()).decode("ascii")
            images.append(item)
        return {"text": self.text, "images": images, "records": self.records, "mei": self.mei, "cached": self.cached}

    def to_cache(self) -> bytes:
        if self.images:
            raise ValueError("observations that change the visual register are not cacheable")
        return json.dumps({"text": self.text, "records": self.records, "mei": self.mei}).encode()

    @classmethod
    def from_cache(cls, blob: bytes) -> Observation:
        data = json.loads(blob)
        return cls(data["text"], data["records"], mei=data["mei"], cached=True)


@dataclass(slots=True)
class Call:
    """One tool call of one session."""

    session: Session
    arguments: dict[str, Any]
    turn: int | None

    def ctx(self, tool: str) -> MEIContext:
        return MEIContext(session_id=self.session.id, turn=self.turn, tool=tool)


@dataclass(slots=True)
class ToolContext:
    world: OfflineWorld
    mei: EvidenceInterface
    max_pixels: int


def mei_entry(call: MEICall) -> dict[str, str]:
    return {"call_id": call.call_id, "version": call.version}


def item_error(type_: str, message: str) -> dict[str, str]:
    return {"type": type_, "message": message}


def pixels_digest(entry: RegisteredImage) -> str:
    """Cache identity of a register image: its pixels, not its session-local id."""
    return "sha256:" + hashlib.sha256(entry.image.tobytes() + f"{entry.width}x{entry.height}".encode()).hexdigest()


def world_image_view(ctx: ToolContext, image_id: str, *, pixels: bool, match_score: float | None = None) -> ImageView:
    image = ctx.world.image_record(image_id)
    page = ctx.world.page_of(image)
    return ImageView(
        url=image.url,
        caption=image.caption,
        alt=image.alt,
        source_page_url=page.url if page else None,
        png=ctx.world.image_bytes(image_id) if pixels else None,
        match_score=match_score,
    )


def clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"
