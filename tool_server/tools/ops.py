"""Backend operations both protocols share: page reading, image search and reverse search, each through MEI.

They return plain records (world ids included, None for web resources) that the protocol modules format for their
policies. With online backends (:mod:`tool_server.online.web`), text and image search, reverse search of anything
but a world image, and the pages and images outside the embedded world come from the web, for both protocols;
world URLs are still answered by the world.
"""

from __future__ import annotations

from typing import Any

from PIL import Image as PILImage

from neos_core.world.model import Page
from tool_server.errors import ToolError
from tool_server.limits import quote
from tool_server.mei.schema import ImageView, PageView
from tool_server.offline.lexical import TextHit
from tool_server.online.clients import ImageResult
from tool_server.pools import image_cost
from tool_server.tools.base import MAX_PAGE_IMAGES, Call, ToolContext, mei_entry, world_image_view

INLINE_SEARCH_BATCH = 4


async def lexical_search(ctx: ToolContext, query: str, *, batch: int) -> list[TextHit]:
    """Top-10 BM25 hits in the world for ``query``, one of ``batch`` queries of a call.

    One search is ~0.5 ms of GIL-holding Python and numpy, about what a worker-thread hand-off costs, so small
    batches run on the event loop; larger ones go to the search pool so the loop keeps serving other requests.
    """
    if batch <= INLINE_SEARCH_BATCH:
        return ctx.world.text_search(query, 10)
    return await ctx.pools.run("search", ctx.world.text_search, query, 10)


async def web_search(ctx: ToolContext, query: str, field: str, *, batch: int) -> list[dict[str, str]]:
    """Top-10 title/url/snippet records: from the web search API when online, else from the world."""
    if ctx.online is not None:
        return await ctx.online.web_search(query, field)
    hits = await lexical_search(ctx, query, batch=batch)
    return [{"title": h.page.title, "url": h.page.url, "snippet": h.snippet} for h in hits]


def _unreachable(ctx: ToolContext, url: str, what: str, field: str) -> ToolError:
    if ctx.world.is_world_url(url):
        return ToolError("not_found", f"no {what} at {url}", field)
    return ToolError(
        "offline", "the server runs offline: only pages and images of the embedded world are reachable", field
    )


def _check_url(url: str, field: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ToolError("invalid_arguments", f"{quote(url)} is not a complete http(s) URL", field)


def resolve(ctx: ToolContext, ref: str, field: str) -> str:
    """A URL, or a ``page_``/``image_`` resource id of a world resource or (online) of a web resource in a result."""
    if ctx.online is not None and "://" not in ref and (url := ctx.online.ids.url(ref)) is not None:
        return url
    return ctx.world.resolve(ref, field)


def is_image_url(ctx: ToolContext, url: str) -> bool:
    if ctx.world.is_world_url(url) or ctx.online is None:
        return ctx.world.image(url) is not None
    return ctx.online.looks_like_image(url)


def world_page_view(ctx: ToolContext, page: Page) -> tuple[PageView, list[dict[str, str | None]]]:
    """A world page as MEI sees it, and the references of its (first 15) images."""
    images = ctx.world.page_images(page)[:MAX_PAGE_IMAGES]
    view = PageView(
        url=page.url,
        title=page.title,
        text=page.text,
        images=[world_image_view(ctx, im.id, pixels=False) for im in images],
    )
    return view, [_image_ref(ctx, im.id) for im in images]


async def read_page(ctx: ToolContext, url: str, field: str) -> tuple[PageView, list[dict[str, str | None]]]:
    """A world page, or (online) a fetched web page, with its image references (``image_id`` None off-world)."""
    _check_url(url, field)
    page = ctx.world.page(url)
    if page is not None:
        return world_page_view(ctx, page)
    if ctx.online is None or ctx.world.is_world_url(url):
        raise _unreachable(ctx, url, "page", field)
    view = await ctx.online.read_page(url, field)
    view = view.model_copy(update={"images": view.images[:MAX_PAGE_IMAGES]})
    return view, [{"image_id": None, "url": im.url, "alt": im.alt, "caption": im.caption} for im in view.images]


async def load_world_image(ctx: ToolContext, url: str, field: str) -> tuple[str, PILImage.Image]:
    """(world image id, RGB pixels) for a world image URL."""
    _check_url(url, field)
    image = ctx.world.image(url)
    if image is None:
        raise _unreachable(ctx, url, "image", field)
    cost = image_cost(image.width, image.height)  # the world records every image's size
    pixels = await ctx.pools.run(cost, ctx.world.load_pixels, image.id, max_pixels=ctx.max_pixels, field=field)
    return image.id, pixels


async def load_image(ctx: ToolContext, url: str, field: str) -> tuple[str | None, PILImage.Image]:
    """(world image id or None, RGB pixels): a world image, or (online) a fetched web image."""
    _check_url(url, field)
    if ctx.online is None or ctx.world.is_world_url(url) or ctx.world.image(url) is not None:
        return await load_world_image(ctx, url, field)
    return None, await ctx.online.load_image(url, field, max_pixels=ctx.max_pixels)


def _image_ref(ctx: ToolContext, image_id: str) -> dict[str, str | None]:
    image = ctx.world.image_record(image_id)
    return {"image_id": image_id, "url": image.url, "alt": image.alt, "caption": image.caption}


async def visit_page(
    ctx: ToolContext, call: Call, page: tuple[PageView, list[dict[str, str | None]]], goal: str, tool: str
) -> tuple[dict[str, Any], dict]:
    """MEI's goal-conditioned evidence from ``page`` (a :func:`read_page` / :func:`world_page_view` result)."""
    view, image_refs = page
    result = await ctx.mei.web_visit(goal=goal, page=view, ctx=call.ctx(tool))
    ev = result.evidence
    record = {
        "url": view.url,
        "title": view.title,
        "rational": ev.rational,
        "evidence": ev.evidence,
        "summary": ev.summary,
        "relevant_images": [img.model_dump() for img in ev.relevant_images[:MAX_PAGE_IMAGES]],
        "page_images": image_refs,
    }
    return record, mei_entry(result)


IMAGE_CANDIDATES = 5


def _web_image_ref(hit: ImageResult) -> dict[str, str | None]:
    return {"image_id": None, "url": hit.url, "alt": "", "caption": hit.caption}


async def search_images(
    ctx: ToolContext, call: Call, query: str, goal: str, tool: str, field: str
) -> tuple[list[dict], dict]:
    """Up to five images for ``query`` (world index, or online the image search API), judged by MEI."""
    if ctx.online is not None:
        hits = await ctx.online.image_search(query, field, IMAGE_CANDIDATES)
        views = [ImageView(url=h.url, caption=h.caption, source_page_url=h.source_page_url) for h in hits]
        found = [{**_web_image_ref(h), "source_url": h.source_page_url, "source_title": None} for h in hits]
    else:
        images = ctx.world.image_search(query, goal, IMAGE_CANDIDATES)
        views = [world_image_view(ctx, im.id, pixels=True) for im in images]
        found = []
        for image in images:
            page = ctx.world.page_of(image)
            found.append(
                {
                    **_image_ref(ctx, image.id),
                    "source_url": page.url if page else None,
                    "source_title": page.title if page else None,
                }
            )
    result = await ctx.mei.image_search(goal=goal, query=query, candidates=views, ctx=call.ctx(tool))
    judged = {c.index: c for c in result.evidence.candidates if c.index < len(found)}
    order = list(judged) + [i for i in range(len(found)) if i not in judged]
    out = [
        {
            **found[i],
            "relevance": judged[i].relevance if i in judged else None,
            "analysis": judged[i].caption if i in judged else None,
        }
        for i in order
    ]
    return out, mei_entry(result)


def query_url(source: str) -> str | None:
    """The URL a register image was loaded from (None for question images sent as pixels and for crops)."""
    return source if source.startswith(("http://", "https://")) else None


async def reverse_search(
    ctx: ToolContext,
    call: Call,
    label: str,
    image: tuple[PILImage.Image, bytes, str | None],
    goal: str,
    tool: str,
    field: str,
) -> tuple[list[dict], dict]:
    """Pages carrying the query ``image`` (pixels, PNG, the URL it was loaded from or None), judged by MEI.

    Online with a reverse-image API, everything but a world image goes to that API (the web cannot see the world);
    otherwise the world's feature index matches the pixels.
    """
    pixels, png, url = image
    if ctx.online is not None and ctx.online.lens is not None and not (url and ctx.world.is_world_url(url)):
        hits = await ctx.online.reverse(png, url, field, IMAGE_CANDIDATES)
        views = [ImageView(url=h.url, caption=h.caption, source_page_url=h.source_page_url) for h in hits]
        found = [
            {
                **_web_image_ref(h),
                "score": None,  # the API ranks its matches but gives no similarity
                "method": "reverse_image_api",
                "pages": [{"title": h.caption, "url": h.source_page_url}] if h.source_page_url else [],
            }
            for h in hits
        ]
    else:
        matches = await ctx.world.reverse_search(pixels, IMAGE_CANDIDATES, ctx.pools.executor("reverse"))
        views = [world_image_view(ctx, m.image_id, pixels=True, match_score=m.score) for m in matches]
        found = [
            {
                **_image_ref(ctx, m.image_id),
                "score": m.score,
                "method": m.method,
                "pages": [{"title": p.title, "url": p.url} for p in ctx.world.carriers(m.image_id)],
            }
            for m in matches
        ]
    query = ImageView(url=label, png=png)
    result = await ctx.mei.reverse_image_search(goal=goal, query_image=query, candidates=views, ctx=call.ctx(tool))
    judged = {c.index: c for c in result.evidence.candidates if c.index < len(found)}
    out = [
        {
            **record,
            "match_state": judged[i].match_state if i in judged else "insufficient_evidence",
            "analysis": judged[i].caption if i in judged else None,
        }
        for i, record in enumerate(found)
    ]
    return out, mei_entry(result)
