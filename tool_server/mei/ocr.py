"""Text in images for the extractive MEI, with RapidOCR's bundled ONNX models (rapidocr-onnxruntime 1.4.4).

The models are loaded once, on first use, so a server that never OCRs pays nothing. Results are cached by the
SHA-256 of the PNG bytes: the same image is met again and again across sessions (page images, search candidates).
With ``cache_dir`` they are also kept on disk (diskcache: SQLite, safe for concurrent processes and a kill mid-write),
keyed by the engine's version and settings too, so a restarted server or a rerun of a pipeline over the same world
reads them back instead of spending ~0.1-0.3 s of CPU per image again (a 20-question ModalSearch run OCRs ~600
search candidates). A disk that fails counts an error and behaves as a miss: the cache only saves work.
Detection runs at the image's own resolution (``limit_type=max``); the library default upscales every image to a
736-pixel short side, which costs seconds per image on CPU for no gain on the small images tools see.

Inference runs one at a time on this object's own thread (niced like the server's heavy pools), never in asyncio's
default executor: there, calls waiting for the one inference held every slot, and the disk cache tier's reads and
writes, which run in that executor, queued behind them.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sqlite3
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import diskcache
import numpy as np
from PIL import Image

from tool_server.pools import heavy_pool

from .log import sha256_hex

log = logging.getLogger(__name__)

DISK_CACHE_BYTES = 2**28  # ~100 bytes of text per image: millions of images before diskcache evicts any
TEXT_FORMAT = 1  # part of the disk cache's keys: bump when ``_recognise`` changes what it makes of the engine's lines


def disk_cache_dir(cache_dir: Path) -> Path:
    """Where a tool server with ``--cache-dir cache_dir`` keeps its OCR texts."""
    return cache_dir / "ocr"


class OCR:
    def __init__(
        self, *, max_side: int = 960, min_score: float = 0.5, cache_items: int = 4096, cache_dir: Path | None = None
    ) -> None:
        self._max_side = max_side
        self._min_score = min_score
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_items = cache_items
        self._cache_dir = cache_dir
        self._disk = None  # diskcache.Cache, opened on first use (after a --workers fork: SQLite must not cross it)
        # what the text of an image depends on besides its bytes: a new engine or setting must not read old texts
        engine = f"rapidocr-onnxruntime {version('rapidocr-onnxruntime')}"
        self._disk_prefix = f"{engine} {max_side} {min_score} {TEXT_FORMAT}:"
        self._engine = None
        self._lock = threading.Lock()  # one inference at a time: onnxruntime sessions are shared, CPU is scarce
        self._executor: ThreadPoolExecutor | None = None  # started on first use (after a --workers fork)
        self.calls = 0  # engine invocations (misses of both caches)
        self.disk_hits = 0
        self.disk_errors = 0  # reads or writes of the disk cache that failed (each then behaved as a miss)

    def _load(self):
        if self._engine is None:
            from rapidocr_onnxruntime import RapidOCR  # imported lazily: ~2 s and ~100 MB only when needed

            self._engine = RapidOCR(
                det_limit_side_len=self._max_side,
                det_limit_type="max",
                use_cls=False,
                intra_op_num_threads=1,
                inter_op_num_threads=1,
            )
        return self._engine

    def _disk_cache(self):
        if self._disk is None and self._cache_dir is not None:
            self._disk = diskcache.Cache(str(self._cache_dir), size_limit=DISK_CACHE_BYTES)
        return self._disk

    def _disk_call(self, method: str, *args):
        """``get``/``set`` on the disk cache, None where there is none or it failed (counted and logged)."""
        try:
            disk = self._disk_cache()
            return getattr(disk, method)(*args) if disk is not None else None
        except (OSError, sqlite3.Error, diskcache.Timeout) as e:  # the cache only saves work
            self.disk_errors += 1
            log.warning("OCR disk cache %s at %s failed (%d so far): %s", method, self._cache_dir, self.disk_errors, e)
            return None

    def text_sync(self, png: bytes) -> str:
        """Recognised text lines joined by newlines ('' if none). Raises ``ValueError`` for undecodable bytes."""
        key = sha256_hex(png)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            text = self._disk_call("get", self._disk_prefix + key)
            if text is not None:
                self.disk_hits += 1
            else:
                text = self._recognise(png)
                self._disk_call("set", self._disk_prefix + key, text)
            self._cache[key] = text
            if len(self._cache) > self._cache_items:
                self._cache.popitem(last=False)
            return text

    def _recognise(self, png: bytes) -> str:
        try:
            with Image.open(io.BytesIO(png)) as im:
                pixels = np.asarray(im.convert("RGB"))
        except (OSError, Image.DecompressionBombError) as e:
            raise ValueError(f"OCR: undecodable image ({e})") from e
        result, _ = self._load()(pixels)
        self.calls += 1
        return "\n".join(line for _, line, score in (result or []) if float(score) >= self._min_score)

    async def text(self, png: bytes) -> str:
        if self._executor is None:
            self._executor = heavy_pool("ocr")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.text_sync, png)
