"""ModalSearcher's four tools (its §3.3 and Appendix E) on the same backends as Neos' tools, offline or online.

Results name pages and images by resource ids (``page_``/``image_`` + 8 hex of sha256(url)) that later calls
accept in place of URLs (online, ids of web resources are learned from the results, see ``ResourceIds``).
``i2i_search`` takes an image resource id or URL or a register id ``img_N`` and an optional region box (0..1000, as
CropImage); ``read_url`` reads a page as Markdown (or, given a goal, as goal-conditioned evidence) and loads an image
URL into the visual register.
"""

from __future__ import annotations


from tool_server.errors import ToolError
from tool_server.offline.pixels import box_to_pixels, encode_png
from tool_server.offline.world import resource_id
from tool_server.pools import encode_cost, image_cost
from tool_server.tools.base import Call, Observation, ToolContext, clip
from tool_server.tools.ops import (
    is_image_url,
    load_image,
    query_url,
    read_page,
    resolve,
    reverse_search,
    search_images,
    visit_page,
    web_search,
)

MARKDOWN_CHARS = 20_000


def _page_ref(url: str | None) -> str | None:
    return resource_id("page", url) if url else None


async def t2t_search(ctx: ToolContext, call: Call) -> Observation:
    query = call.arguments["query"]
    hits = await web_search(ctx, query, "arguments/query", batch=1)
    records = [{"resource_id": resource_id("page", h["url"]), **h} for h in hits]
    lines = [
        f"{i}. [{r['resource_id']}] {r['title']}\n   URL: {r['url']}\n   {r['snippet']}"
        for i, r in enumerate(records, 1)
    ]
    return Observation("\n".join(lines) or f"No results for {query!r}.", records)


def _image_lines(records: list[dict], judgement: str) -> list[str]:
    lines = []
    for i, r in enumerate(records, 1):
        source = (
            f"\n   page: [{r['page_resource_id']}] {r['page_title']} — {r['page_url']}" if r.get("page_url") else ""
        )
        lines.append(
            f"{i}. [{r['resource_id']}] ({r[judgement]}) {r['analysis'] or r['caption']}\n   URL: {r['url']}{source}"
        )
    return lines


async def t2i_search(ctx: ToolContext, call: Call) -> Observation:
    query = call.arguments["query"]
    candidates, mei = await search_images(ctx, call, query, query, "t2i_search", "arguments/query")
    records = [
        {
            "resource_id": resource_id("image", c["url"]),
            "url": c["url"],
            "caption": c["caption"],
            "alt": c["alt"],
            "relevance": c["relevance"] or "unrated",
            "analysis": c["analysis"],
            "page_resource_id": _page_ref(c["source_url"]),
            "page_title": c["source_title"],
            "page_url": c["source_url"],
        }
        for c in candidates
    ]
    return Observation("\n".join(_image_lines(records, "relevance")) or f"No images for {query!r}.", records, mei=[mei])


async def i2i_search(ctx: ToolContext, call: Call) -> Observation:
    ref, region = call.arguments["image"], call.arguments.get("region")
    if ref.startswith("img_"):
        entry = call.session.register.get(ref, "arguments/image")
        pixels, label, url = entry.image, ref, query_url(entry.source)
    else:
        url = resolve(ctx, ref, "arguments/image")
        _, pixels = await load_image(ctx, url, "arguments/image")
        label = url
    if region is not None:
        try:
            box = box_to_pixels(region, pixels.width, pixels.height)
        except ValueError as e:
            raise ToolError("invalid_arguments", str(e), "arguments/region") from None
        pixels = await ctx.pools.run(image_cost(pixels.width, pixels.height), pixels.crop, box)
        label, url = f"{label} region {region}", None  # a crop is at no URL
    png = await ctx.pools.run(encode_cost(pixels.width, pixels.height), encode_png, pixels)
    candidates, mei = await reverse_search(
        ctx, call, label, (pixels, png, url), "find the source of this image", "i2i_search", "arguments/image"
    )
    records = []
    for c in candidates:
        page = c["pages"][0] if c["pages"] else None
        records.append(
            {
                "resource_id": resource_id("image", c["url"]),
                "url": c["url"],
                "caption": c["caption"],
                "match_state": c["match_state"],
                "score": c["score"],
                "analysis": c["analysis"],
                "page_resource_id": _page_ref(page["url"] if page else None),
                "page_title": page["title"] if page else None,
                "page_url": page["url"] if page else None,
            }
        )
    return Observation(
        "\n".join(_image_lines(records, "match_state")) or "No matching images found.", records, mei=[mei]
    )


async def read_url(ctx: ToolContext, call: Call) -> Observation:
    url = resolve(ctx, call.arguments["url"], "arguments/url")
    goal = call.arguments.get("goal")
    if is_image_url(ctx, url):
        _, pixels = await load_image(ctx, url, "arguments/url")
        async with call.session.lock:
            entry = call.session.register.append(pixels, url)
        record = {
            "url": url,
            "resource_id": resource_id("image", url),
            "output_ref": entry.ref,
            "width": entry.width,
            "height": entry.height,
        }
        return Observation(
            f"Image {record['resource_id']} loaded as {entry.ref} ({entry.width}x{entry.height}).",
            [record],
            images=[entry],
        )
    page = await read_page(ctx, url, "arguments/url")
    view, _ = page
    images = [
        {"resource_id": resource_id("image", im.url), "url": im.url, "alt": im.alt, "caption": im.caption}
        for im in view.images
    ]
    image_lines = [f"- [{im['resource_id']}] {im['caption'] or im['alt']} ({im['url']})" for im in images]
    if goal:
        record, mei = await visit_page(ctx, call, page, goal, "read_url")
        record = {**record, "resource_id": resource_id("page", url), "images": images}
        text = [f"# {view.title}", f"Evidence: {record['evidence'] or '(none for this goal)'}"]
        if record["summary"]:
            text.append(f"Summary: {record['summary']}")
        return Observation("\n".join(text + (["## Images", *image_lines] if image_lines else [])), [record], mei=[mei])
    markdown = f"# {view.title}\n\n{clip(view.text, MARKDOWN_CHARS)}"
    if image_lines:
        markdown += "\n\n## Images\n" + "\n".join(image_lines)
    record = {
        "url": url,
        "resource_id": resource_id("page", url),
        "title": view.title,
        "markdown": markdown,
        "images": images,
    }
    return Observation(markdown, [record])


HANDLERS = {"t2t_search": t2t_search, "t2i_search": t2i_search, "i2i_search": i2i_search, "read_url": read_url}
CACHED = frozenset({"t2t_search", "t2i_search", "i2i_search", "read_url"})
