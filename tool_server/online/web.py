"""Online mode: the tools' search, page and image backends on the open web instead of the embedded world.

Web and image search go to the configured SERP API, reverse image search to its Lens engine
(:mod:`tool_server.online.clients`, operator-chosen endpoints). The Lens API fetches the query image itself: a web
image is handed over by its URL, a register image (question image, crop) through :class:`PublicImages` under the
server's public base URL, and without one that search is refused (``public_url_required``). Pages are read through
the page-reader service when one is configured, after the URL passed :meth:`SafeFetcher.vet`'s address checks, and
fetched directly (HTML to text) when none is configured or the reader fails. Every page or image this server fetches
itself goes through :class:`~tool_server.net.SafeFetcher`: private, loopback and link-local targets are refused
(also after DNS resolution and on every redirect hop) unless the server was started with
``--allow-private-network``, bodies are size- and content-type-limited, and images are decoded under the
decompression-bomb pixel limit. URLs of the embedded world (``neos-world.invalid``) are still answered by the world,
so offline tasks run unchanged.

Failures become :class:`ToolError`\\ s, which the multi-item tools report per item (``blocked_url`` for a refused
target is a 403, never a 5xx).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from PIL import Image as PILImage

from tool_server.errors import ToolError
from tool_server.mei.schema import ImageView, PageView
from tool_server.net import BlockedURL, FetchError, FetchResult, ImageDecodeError, SafeFetcher, decode_image
from tool_server.offline.pixels import flattened, probe_size
from tool_server.offline.world import resource_id
from tool_server.online.clients import ImageResult, LensClient, PageResult, ReaderClient, SerpClient
from tool_server.online.http import BackendError
from tool_server.online.markup import markdown_images, read_html
from tool_server.online.public import PublicImages
from tool_server.pools import Pools, decode_cost

log = logging.getLogger(__name__)

def _decoded(data: bytes, max_pixels: int) -> PILImage.Image:
    return flattened(decode_image(data, max_pixels))


PAGE_TYPES = ("text/html", "application/xhtml+xml", "text/plain", "text/markdown")
PAGE_TEXT_CHARS = 200_000  # of a page's visible text handed to MEI
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
MAX_RESOURCE_IDS = 100_000


def page_view(result: FetchResult) -> PageView:
    """A fetched page as MEI sees it: title, visible text and its images (references only, no pixels)."""
    text = result.body.decode("utf-8", errors="replace")
    if result.content_type not in ("text/html", "application/xhtml+xml"):
        return PageView(url=result.final_url, title=result.final_url, text=text[:PAGE_TEXT_CHARS])
    page = read_html(text, result.final_url)
    return PageView(
        url=result.final_url,
        title=page.title or result.final_url,
        text=page.text[:PAGE_TEXT_CHARS],
        images=[ImageView(url=u, alt=alt, source_page_url=result.final_url) for u, alt in page.images],
    )


def markdown_view(page: PageResult) -> PageView:
    """A reader's Markdown page as MEI sees it; its images are the ``![alt](url)`` references, in order."""
    images = markdown_images(page.text)
    return PageView(
        url=page.url,
        title=" ".join(page.title.split()) or page.url,
        text=page.text[:PAGE_TEXT_CHARS],
        images=[ImageView(url=u, alt=alt, source_page_url=page.url) for u, alt in images.items()],
    )


def _tool_error(e: FetchError, field: str) -> ToolError:
    if isinstance(e, BlockedURL):
        return ToolError("blocked_url", f"refused to fetch: {e}", field)
    if isinstance(e, ImageDecodeError):
        return ToolError("image_too_large" if e.reason == "too_many_pixels" else "bad_image", str(e), field)
    kind = {"too_large": "too_large", "content_type": "unsupported_content"}.get(e.reason, "fetch_failed")
    return ToolError(kind, str(e), field)


class ResourceIds:
    """ModalSearcher resource ids of web URLs seen in results, so a later call may name a resource by its id.

    Bounded (least recently seen dropped first); learned from every online ModalSearcher result, served or cached.
    """

    def __init__(self, capacity: int = MAX_RESOURCE_IDS) -> None:
        self._urls: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity

    def learn(self, records: Any) -> None:
        """Every ``resource_id``/``url`` and ``page_resource_id``/``page_url`` pair in a result's records."""
        if isinstance(records, list):
            for item in records:
                self.learn(item)
        elif isinstance(records, dict):
            for id_key, url_key in (("resource_id", "url"), ("page_resource_id", "page_url")):
                rid, url = records.get(id_key), records.get(url_key)
                if isinstance(rid, str) and isinstance(url, str):
                    self._urls[rid] = url
                    self._urls.move_to_end(rid)
            self.learn(records.get("images"))
            while len(self._urls) > self._capacity:
                self._urls.popitem(last=False)

    def url(self, rid: str) -> str | None:
        return self._urls.get(rid)

    def is_image(self, url: str) -> bool:
        return self._urls.get(resource_id("image", url)) == url


@dataclass(slots=True)
class OnlineBackends:
    """``search`` answers web and image search; ``lens`` (None: reverse search stays on the world index) needs
    ``public`` for register images; ``reader`` (None: direct fetch) reads pages."""

    fetcher: SafeFetcher
    search: SerpClient
    lens: LensClient | None = None
    reader: ReaderClient | None = None
    public: PublicImages | None = None
    ids: ResourceIds = field(default_factory=ResourceIds)
    pools: Pools = field(default_factory=Pools)  # page parsing and image decoding off the event loop
    reader_fallbacks: int = 0  # reader failures answered by a direct fetch

    async def _fetch(self, url: str, field: str) -> FetchResult:
        try:
            result = await self.fetcher.fetch(url)
        except FetchError as e:
            raise _tool_error(e, field) from None
        if result.status != 200:
            kind = "not_found" if result.status in (404, 410) else "fetch_failed"
            raise ToolError(kind, f"{url}: HTTP {result.status}", field)
        return result

    async def read_page(self, url: str, field: str) -> PageView:
        """The page through the reader if configured and it answers, else fetched here and converted to text."""
        if self.reader is not None:
            try:
                await self.fetcher.vet(url)  # the reader must not be sent where this server may not go
            except FetchError as e:
                raise _tool_error(e, field) from None
            try:
                page = await self.reader.read(url)
            except BackendError as e:
                self.reader_fallbacks += 1
                log.warning("page reader failed for %s (%s); fetching it directly", url, e)
            else:
                return await self.pools.run("parse", markdown_view, page)  # its text is the web's, up to 20 MB
        result = await self._fetch(url, field)
        if result.content_type not in PAGE_TYPES:
            raise ToolError("unsupported_content", f"{url} is {result.content_type}, not a readable page", field)
        return await self.pools.run("parse", page_view, result)

    def looks_like_image(self, url: str) -> bool:
        """An image URL by what results said of it or by its file suffix (read_url must pick page or image)."""
        return self.ids.is_image(url) or urlsplit(url).path.lower().endswith(IMAGE_SUFFIXES)

    async def load_image(self, url: str, field: str, *, max_pixels: int) -> PILImage.Image:
        result = await self._fetch(url, field)
        if not result.content_type.startswith("image/"):
            raise ToolError("unsupported_content", f"{url} is {result.content_type}, not an image", field)
        try:  # placed by the size its header gives; flattened there too (a 25 Mpx convert is not loop work)
            return await self.pools.run(decode_cost(probe_size(result.body)), _decoded, result.body, max_pixels)
        except ImageDecodeError as e:
            raise _tool_error(e, field) from None

    async def web_search(self, query: str, field: str) -> list[dict[str, str]]:
        try:
            hits = await self.search.web_search(query, 10)
        except BackendError as e:
            raise ToolError("search_unavailable", f"web search failed: {e}", field) from None
        return [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits]

    async def image_search(self, query: str, field: str, k: int) -> list[ImageResult]:
        try:
            return await self.search.image_search(query, k)
        except BackendError as e:
            raise ToolError("search_unavailable", f"image search failed: {e}", field) from None

    async def reverse(self, png: bytes, url: str | None, field: str, k: int) -> list[ImageResult]:
        """Pages showing the image at ``url`` (public already), or of ``png`` exposed under the public base URL."""
        if self.lens is None:
            raise ToolError("search_unavailable", "no reverse image search API is configured", field)
        try:
            if url is not None:
                return await self.lens.reverse(url, k)
            if self.public is None:
                raise ToolError(
                    "public_url_required",
                    "the reverse image search API fetches the query image by URL, and this image exists only in the "
                    "session: start the server with --public-base-url (its address as the API can reach it), or "
                    "search by the image's web URL",
                    field,
                )
            async with self.public.exposed(png) as public_url:
                return await self.lens.reverse(public_url, k)
        except BackendError as e:
            raise ToolError("search_unavailable", f"reverse image search failed: {e}", field) from None

    def counters(self) -> dict[str, int]:
        """What ``/metrics`` reports: retries per API client and page-reader failures answered by a direct fetch."""
        out = {"search_retries": self.search.http.retries, "reader_fallbacks": self.reader_fallbacks}
        if self.lens is not None and self.lens is not self.search:  # usually one client for both engines
            out["lens_retries"] = self.lens.http.retries
        if self.reader is not None:
            out["reader_retries"] = self.reader.http.retries
        return out

    async def close(self) -> None:
        await self.fetcher.close()
        for client in {id(c): c for c in (self.search, self.lens, self.reader) if c is not None}.values():
            await client.close()
