"""OpenAI-style MEI chat messages -> what a Qwen-VL processor takes (framework-free; used by SFT and by the server).

An MEI request carries images as ``image_url`` content parts holding PNG data URLs (:mod:`tool_server.mei.prompts`).
The model's chat template renders an image part as one vision placeholder; the processor then expands each
placeholder to the image's patch count. Both the MEI server (prompt only) and the SFT tokenisation (prompt + target)
go through :func:`render`, so a trained checkpoint sees exactly the layout it is served with.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from PIL import Image

from tool_server.offline.pixels import open_flattened


class ChatInputError(ValueError):
    """A request the MEI model cannot take (bad roles or parts, an image that is not an inline PNG/JPEG)."""


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str  # the chat template's output
    images: list[Image.Image]  # in placeholder order


def _image(url: str) -> Image.Image:
    if not url.startswith("data:image/") or ";base64," not in url:
        raise ChatInputError(f"images must be inline base64 data URLs, got {url[:60]!r}")
    try:
        return open_flattened(base64.b64decode(url.split(",", 1)[1], validate=True))
    except (binascii.Error, OSError, ValueError) as e:
        raise ChatInputError(f"undecodable image: {e}") from e


def template_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """Messages with ``image_url`` parts turned into template ``image`` parts, plus the decoded images in order."""
    out: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise ChatInputError(f"message {i}: need a dict with role system, user or assistant")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise ChatInputError(f"message {i}: content must be a string or a list of parts")
        parts: list[dict[str, Any]] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            elif kind == "image_url" and isinstance(part.get("image_url"), dict):
                images.append(_image(str(part["image_url"].get("url", ""))))
                parts.append({"type": "image"})
            else:
                raise ChatInputError(f"message {i}: unsupported content part {str(part)[:80]!r}")
        out.append({"role": message["role"], "content": parts})
    return out, images


def render(processor: Any, messages: list[dict[str, Any]], *, target: str | None = None) -> Rendered:
    """The template text of ``messages`` ending in an open assistant turn, or, with ``target``, closed by it."""
    converted, images = template_messages(messages)
    if target is None:
        text = processor.apply_chat_template(converted, add_generation_prompt=True, tokenize=False)
    else:
        converted.append({"role": "assistant", "content": target})
        text = processor.apply_chat_template(converted, add_generation_prompt=False, tokenize=False)
    return Rendered(text, images)
