"""Clients show a transparent image as the server serves it: on white, not on whatever the transparent pixels store.

Before 2026-12-06 the rollout, evaluation, rLLM, walkthrough and MEI chat decoders dropped the alpha channel, so
Nepal's flag (64% transparent, stored black) reached a policy on black while FetchImage showed it on white."""

from __future__ import annotations

import base64
import io

from PIL import Image

from tool_server.offline.pixels import open_flattened
from verl_ext.mei.chat import _image as mei_chat_image

TRANSPARENT_BLACK = (0, 0, 0, 0)
OPAQUE_RED = (200, 16, 46, 255)


def _half_transparent_png() -> bytes:
    """Left half opaque red, right half transparent black (how Nepal's flag stores its page)."""
    image = Image.new("RGBA", (4, 2), TRANSPARENT_BLACK)
    for x in range(2):
        for y in range(2):
            image.putpixel((x, y), OPAQUE_RED)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def test_open_flattened_puts_transparent_pixels_on_white_from_bytes_and_files(tmp_path):
    data = _half_transparent_png()
    (tmp_path / "flag.png").write_bytes(data)
    for source in (data, tmp_path / "flag.png", str(tmp_path / "flag.png")):
        image = open_flattened(source)
        assert image.mode == "RGB"
        assert image.getpixel((0, 0)) == OPAQUE_RED[:3]
        assert image.getpixel((3, 1)) == (255, 255, 255)


def test_open_flattened_leaves_an_opaque_image_as_it_is():
    out = io.BytesIO()
    Image.new("RGB", (2, 2), (10, 20, 30)).save(out, format="PNG")
    assert open_flattened(out.getvalue()).getpixel((1, 1)) == (10, 20, 30)


def test_mei_chat_reads_a_transparent_data_url_on_white():
    url = "data:image/png;base64," + base64.b64encode(_half_transparent_png()).decode()
    assert mei_chat_image(url).getpixel((3, 0)) == (255, 255, 255)
