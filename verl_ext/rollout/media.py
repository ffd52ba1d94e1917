"""Per-process caches of the media work episodes repeat.

The G rollouts of one GRPO group open with the same question image, and rollouts often fetch the same URLs; each of
them would otherwise run the processor's image processor on it (only to learn the placeholder text it expands to)
and PNG-encode it for the tool-server session. Both results are pure functions of the pixels (the placeholder text,
for Qwen-style processors, of the image size alone) and of the processor's settings, so a hit gives what a fresh
computation gives. ``tokens.py`` fills ``IMAGE_REPLACEMENTS``, ``tool_backend.py`` ``SESSION_PNGS``.
"""

from __future__ import annotations

import hashlib

from PIL import Image

from verl_ext.rollout.lru import LRU
from verl_ext.tools.client import png_base64

# Replacement texts are a few KB at most, PNGs a few hundred KB: enough for the question and fetched images of the
# groups in flight in one worker process.
IMAGE_REPLACEMENTS: LRU[str] = LRU(1024)
SESSION_PNGS: LRU[str] = LRU(64)


def image_key(image: Image.Image) -> bytes:
    """A digest of the pixels (mode, size, raw bytes): ~0.1 ms for a 320x240 RGB image, against ~1.4 ms for the
    image processor and ~1.7 ms for a PNG encode."""
    digest = hashlib.sha1(f"{image.mode}:{image.size}".encode())
    digest.update(image.tobytes())
    return digest.digest()


def session_png(image: Image.Image) -> str:
    """``png_base64(image)``, cached by content: a group's rollouts register the same question image."""
    return SESSION_PNGS.get_or_compute(image_key(image), lambda: png_base64(image))
