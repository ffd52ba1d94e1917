"""Decoding, limits, crops and encoding of register images.

Every image that enters the server (question images, world files, later fetched bytes) goes through
:func:`decode_image`, so one place enforces the pixel limit and the decompression-bomb guard. PIL's own limit is set
to the same bound (it raises ``DecompressionBombError`` above twice its limit and warns in between; the warning is
turned into the same structured error).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import warnings

from PIL import Image

from tool_server.errors import ToolError

DEFAULT_MAX_PIXELS = 25_000_000  # ~ 5000 x 5000; world images are far smaller


def set_pil_pixel_limit(max_pixels: int) -> None:
    Image.MAX_IMAGE_PIXELS = max_pixels


def decode_image(data: bytes, *, max_pixels: int, field: str | None = None) -> Image.Image:
    """PNG/JPEG/... bytes -> RGB image, or ``ToolError`` (``bad_image`` / ``image_too_large``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.width * image.height > max_pixels:
                raise ToolError(
                    "image_too_large", f"image is {image.width}x{image.height} pixels; the limit is {max_pixels}", field
                )
            image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ToolError("image_too_large", f"image rejected by the decompression-bomb guard: {e}", field) from None
    except (OSError, SyntaxError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
        raise ToolError("bad_image", f"bytes are not a decodable image: {e}", field) from None
    return flattened(image)


def flattened(image: Image.Image) -> Image.Image:
    """RGB pixels as a page shows the image: transparent areas on white, as a browser and the VLM processors
    (qwen-vl-utils) show them and as the world build flattens the kgeography flags and Tux Paint stamps. Dropping the
    alpha channel instead showed whatever colour the transparent pixels store (black for Nepal's flag)."""
    if not image.has_transparency_data:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB")


def open_flattened(source: bytes | str | os.PathLike[str]) -> Image.Image:
    """An encoded image (bytes or a file) as :func:`flattened` RGB pixels, without the server's limits: for clients
    (rollout, evaluation, rLLM) that show a question image or a tool's image to a policy as a page would."""
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        return flattened(image)


def _payload(text: str) -> str:
    return text.split(",", 1)[1] if text.startswith("data:") and "," in text else text


def decode_base64_image(text: str, *, max_pixels: int, field: str) -> tuple[Image.Image, bytes | None]:
    """Base64 (optionally a ``data:image/...;base64,`` URL) -> RGB image, and the bytes when they are a PNG of exactly
    those pixels (:func:`png_as_is`: an ``include_pixels`` answer sends them instead of encoding them again)."""
    try:
        raw = b64decode_sliced(_payload(text))
    except (binascii.Error, ValueError):
        raise ToolError("bad_image", "not valid base64 image data (nor a world image URL)", field) from None
    image = decode_image(raw, max_pixels=max_pixels, field=field)
    return image, raw if png_as_is(raw) else None


BASE64_STEP_CHARS = 2**20  # base64 decoded at a time (~1 ms holding the GIL); a multiple of 4


def b64decode_sliced(text: str) -> bytes:
    """``base64.b64decode(text, validate=True)`` a slice at a time: decoded whole, a 48 MB question image held the
    GIL ~40 ms on its pool thread, an event-loop stall for every other client; between slices the loop gets it back.
    Padding is only valid at the end, as for the whole (a slice of a multiple of 4 characters decodes alone)."""
    if len(text) <= BASE64_STEP_CHARS:
        return base64.b64decode(text, validate=True)
    if len(text) % 4:
        raise binascii.Error("base64 length is not a multiple of 4")
    out = bytearray()
    for i in range(0, len(text), BASE64_STEP_CHARS):
        piece = text[i : i + BASE64_STEP_CHARS]
        if "=" in piece and i + BASE64_STEP_CHARS < len(text):
            raise binascii.Error("padding before the end of base64 data")
        out += base64.b64decode(piece, validate=True)
    return bytes(out)


PROBE_CHARS = 65_536  # of base64: the header of a PNG, or of a JPEG with up to ~48 kB of metadata before its frame


def probe_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from an encoded image's header, no pixel decoded (~50 us); None when it cannot be read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                return image.size
    except (Image.DecompressionBombError, OSError, SyntaxError, ValueError):
        return None


def probe_base64_size(text: str) -> tuple[int, int] | None:
    """:func:`probe_size` of a base64 image from its first :data:`PROBE_CHARS` characters (decoding all of a 64 MiB
    body to learn its size would take the event loop ~50 ms)."""
    head = _payload(text)[:PROBE_CHARS]
    try:
        return probe_size(base64.b64decode(head[: len(head) // 4 * 4], validate=True))
    except (binascii.Error, ValueError):
        return None


def png_as_is(data: bytes) -> bool:
    """Whether ``data`` is an 8-bit RGB PNG without transparency: the PNG of its own decoded pixels, which an
    answer can send as they are."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.mode == "RGB" and "transparency" not in image.info
    except (Image.DecompressionBombError, OSError, SyntaxError, ValueError):
        return False


def encode_png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False, compress_level=3)
    return buf.getvalue()


def box_to_pixels(box: list[float], width: int, height: int) -> tuple[int, int, int, int]:
    """A ``[left, top, right, bottom]`` box in 0..1000 normalized coordinates -> pixel box (PIL's crop order).

    Raises ``ValueError`` when the box is inverted or covers no whole pixel.
    """
    left, top, right, bottom = box
    if left >= right or top >= bottom:
        raise ValueError(f"box {box} must have left < right and top < bottom")
    px = (
        round(left * width / 1000),
        round(top * height / 1000),
        round(right * width / 1000),
        round(bottom * height / 1000),
    )
    if px[2] - px[0] < 1 or px[3] - px[1] < 1:
        raise ValueError(f"box {box} covers less than one pixel of a {width}x{height} image")
    return px
