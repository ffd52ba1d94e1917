"""Online backends, mapped into the record shapes the offline world backends produce.

- :class:`SerpClient`: web and image search through a SERP-style JSON API (``organic_results`` /
  ``images_results``), GET ``{base}/search.json?engine=...&q=...&api_key=...``.
- :class:`LensClient`: reverse image search through a Lens-style engine of the same API, given a *public* image URL
  (``visual_matches``).
- :class:`ReaderClient`: a reader service that returns a page as Markdown, GET ``{base}/{page_url}`` with
  ``Accept: application/json`` answering ``{"data": {"title", "url", "content"}}``.

Environment: ``NEOS_SERP_BASE_URL`` and ``NEOS_SERP_API_KEY`` (search and Lens), ``NEOS_READER_BASE_URL`` and
optionally ``NEOS_READER_API_KEY`` (sent as a bearer token). A response whose top-level shape is wrong raises
``BackendError("malformed")``; result items without a URL are dropped (they cannot be visited or fetched).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .http import BackendError, JSONClient, RetryPolicy, TokenBucket


@dataclass(frozen=True, slots=True)
class TextResult:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True, slots=True)
class ImageResult:
    url: str
    caption: str
    source_page_url: str | None


@dataclass(frozen=True, slots=True)
class PageResult:
    url: str
    title: str
    text: str  # Markdown


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise BackendError("config", f"environment variable {name} is not set")
    return value


def _items(payload: Any, key: str, backend: str) -> list[dict[str, Any]]:
    if not isinstance(payload, dict):
        raise BackendError("malformed", f"{backend}: expected a JSON object, got {type(payload).__name__}")
    if key not in payload:
        error = payload.get("error")
        if isinstance(error, str) and "returned any results" in error:  # the API's way of saying "no results"
            return []
        if error is not None:
            raise BackendError("api_error", f"{backend}: {str(error)[:200]}")
        return []  # the key is omitted when a query has no results
    items = payload[key]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise BackendError("malformed", f"{backend}: {key!r} is not a list of objects")
    return items


def _str(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value if isinstance(value, str) else ""


class _Backend:
    def __init__(self, name: str, base_url: str, *, timeout_s: float, retry: RetryPolicy,
                 rate_per_s: float | None, burst: int, headers: dict[str, str] | None = None, seed: int | None = None):
        self._base = base_url.rstrip("/")
        limiter = TokenBucket(rate_per_s, burst) if rate_per_s else None
        self.http = JSONClient(name=name, timeout_s=timeout_s, retry=retry, limiter=limiter, headers=headers, seed=seed)

    async def close(self) -> None:
        await self.http.close()


class SerpClient(_Backend):
    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 15.0, retry: RetryPolicy = RetryPolicy(),
                 rate_per_s: float | None = 5.0, burst: int = 5, seed: int | None = None) -> None:
        super().__init__("serp", base_url, timeout_s=timeout_s, retry=retry, rate_per_s=rate_per_s, burst=burst,
                         seed=seed)
        self._key = api_key

    @classmethod
    def from_env(cls, **kw: Any) -> SerpClient:
        return cls(_env("NEOS_SERP_BASE_URL"), _env("NEOS_SERP_API_KEY"), **kw)

    async def _search(self, engine: str, params: dict[str, str]) -> Any:
        return await self.http.get_json(f"{self._base}/search.json",
                                        params={"engine": engine, "api_key": self._key, **params})

    async def web_search(self, query: str, k: int = 10) -> list[TextResult]:
        payload = await self._search("google", {"q": query, "num": str(k)})
        items = _items(payload, "organic_results", "serp web search")
        return [TextResult(_str(i, "title"), _str(i, "link"), _str(i, "snippet")) for i in items if _str(i, "link")][:k]

    async def image_search(self, query: str, k: int = 10) -> list[ImageResult]:
        payload = await self._search("google_images", {"q": query})
        items = _items(payload, "images_results", "serp image search")
        return [ImageResult(_str(i, "original"), _str(i, "title"), _str(i, "link") or None)
                for i in items if _str(i, "original")][:k]


class LensClient(SerpClient):
    async def reverse(self, image_url: str, k: int = 10) -> list[ImageResult]:
        """Pages showing the image at ``image_url`` (which the API fetches itself, so it must be public)."""
        payload = await self._search("google_lens", {"url": image_url})
        items = _items(payload, "visual_matches", "lens")
        out = []
        for i in items:
            url = _str(i, "image") or _str(i, "thumbnail")
            if url:
                out.append(ImageResult(url, _str(i, "title"), _str(i, "link") or None))
        return out[:k]


class ReaderClient(_Backend):
    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 30.0,
                 retry: RetryPolicy = RetryPolicy(), rate_per_s: float | None = 2.0, burst: int = 2,
                 seed: int | None = None) -> None:
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        super().__init__("reader", base_url, timeout_s=timeout_s, retry=retry, rate_per_s=rate_per_s, burst=burst,
                         headers=headers, seed=seed)

    @classmethod
    def from_env(cls, **kw: Any) -> ReaderClient:
        return cls(_env("NEOS_READER_BASE_URL"), os.environ.get("NEOS_READER_API_KEY") or None, **kw)

    async def read(self, url: str) -> PageResult:
        payload = await self.http.get_json(f"{self._base}/{quote(url, safe=':/?&=%#')}")
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raise BackendError("malformed", f"reader: no data.content in response for {url}")
        return PageResult(_str(data, "url") or url, _str(data, "title"), data["content"])
