"""Neos' six tools (its Table 9, Figs 11-13) over the offline world.

Multi-item tools answer per item: one unreachable URL gives an error record for that item, not a failed call.
Arguments that can never work (an unknown img_N, an inverted box, more than ten boxes) fail the whole call with
a structured error before anything is added to the register, so a failed call leaves the register unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tool_server.errors import ToolError
from tool_server.offline.pixels import box_to_pixels, encode_png
from tool_server.pools import encode_cost, image_cost
from tool_server.protocol import MAX_BOXES_TOTAL
from tool_server.sessions import pixel_bytes
from tool_server.tools.base import Call, Observation, ToolContext, item_error
from tool_server.tools.ops import (
    load_image,
    query_url,
    read_page,
    reverse_search,
    search_images,
    visit_page,
    web_search,
)


def _err_line(err: dict[str, str]) -> str:
    return f"Error ({err['type']}): {err['message']}"


async def text_search(ctx: ToolContext, call: Call) -> Observation:
    records, lines = [], []
    queries = call.arguments["query"]
    for n, query in enumerate(queries, 1):
        results = await web_search(ctx, query, f"arguments/query/{n - 1}", batch=len(queries))
        records.append({"query": query, "results": results})
        lines.append(f"## Query {n}: {query}")
        lines += [f"{i}. {r['title']} — {r['url']}\n   {r['snippet']}" for i, r in enumerate(results, 1)] or [
            "(no results)"
        ]
    return Observation("\n".join(lines), records)


async def web_visit(ctx: ToolContext, call: Call) -> Observation:
    goal = call.arguments["goal"]

    async def one(i: int, url: str) -> tuple[dict[str, Any], dict | None]:
        try:
            page = await read_page(ctx, url, f"arguments/url/{i}")
        except ToolError as e:
            return {"url": url, "error": item_error(e.type, e.message)}, None
        return await visit_page(ctx, call, page, goal, "WebVisit")

    done = await asyncio.gather(*(one(i, u) for i, u in enumerate(call.arguments["url"])))
    lines = []
    for record, _ in done:
        lines.append(f"## {record['url']}")
        if "error" in record:
            lines.append(_err_line(record["error"]))
            continue
        lines.append(f"Title: {record['title']}")
        lines.append(f"Evidence: {record['evidence'] or '(none for this goal)'}")
        if record["summary"]:
            lines.append(f"Summary: {record['summary']}")
        if record["relevant_images"]:
            lines.append("Relevant images (use FetchImage to see one):")
            lines += [f"- {im['url']} — {im['caption'] or im['alt']}" for im in record["relevant_images"]]
    return Observation("\n".join(lines), [r for r, _ in done], mei=[m for _, m in done if m])


async def image_search(ctx: ToolContext, call: Call) -> Observation:
    goal = call.arguments["goal"]
    done = await asyncio.gather(
        *(
            search_images(ctx, call, q, goal, "ImageSearch", f"arguments/query/{n}")
            for n, q in enumerate(call.arguments["query"])
        )
    )
    records, lines = [], []
    for n, (query, (candidates, _)) in enumerate(zip(call.arguments["query"], done), 1):
        records.append({"query": query, "candidates": candidates})
        lines.append(f"## Query {n}: {query}")
        for i, c in enumerate(candidates, 1):
            lines.append(
                f"{i}. [{c['relevance'] or 'unrated'}] {c['url']} — {c['analysis'] or c['caption']}"
                + (f"\n   source: {c['source_title']} — {c['source_url']}" if c["source_url"] else "")
            )
        if not candidates:
            lines.append("(no images found)")
    return Observation("\n".join(lines), records, mei=[m for _, m in done])


async def reverse_image_search(ctx: ToolContext, call: Call) -> Observation:
    args = call.arguments
    tokens = [
        call.session.register.get(t, f"arguments/image_token/{i}") for i, t in enumerate(args.get("image_token", []))
    ]
    queries: list[tuple[str, Any]] = [(e.ref, e) for e in tokens] + [(u, None) for u in args.get("image_url", [])]

    async def one(i: int, label: str, entry) -> tuple[dict[str, Any], dict | None]:
        field = f"arguments/image_token/{i}" if entry is not None else f"arguments/image_url/{i - len(tokens)}"
        try:
            if entry is not None:
                png = await ctx.pools.run(encode_cost(entry.width, entry.height), entry.png)
                image = (entry.image, png, query_url(entry.source))
            else:
                image_id, pixels = await load_image(ctx, label, field)
                png = ctx.world.image_bytes(image_id) if image_id else await ctx.pools.run(
                    encode_cost(pixels.width, pixels.height), encode_png, pixels
                )
                image = (pixels, png, label)
            candidates, mei = await reverse_search(ctx, call, label, image, args["goal"], "ReverseImageSearch", field)
        except ToolError as e:
            return {"query": label, "error": item_error(e.type, e.message)}, None
        return {"query": label, "candidates": candidates}, mei

    done = await asyncio.gather(*(one(i, label, entry) for i, (label, entry) in enumerate(queries)))
    lines = []
    for record, _ in done:
        lines.append(f"## Reverse search: {record['query']}")
        if "error" in record:
            lines.append(_err_line(record["error"]))
            continue
        for i, c in enumerate(record["candidates"], 1):
            pages = "; ".join(f"{p['title']} — {p['url']}" for p in c["pages"]) or "no page"
            lines.append(
                f"{i}. [{c['match_state']}] {c['url']} — {c['analysis'] or c['caption']}\n   found on: {pages}"
            )
        if not record["candidates"]:
            lines.append("(no matching images found)")
    return Observation("\n".join(lines), [r for r, _ in done], mei=[m for _, m in done if m])


async def fetch_image(ctx: ToolContext, call: Call) -> Observation:
    urls = call.arguments["urls"]
    register = call.session.register
    held: dict[int, int] = {}  # bytes of decoded images taken from the budgets and not yet in the register

    async def load(i: int, url: str):
        try:
            pixels = (await load_image(ctx, url, f"arguments/urls/{i}"))[1]
            # charged to the session's and the server's budgets as soon as decoded, not once every item is: a call
            # holds at most its decoding images outside them (the session's or server's image memory, else an error)
            register.reserve(0, nbytes := pixel_bytes(pixels.width, pixels.height))
            held[i] = nbytes
            return pixels
        except ToolError as e:
            return e

    records, images, lines = [], [], []
    try:
        loaded = await asyncio.gather(*(load(i, u) for i, u in enumerate(urls)))
        async with call.session.lock:
            for i, (url, result) in enumerate(zip(urls, loaded)):
                if not isinstance(result, ToolError) and register.room() < 1:
                    result = ToolError("register_full", "1 image to add but the visual register has room for 0")
                if isinstance(result, ToolError):
                    records.append({"url": url, "error": item_error(result.type, result.message)})
                    lines.append(f"{url}: {_err_line(records[-1]['error'])}")
                    continue
                entry = register.append_reserved(result, url)
                del held[i]
                images.append(entry)
                records.append({"url": url, "output_ref": entry.ref, "width": entry.width, "height": entry.height})
                lines.append(f"{url}: loaded as {entry.ref} ({entry.width}x{entry.height})")
    finally:  # a full register, or the call cancelled: the bytes of images not appended go back
        if held:
            register.release(sum(held.values()))
    return Observation("\n".join(lines), records, images=images)


def _boxes(value: list) -> list[list[float]]:
    return [value] if value and not isinstance(value[0], list) else value


async def crop_image(ctx: ToolContext, call: Call) -> Observation:
    config: dict[str, list] = call.arguments["crop_config"]
    register = call.session.register
    plan = []
    for ref, value in config.items():
        entry = register.get(ref, f"arguments/crop_config/{ref}")
        boxes = _boxes(value)
        for j, box in enumerate(boxes):
            field = f"arguments/crop_config/{ref}" + (
                f"/{j}" if boxes is value else ""
            )  # a list of boxes: name the box
            try:
                plan.append((entry, box, box_to_pixels(box, entry.width, entry.height)))
            except ValueError as e:
                raise ToolError("invalid_arguments", str(e), field) from None
    if len(plan) > MAX_BOXES_TOTAL:
        raise ToolError(
            "invalid_arguments",
            f"{len(plan)} boxes requested; at most {MAX_BOXES_TOTAL} in total",
            "arguments/crop_config",
        )
    nbytes = sum(pixel_bytes(px[2] - px[0], px[3] - px[1]) for _, _, px in plan)
    register.reserve(len(plan), nbytes)  # before the crops take the memory (they were made first, outside it)
    try:
        cost = image_cost(max((e.width * e.height for e, _, _ in plan), default=0), 1)  # a crop reads its source
        crops = await ctx.pools.run(cost, lambda: [entry.image.crop(px) for entry, _, px in plan])
    except BaseException:
        register.release(nbytes)
        raise
    records, images, lines = [], [], []
    async with call.session.lock:
        if register.room() < len(plan):  # another call of the session appended meanwhile
            register.release(nbytes)
            raise ToolError("register_full", f"{len(plan)} images to add but the visual register has room for "
                            f"{register.room()}")
        for (entry, box, px), pixels in zip(plan, crops):
            crop = register.append_reserved(pixels, f"{entry.ref}{box}")
            images.append(crop)
            records.append(
                {
                    "source": entry.ref,
                    "box": box,
                    "pixel_box": list(px),
                    "output_ref": crop.ref,
                    "width": crop.width,
                    "height": crop.height,
                }
            )
            lines.append(f"{entry.ref} {box}: cropped as {crop.ref} ({crop.width}x{crop.height})")
    return Observation("\n".join(lines), records, images=images)


HANDLERS = {
    "TextSearch": text_search,
    "WebVisit": web_visit,
    "ImageSearch": image_search,
    "ReverseImageSearch": reverse_image_search,
    "FetchImage": fetch_image,
    "CropImage": crop_image,
}
CACHED = frozenset({"TextSearch", "WebVisit", "ImageSearch", "ReverseImageSearch"})
# Tools whose result is the MEI's evidence: their cache entries are per MEI version (a new checkpoint answers afresh).
MEI_BACKED = frozenset({"WebVisit", "ImageSearch", "ReverseImageSearch"})
