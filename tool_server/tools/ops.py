"""Backend operations both protocols share: page reading, image search and reverse search, each through MEI.

They return plain records (world ids included) that the protocol modules format for their policies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from PIL import Image as PILImage

from data_gen.world.model import Page
from tool_server.errors import ToolError
from tool_server.mei.schema import ImageView, PageView
from tool_server.tools.base import MAX_PAGE_IMAGES, Call, ToolContext, mei_entry, world_image_view


def world_page(ctx: ToolContext, url: str, field: str) -> Page:
    if not url.startswith(("http://", "https://")):
        raise ToolError("invalid_arguments", f"{url!r} is not a complete http(s) URL", field)
    page = ctx.world.page(url)
    if page is None:
        if ctx.world.is_world_url(url):
            raise ToolError("not_found", f"no page at {url}", field)
        raise ToolError(
            "offline", "the server runs offline: only pages and images of the embedded world are reachable", field
        )
    return page


async def load_world_image(ctx: ToolContext, url: str, field: str) -> tuple[str, PILImage.Image]:
    """(world image id, RGB pixels) for a world image URL."""
    if not url.startswith(("http://", "https://")):
        raise ToolError("invalid_arguments", f"{url!r} is not a complete http(s) URL", field)
    image = ctx.world.image(url)
    if image is None:
        if ctx.world.is_world_url(url):
            raise ToolError("not_found", f"no image at {url}", field)
        raise ToolError(
            "offline", "the server runs offline: only pages and images of the embedded world are reachable", field
        )
    pixels = await asyncio.to_thread(ctx.world.load_pixels, image.id, max_pixels=ctx.max_pixels, field=field)
    return image.id, pixels


def _image_ref(ctx: ToolContext, image_id: str) -> dict[str, str]:
    image = ctx.world.image_record(image_id)
    return {"image_id": image_id, "url": image.url, "alt": image.alt, "caption": image.caption}


async def visit_page(ctx: ToolContext, call: Call, page: Page, goal: str, tool: str) -> tuple[dict[str, Any], dict]:
    images = ctx.world.page_images(page)[:MAX_PAGE_IMAGES]
    view = PageView(
        url=page.url,
        title=page.title,
        text=page.text,
        images=[world_image_view(ctx, im.id, pixels=False) for im in images],
    )
    result = await ctx.mei.web_visit(goal=goal, page=view, ctx=call.ctx(tool))
    ev = result.evidence
    record = {
        "url": page.url,
        "title": page.title,
        "rational": ev.rational,
        "evidence": ev.evidence,
        "summary": ev.summary,
        "relevant_images": [img.model_dump() for img in ev.relevant_images[:MAX_PAGE_IMAGES]],
        "page_images": [_image_ref(ctx, im.id) for im in images],
    }
    return record, mei_entry(result)


async def search_images(ctx: ToolContext, call: Call, query: str, goal: str, tool: str) -> tuple[list[dict], dict]:
    found = ctx.world.image_search(query, goal, 5)
    views = [world_image_view(ctx, im.id, pixels=True) for im in found]
    result = await ctx.mei.image_search(goal=goal, query=query, candidates=views, ctx=call.ctx(tool))
    judged = {c.index: c for c in result.evidence.candidates if c.index < len(found)}
    order = list(judged) + [i for i in range(len(found)) if i not in judged]
    out = []
    for i in order:
        image = found[i]
        page = ctx.world.page_of(image)
        out.append(
            {
                **_image_ref(ctx, image.id),
                "source_url": page.url if page else None,
                "source_title": page.title if page else None,
                "relevance": judged[i].relevance if i in judged else None,
                "analysis": judged[i].caption if i in judged else None,
            }
        )
    return out, mei_entry(result)


async def reverse_search(
    ctx: ToolContext, call: Call, query_url: str, pixels: PILImage.Image, png: bytes, goal: str, tool: str
) -> tuple[list[dict], dict]:
    matches = await ctx.world.reverse_search(pixels, 5)
    views = [world_image_view(ctx, m.image_id, pixels=True, match_score=m.score) for m in matches]
    query = ImageView(url=query_url, png=png)
    result = await ctx.mei.reverse_image_search(goal=goal, query_image=query, candidates=views, ctx=call.ctx(tool))
    judged = {c.index: c for c in result.evidence.candidates if c.index < len(matches)}
    out = []
    for i, match in enumerate(matches):
        out.append(
            {
                **_image_ref(ctx, match.image_id),
                "score": match.score,
                "method": match.method,
                "match_state": judged[i].match_state if i in judged else "insufficient_evidence",
                "analysis": judged[i].caption if i in judged else None,
                "pages": [{"title": p.title, "url": p.url} for p in ctx.world.carriers(match.image_id)],
            }
        )
    return out, mei_entry(result)
