"""The GIL-holding work of large images and bodies in spawned processes: parsing a large session-open body, base64
decoding and encoding, PNG decoding.

In the server's threads this work held the GIL the event loop needs: a 48 MB question image's JSON parse (~100 ms
in one call, on the loop itself), its base64 decode (~160 ms) and a 36 MB crop's base64 encode (~95 ms) made every
other client's cheap call wait (x1.1-x10 p99 beside three clients cropping 12 Mpx noise, by the box's load). Here
the data goes to a process through a file in shared memory (``/dev/shm``), written and read with ``pwrite`` and
``preadv``, which copy without the GIL; what runs in the server is the thread of a pool that waits on the process.
PNG decoding and encoding stay in those threads: Pillow releases the GIL for them.

Spawned, not forked, for the reason :class:`~tool_server.offline.reverse.SearchProcesses` gives; niced like the
heavy pools. Every method here blocks: call it from a pool thread (``large_image``), never from the event loop.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import multiprocessing
import os
import re
import tempfile
from collections import Counter
import logging
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from PIL import Image

from tool_server.child_process import start_as_server_child
from tool_server.errors import ToolError
from tool_server.offline.pixels import decode_image, png_as_is, set_pil_pixel_limit

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None  # tmpfs: the files never touch a disk
SHM_PREFIX = "tool-server-image-"  # then the creating process's id (tool_server.orphans)
CUT_MARK = "\x00cut:"  # a cut string's placeholder: CUT_MARK + its index (escaped as \u0000 in the JSON text)
_BASE64ISH = rb"[A-Za-z0-9+/=:;,._-]"  # base64, and the data: URL prefix before it


class SharedFile:
    """A temporary file in shared memory, removed by :meth:`close`; read and written without holding the GIL."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            fd, path = tempfile.mkstemp(prefix=f"{SHM_PREFIX}{os.getpid()}-", dir=SHM_DIR)
        else:
            fd = os.open(path, os.O_RDWR)
        self.fd, self.path = fd, path

    def write(self, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view, offset = view[n:], offset + n

    def read_into(self, out: bytearray | memoryview, offset: int = 0) -> None:
        view = memoryview(out)
        while view:
            n = os.preadv(self.fd, [view], offset)
            if n == 0:
                raise EOFError(f"{self.path}: {len(view)} bytes short")
            view, offset = view[n:], offset + n

    def read(self, length: int, offset: int = 0) -> bytes:
        out = bytearray(length)
        self.read_into(out, offset)
        return bytes(out)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


@dataclass(frozen=True, slots=True)
class CutString:
    """A long string cut out of a body before it was parsed: ``length`` bytes at ``offset`` of ``file``."""

    file: SharedFile
    offset: int
    length: int

    def head(self, n: int) -> str:
        return self.file.read(min(n, self.length), self.offset).decode("ascii")


# ---------------------------------------------------------------------------------------------- in the processes
def _init(max_pixels: int) -> None:
    start_as_server_child()
    set_pil_pixel_limit(max_pixels)


def _cut(path: str, length: int, min_chars: int) -> tuple[bytes, list[tuple[int, int]]]:
    """The body with each string of at least ``min_chars`` base64-ish characters replaced by a placeholder, and
    where each was. A match that starts at a string's closing quote (not an opening one) leaves the placeholder's
    ``\\u0000`` outside a string: the body no longer parses, as no valid body is cut so."""
    with open(path, "rb") as f:
        raw = f.read(length)
    pattern = re.compile(rb'(?<!\\)"(' + _BASE64ISH + rb"{%d,}+)\"" % min_chars)
    parts, spans, at = [], [], 0
    for m in pattern.finditer(raw):
        parts += [raw[at : m.start()], b'"\\u0000cut:%d"' % len(spans)]
        spans.append((m.start(1), m.end(1) - m.start(1)))
        at = m.end()
    return b"".join([*parts, raw[at:]]), spans


def _decode(path: str, offset: int, length: int, out_path: str, max_pixels: int, field: str) -> tuple[int, int, int]:
    """Decode the base64 image at ``offset`` of ``path``; its RGB pixels, then its PNG when it can be sent as is, go
    to ``out_path``: (width, height, the PNG's length or 0)."""
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read(length)
    if text.startswith(b"data:") and b"," in text:
        text = text.split(b",", 1)[1]
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("bad_image", "not valid base64 image data (nor a world image URL)", field) from None
    image = decode_image(raw, max_pixels=max_pixels, field=field)
    png = raw if png_as_is(raw) else b""
    with open(out_path, "wb") as f:
        f.write(image.tobytes())
        f.write(png)
    return image.width, image.height, len(png)


def _b64encode(path: str, length: int, out_path: str) -> int:
    with open(path, "rb") as f:
        encoded = base64.b64encode(f.read(length))
    with open(out_path, "wb") as f:
        f.write(encoded)
    return len(encoded)


# ---------------------------------------------------------------------------------------------- in the server
class ImageProcesses:
    """``processes`` spawned processes (started on first use) for bodies and images of ``min_bytes`` or more."""

    def __init__(self, processes: int, max_pixels: int, min_bytes: int) -> None:
        if processes < 1 or min_bytes < 1:
            raise ValueError(f"image processes and their threshold must be >= 1, got {processes}, {min_bytes}")
        self.min_bytes = min_bytes
        self.jobs: Counter[str] = Counter()  # jobs sent to the processes, by kind (cut, decode, b64encode)
        self.restarts = 0  # pools found broken (a process died: killed, out of memory) and replaced
        self._processes, self._max_pixels = processes, max_pixels
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._processes, mp_context=multiprocessing.get_context("spawn"), initializer=_init,
                                   initargs=(self._max_pixels,))

    def _result(self, fn, *args):
        """``fn(*args)`` in a process. A dead process breaks its pool for good: the first call to see it replaces
        the pool for later calls (counted), and the calls it broke get a 503 to retry."""
        pool = self._pool
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    log.error("an image process died; starting new ones")
                    pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._new_pool()
                    self.restarts += 1
            raise ToolError("image_process_failed", "an image process failed; retry the call") from None

    def cut_long_strings(self, raw: bytes | bytearray) -> tuple[bytes, dict[str, CutString]]:
        """``raw`` (a JSON body) with its strings of :attr:`min_bytes` or more cut out before it is parsed: the body
        to parse, whose placeholders name the cut strings. The caller closes the strings' file once answered."""
        self.jobs["cut"] += 1
        file = SharedFile()
        try:
            file.write(raw)
            small, spans = self._result(_cut, file.path, len(raw), self.min_bytes)
        except BaseException:
            file.close()
            raise
        if not spans:
            file.close()
        return small, {f"{CUT_MARK}{k}": CutString(file, offset, n) for k, (offset, n) in enumerate(spans)}

    def decode_base64(self, text: CutString, *, max_pixels: int, field: str) -> tuple[Image.Image, bytes | None]:
        """:func:`~tool_server.offline.pixels.decode_base64_image` of a cut string, in a process."""
        self.jobs["decode"] += 1
        out = SharedFile()
        try:
            w, h, png_len = self._result(_decode, text.file.path, text.offset, text.length, out.path, max_pixels, field)
            pixels = bytearray(3 * w * h)
            out.read_into(pixels)
            image = Image.frombuffer("RGB", (w, h), pixels, "raw", "RGB", 0, 1)  # copies, without the GIL
            return image, out.read(png_len, 3 * w * h) if png_len else None
        finally:
            out.close()

    def b64encode_into(self, data: bytes, out: bytearray, offset: int) -> int:
        """Write base64 of ``data`` into ``out`` at ``offset``, encoded in a process; how many bytes."""
        self.jobs["b64encode"] += 1
        src, dst = SharedFile(), SharedFile()
        try:
            src.write(data)
            n = self._result(_b64encode, src.path, len(data), dst.path)
            dst.read_into(memoryview(out)[offset : offset + n])
            return n
        finally:
            src.close()
            dst.close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
