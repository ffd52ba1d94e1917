"""Online mode: the tools' search, page and image backends on the open web instead of the embedded world.

Web search goes to the configured SERP API (:class:`~tool_server.online.clients.SerpClient`, an operator-chosen
endpoint). Every page or image URL that comes from the policy or from search results is fetched through
:class:`~tool_server.net.SafeFetcher`: private, loopback and link-local targets are refused (also after DNS
resolution and on every redirect hop) unless the server was started with ``--allow-private-network``, bodies are
size- and content-type-limited, and images are decoded under the decompression-bomb pixel limit. URLs of the
embedded world (``neos-world.invalid``) are still answered by the world, so offline tasks run unchanged.

Failures become :class:`ToolError`\\ s, which the multi-item tools report per item (``blocked_url`` for a refused
target is a 403, never a 5xx).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin

from PIL import Image as PILImage

from tool_server.errors import ToolError
from tool_server.mei.schema import ImageView, PageView
from tool_server.net import BlockedURL, FetchError, FetchResult, ImageDecodeError, SafeFetcher, decode_image
from tool_server.online.clients import SerpClient
from tool_server.online.http import BackendError

PAGE_TYPES = ("text/html", "application/xhtml+xml", "text/plain", "text/markdown")
PAGE_TEXT_CHARS = 200_000  # of a page's visible text handed to MEI
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "table"})


class _Visible(HTMLParser):
    """Title, visible text (paragraph breaks kept) and ``<img>`` references of an HTML document."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._skip = 0
        self._in_title = False
        self.title = ""
        self.parts: list[str] = []
        self.images: list[tuple[str, str]] = []  # (absolute URL, alt)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag in _BLOCKS:
            self.parts.append("\n")
        if tag == "img":
            a = dict(attrs)
            src = (a.get("src") or "").strip()
            url = urljoin(self._base, src) if src else ""
            if url.startswith(("http://", "https://")) and url not in (u for u, _ in self.images):
                self.images.append((url, (a.get("alt") or "").strip()))

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)


def page_view(result: FetchResult) -> PageView:
    """A fetched page as MEI sees it: title, visible text and its images (references only, no pixels)."""
    text = result.body.decode("utf-8", errors="replace")
    if result.content_type not in ("text/html", "application/xhtml+xml"):
        return PageView(url=result.final_url, title=result.final_url, text=text[:PAGE_TEXT_CHARS])
    parser = _Visible(result.final_url)
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    body = "\n".join(line for line in lines if line)
    return PageView(
        url=result.final_url,
        title=" ".join(parser.title.split()) or result.final_url,
        text=body[:PAGE_TEXT_CHARS],
        images=[ImageView(url=u, alt=alt, source_page_url=result.final_url) for u, alt in parser.images],
    )


def _tool_error(e: FetchError, field: str) -> ToolError:
    if isinstance(e, BlockedURL):
        return ToolError("blocked_url", f"refused to fetch: {e}", field)
    if isinstance(e, ImageDecodeError):
        return ToolError("image_too_large" if e.reason == "too_many_pixels" else "bad_image", str(e), field)
    kind = {"too_large": "too_large", "content_type": "unsupported_content"}.get(e.reason, "fetch_failed")
    return ToolError(kind, str(e), field)


@dataclass(slots=True)
class OnlineBackends:
    fetcher: SafeFetcher
    search: SerpClient

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
        result = await self._fetch(url, field)
        if result.content_type not in PAGE_TYPES:
            raise ToolError("unsupported_content", f"{url} is {result.content_type}, not a readable page", field)
        return await asyncio.to_thread(page_view, result)

    async def load_image(self, url: str, field: str, *, max_pixels: int) -> PILImage.Image:
        result = await self._fetch(url, field)
        if not result.content_type.startswith("image/"):
            raise ToolError("unsupported_content", f"{url} is {result.content_type}, not an image", field)
        try:
            image = await asyncio.to_thread(decode_image, result.body, max_pixels)
        except ImageDecodeError as e:
            raise _tool_error(e, field) from None
        return image.convert("RGB")

    async def web_search(self, query: str, field: str) -> list[dict[str, str]]:
        try:
            hits = await self.search.web_search(query, 10)
        except BackendError as e:
            raise ToolError("search_unavailable", f"web search failed: {e}", field) from None
        return [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits]

    async def close(self) -> None:
        await self.fetcher.close()
        await self.search.close()
