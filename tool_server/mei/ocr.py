"""Text in images for the extractive MEI, with RapidOCR's bundled ONNX models (rapidocr-onnxruntime 1.4.4).

The models are loaded once, on first use, so a server that never OCRs pays nothing. Results are cached by the
SHA-256 of the PNG bytes: the same image is met again and again across sessions (page images, search candidates).
Detection runs at the image's own resolution (``limit_type=max``); the library default upscales every image to a
736-pixel short side, which costs seconds per image on CPU for no gain on the small images tools see.

Inference runs one at a time on this object's own thread (niced like the server's heavy pools), never in asyncio's
default executor: there, calls waiting for the one inference held every slot, and the disk cache tier's reads and
writes, which run in that executor, queued behind them.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from tool_server.pools import heavy_pool

from .log import sha256_hex


class OCR:
    def __init__(self, *, max_side: int = 960, min_score: float = 0.5, cache_items: int = 4096) -> None:
        self._max_side = max_side
        self._min_score = min_score
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_items = cache_items
        self._engine = None
        self._lock = threading.Lock()  # one inference at a time: onnxruntime sessions are shared, CPU is scarce
        self._executor: ThreadPoolExecutor | None = None  # started on first use (after a --workers fork)
        self.calls = 0  # engine invocations (cache misses)

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

    def text_sync(self, png: bytes) -> str:
        """Recognised text lines joined by newlines ('' if none). Raises ``ValueError`` for undecodable bytes."""
        key = sha256_hex(png)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            try:
                with Image.open(io.BytesIO(png)) as im:
                    pixels = np.asarray(im.convert("RGB"))
            except (OSError, Image.DecompressionBombError) as e:
                raise ValueError(f"OCR: undecodable image ({e})") from e
            result, _ = self._load()(pixels)
            self.calls += 1
            text = "\n".join(line for _, line, score in (result or []) if float(score) >= self._min_score)
            self._cache[key] = text
            if len(self._cache) > self._cache_items:
                self._cache.popitem(last=False)
            return text

    async def text(self, png: bytes) -> str:
        if self._executor is None:
            self._executor = heavy_pool("ocr")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.text_sync, png)
