"""The offline web: the world's pages and images behind the tools, with indexes built at startup.

Text and image BM25 indexes are built synchronously (seconds on the full world). ORB features for reverse search
take longer on first start, so they are computed in a worker thread while the server already answers; a reverse
search waits for them. With a cache directory they are stored under ``features/`` keyed by the world's content hash
(``python -m tool_server`` always gives one: ``--cache-dir``, else the source cache's).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections import defaultdict
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from PIL import Image as PILImage

from neos_core.world.model import WORLD_ORIGIN, Image, Page
from neos_core.world.store import World
from tool_server.errors import ToolError
from tool_server.limits import quote
from tool_server.offline.lexical import ImageIndex, PageIndex, TextHit
from tool_server.offline.pixels import decode_image
from tool_server.offline.reverse import (
    FEATURE_VERSION,
    Match,
    ReverseIndex,
    SearchProcesses,
    load_or_compute,
    normalized,
)

log = logging.getLogger(__name__)


def resource_id(kind: str, url: str) -> str:
    """ModalSearcher's resource id: ``page_`` / ``image_`` + the first 8 hex chars of sha256(url)."""
    return f"{kind}_{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def features_path(cache_dir: Path, content_hash: str) -> Path:
    """Where a server with ``--cache-dir cache_dir`` keeps the image features of the world of ``content_hash``."""
    return cache_dir / "features" / f"{content_hash[:16]}-{FEATURE_VERSION}.npz"


INDEX_DIR_PREFIX = "reverse-index-"  # then the owning process's id: map_index's directories in the temp directory


class OfflineWorld:
    def __init__(self, world: World, *, cache_dir: Path | None = None, search_processes: int = 0) -> None:
        """``search_processes``: reverse searches in that many spawned processes (:class:`SearchProcesses`); 0: in
        the caller's executor threads."""
        self.world = world
        self._search_processes = search_processes
        self._spawned: SearchProcesses | None = None
        self._table_dir: Path | None = None  # map_index()
        self._table_owner = 0  # the process that wrote it (forked workers share it and leave it to that one)
        self._table_lock = threading.Lock()
        self.search_restarts = 0  # search processes found dead and replaced
        self.content_hash: str = world.manifest.get("content_hash", "")
        self._pages = list(world.pages.values())
        self.pages = PageIndex(self._pages)
        self.images = ImageIndex(list(world.images.values()), world.pages)
        carriers: dict[str, list[Page]] = defaultdict(list)
        for page in self._pages:
            for image_id in page.image_ids:
                carriers[image_id].append(page)
        for image in world.images.values():  # its source page first, listed or not
            if (source := world.pages.get(image.page_id or "")) is not None:
                carriers[image.id] = [source, *(p for p in carriers[image.id] if p is not source)]
        self._carriers = dict(carriers)
        self._resources: dict[str, list[str]] = defaultdict(list)
        for page in self._pages:
            self._resources[resource_id("page", page.url)].append(page.url)
        for image in world.images.values():
            self._resources[resource_id("image", image.url)].append(image.url)
        if clashes := sum(1 for urls in self._resources.values() if len(urls) > 1):
            log.warning("%d resource ids are shared by several URLs; those ids answer ambiguous_resource", clashes)
        self._paths = {i: world.image_path(i) for i in world.images}
        # a world without a content hash (made by hand) has no key: its features would be any such world's
        cache = features_path(cache_dir, self.content_hash) if cache_dir and self.content_hash else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="features")
        self._closing = threading.Event()  # set by close(): a computation still running stops
        self._features: Future[ReverseIndex] = self._executor.submit(
            lambda: ReverseIndex(load_or_compute(self._paths, cache, self._closing), self._paths)
        )
        if search_processes:
            self._executor.submit(self.map_index)  # after the features, off the event loop

    @classmethod
    def load(cls, path: str | Path, *, cache_dir: Path | None = None, search_processes: int = 0) -> OfflineWorld:
        return cls(World.load(path), cache_dir=cache_dir, search_processes=search_processes)

    # ---- lookups ----------------------------------------------------------------------------------------------
    @staticmethod
    def is_world_url(url: str) -> bool:
        return url.startswith(WORLD_ORIGIN + "/")

    def page(self, url: str) -> Page | None:
        return self.world.page_by_url.get(url)

    def image(self, url: str) -> Image | None:
        return self.world.image_by_url.get(url)

    def image_record(self, image_id: str) -> Image:
        return self.world.images[image_id]

    def page_of(self, image: Image) -> Page | None:
        return self.world.pages.get(image.page_id) if image.page_id else None

    def carriers(self, image_id: str) -> list[Page]:
        """Pages that show the image (its source page first)."""
        return self._carriers.get(image_id, [])

    def page_images(self, page: Page) -> list[Image]:
        return [self.world.images[i] for i in page.image_ids if i in self.world.images]

    def resolve(self, ref: str, field: str) -> str:
        """A URL, or a ``page_``/``image_`` resource id -> URL."""
        if "://" in ref:
            return ref
        urls = self._resources.get(ref)
        if not urls:
            raise ToolError("not_found", f"{quote(ref)} is neither a URL nor a known resource id", field)
        if len(urls) > 1:
            raise ToolError(
                "ambiguous_resource", f"{quote(ref)} names {len(urls)} resources; use the URL instead", field
            )
        return urls[0]

    def image_bytes(self, image_id: str) -> bytes:
        return self._paths[image_id].read_bytes()

    def load_pixels(self, image_id: str, *, max_pixels: int, field: str | None = None) -> PILImage.Image:
        return decode_image(self.image_bytes(image_id), max_pixels=max_pixels, field=field)

    # ---- search -----------------------------------------------------------------------------------------------
    def text_search(self, query: str, k: int = 10) -> list[TextHit]:
        return self.pages.search(query, k)

    def image_search(self, query: str, goal: str, k: int = 5) -> list[Image]:
        return self.images.search(query, goal, k)

    async def reverse_search(
        self, image: PILImage.Image, limit: int = 5, executor: Executor | None = None
    ) -> list[Match]:
        """Matches of ``image``: in the search processes if there are any (``executor`` normalizes the query for
        them), else on ``executor`` (the server's reverse-search pool; None: asyncio's)."""
        index = await asyncio.wrap_future(self._features)
        loop = asyncio.get_running_loop()
        if not self._search_processes:
            return await loop.run_in_executor(executor, functools.partial(index.search, image, limit=limit))
        if self._spawned is None:
            table_dir = self.map_index()
            self._spawned = SearchProcesses(table_dir, index.table.ids, index.images, self._search_processes)
        query = await loop.run_in_executor(executor, normalized, image)
        spawned = self._spawned
        try:
            return await asyncio.wrap_future(spawned.submit(query, limit))
        except BrokenProcessPool:
            if self._spawned is spawned:  # the first call to see it replaces the processes for later calls
                log.error("a reverse-search process died; starting new ones")
                spawned.close()
                self._spawned = None
                self.search_restarts += 1
            raise ToolError("search_unavailable", "the reverse image search process failed; retry the call") from None

    def map_index(self) -> Path:
        """The directory of the index's arrays that search processes memory-map, written on first use (before
        ``--workers`` forks, so all workers' search processes map the same files); removed by :meth:`close`."""
        with self._table_lock:
            if self._table_dir is None:
                table_dir = Path(tempfile.mkdtemp(prefix=f"{INDEX_DIR_PREFIX}{os.getpid()}-"))
                self._features.result().table.save_arrays(table_dir)
                self._table_dir, self._table_owner = table_dir, os.getpid()
            return self._table_dir

    def wait_features(self) -> None:
        """Block until the reverse-search features are loaded (before forking workers that share them)."""
        self._features.result()

    def features_ready(self) -> bool:
        return self._features.done()

    def close(self, *, wait: bool = False) -> None:
        """Release threads (features still being computed are abandoned), search processes (``wait``: until they
        have exited) and the mapped index files."""
        self._closing.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._spawned is not None:
            self._spawned.close(wait=wait)
        if self._table_dir is not None and self._table_owner == os.getpid():
            shutil.rmtree(self._table_dir, ignore_errors=True)  # search processes keep their mappings of the files
            self._table_dir = None
