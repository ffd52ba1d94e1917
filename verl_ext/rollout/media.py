"""Per-process caches of the media work episodes repeat.

The G rollouts of one GRPO group open with the same question image, and rollouts often fetch the same URLs; each of
them would otherwise decode and resize the question image (verl's ``process_multi_modal_info``), run the processor's
image processor on it (only to learn the placeholder text it expands to) and PNG-encode it for the tool-server
session. These results are pure functions of the encoded file or of the pixels (the placeholder text, for
Qwen-style processors, of the image size alone) and of the worker's fixed settings, so a hit gives what a fresh
computation gives. ``tokens.py`` fills ``IMAGE_REPLACEMENTS``, ``tool_backend.py`` ``SESSION_PNGS``, the agent
loop ``QUESTION_MEDIA``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from typing import Any

from PIL import Image

from verl_ext.rollout.lru import LRU
from verl_ext.tools.client import png_base64

# Replacement texts are a few KB at most, PNGs a few hundred KB: enough for the question and fetched images of the
# groups in flight in one worker process. Decoded question media can be tens of MB each (a photo near the processor's
# max pixels), so few are kept: verl starts a group's rollouts together (adjacent in the batch), and they share the
# decoding while it runs.
IMAGE_REPLACEMENTS: LRU[str] = LRU(1024)
SESSION_PNGS: LRU[str] = LRU(64)
QUESTION_MEDIA: LRU[asyncio.Future] = LRU(32)


def image_key(image: Image.Image) -> bytes:
    """A digest of the pixels (mode, size, raw bytes): ~0.1 ms for a 320x240 RGB image, against ~1.4 ms for the
    image processor and ~1.7 ms for a PNG encode."""
    digest = hashlib.sha1(f"{image.mode}:{image.size}".encode())
    digest.update(image.tobytes())
    return digest.digest()


def session_png(image: Image.Image) -> str:
    """``png_base64(image)``, cached by content: a group's rollouts register the same question image."""
    return SESSION_PNGS.get_or_compute(image_key(image), lambda: png_base64(image))


def media_parts(messages: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The parts of ``messages``' list contents that are not text (images, videos, audio), in order."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from (part for part in content if isinstance(part, dict) and part.get("type") != "text")


def has_media(messages: Sequence[dict[str, Any]]) -> bool:
    return next(media_parts(messages), None) is not None


def question_media_key(messages: list[dict[str, Any]]) -> tuple | None:
    """The media of ``messages`` by content: a digest of each image part's encoded file (verl's ``RLHFDataset``
    gives ``{"type": "image", "bytes": ...}``) or of its pixels (a PIL image); None when there is none, or when a part
    names its media by path or URL (the content behind it may change) or is not an image."""
    key: list[bytes] = []
    for part in media_parts(messages):
        data, image = part.get("bytes"), part.get("image")
        if part.get("type") != "image":
            return None
        if isinstance(data, bytes):
            key.append(hashlib.sha1(data).digest())
        elif isinstance(image, Image.Image):
            key.append(image_key(image))
        else:
            return None
    return tuple(key) or None


async def shared_result(cache: LRU[asyncio.Future], key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
    """``await compute()``, once per ``key`` in ``cache`` for the calls on this event loop, including calls that
    arrive while it runs (verl starts a batch's rollouts together, so the G rollouts of a group miss a cache at the
    same moment). A failure is not kept: every waiter gets it, and the next call computes afresh."""
    key = (id(asyncio.get_running_loop()), key)
    future = cache.get(key)
    if future is None:
        future = asyncio.ensure_future(compute())
        cache.put(key, future)
    try:
        return await asyncio.shield(future)
    except BaseException:
        if future.done() and (future.cancelled() or future.exception() is not None) and cache.get(key) is future:
            cache.pop(key)
        raise
