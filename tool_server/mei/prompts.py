"""Chat messages for a model-backed MEI, and the checks its answers must pass beyond the JSON schema.

The wording is ours; the rules and the exact output keys are those of the paper's MEI prompts (Neos Figs 15-17):
WebVisit answers ``rational, evidence, summary, relevant_images[{alt, url, caption}]`` from text plus page-image
references (no pixels); ImageSearch and ReverseImageSearch answer ``rational, candidates[{index, ...}]`` from attached
pixels, metadata being a hint only; for ReverseImageSearch the first attached image is the query. Images travel as
``data:image/png;base64`` URLs in OpenAI-style content parts, which vLLM and SGLang accept.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .schema import ImageSearchEvidence, ImageView, PageView, ReverseImageEvidence, WebVisitEvidence

Messages = list[dict[str, Any]]

_JSON_ONLY = "Reply with a single JSON object and nothing else: no Markdown fences, no commentary."

WEB_VISIT_SYSTEM = (
    "You read web pages on behalf of a research agent and pull out what serves its current goal. "
    f"{_JSON_ONLY} Leave out menus, sidebars, cookie notices, footers and advertising."
)
IMAGE_SEARCH_SYSTEM = (
    "You judge image-search candidates against a visual goal by looking at their pixels; titles and captions only "
    f"tell you where to look. {_JSON_ONLY}"
)
REVERSE_SYSTEM = f"You compare a query image with reverse-search candidates by what is visible in them. {_JSON_ONLY}"


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _meta(images: list[ImageView]) -> str:
    rows = [
        {"index": i, "url": im.url, "caption": im.caption, "alt": im.alt, "source_page_url": im.source_page_url,
         "pixels_attached": im.png is not None}
        for i, im in enumerate(images)
    ]
    return json.dumps(rows, ensure_ascii=False)


def _with_images(text: str, images: list[ImageView]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": _data_url(im.png)}} for im in images if im.png is not None]
    return parts


def web_visit_messages(goal: str, page: PageView, *, max_page_chars: int) -> Messages:
    refs = json.dumps([{"url": im.url, "alt": im.alt, "caption": im.caption} for im in page.images], ensure_ascii=False)
    user = (
        "Work through the page for the goal below.\n"
        "1. Find the passages, tables, names, dates, figures and claims that bear on the goal, and say in a sentence "
        "why the page is (or is not) relevant.\n"
        "2. Copy the strongest supporting content from the main body, keeping its qualifications and attributions.\n"
        "3. State how that content answers or advances the goal, adding nothing the page does not support.\n"
        "4. Keep only those page images that could help verify or answer the goal, each with its alt text, its url "
        "exactly as listed, and a short caption.\n"
        "If the page holds no direct evidence, give an empty evidence string and an empty image list.\n"
        'Use exactly the keys "rational", "evidence", "summary" and "relevant_images" (a list of objects with keys '
        '"alt", "url", "caption"); no other keys.\n\n'
        f"Goal: {goal}\n\nPage title: {page.title}\nPage URL: {page.url}\nPage text:\n{page.text[:max_page_chars]}\n\n"
        f"Page images: {refs}"
    )
    return [{"role": "system", "content": WEB_VISIT_SYSTEM}, {"role": "user", "content": user}]


def image_search_messages(goal: str, query: str, candidates: list[ImageView]) -> Messages:
    user = (
        "Rank the candidate images against the visual goal. For every candidate give a relevance of high, medium, low "
        "or none and a short caption of what its pixels show. Metadata may guide you but does not prove what an "
        "image shows. The attached images are the candidates with pixels, in index order.\n"
        'Answer exactly as {"rational": string, "candidates": [{"index": integer, "relevance": '
        '"high"|"medium"|"low"|"none", "caption": string}]} using the candidate indices below.\n\n'
        f"Search query: {query}\nVisual goal: {goal}\nCandidates: {_meta(candidates)}"
    )
    return [{"role": "system", "content": IMAGE_SEARCH_SYSTEM},
            {"role": "user", "content": _with_images(user, candidates)}]


def reverse_image_messages(goal: str, query_image: ImageView, candidates: list[ImageView]) -> Messages:
    user = (
        "The first attached image is the query. The images after it are reverse-search candidates, in index order "
        "(only those with pixels attached). Compare what is visible against the goal and give each candidate a "
        "match_state of visual_match, partial_match, not_match or insufficient_evidence, with a short caption.\n"
        'Answer exactly as {"rational": string, "candidates": [{"index": integer, "match_state": '
        '"visual_match"|"partial_match"|"not_match"|"insufficient_evidence", "caption": string}]} using the '
        "candidate indices below.\n\n"
        f"Goal: {goal}\nQuery image: {_meta([query_image])}\nCandidates: {_meta(candidates)}"
    )
    return [{"role": "system", "content": REVERSE_SYSTEM},
            {"role": "user", "content": _with_images(user, [query_image, *candidates])}]


def check_web_visit(ev: WebVisitEvidence, page: PageView) -> str | None:
    """A reason the answer is unusable beyond its schema (e.g. an image URL the page does not have), else None."""
    known = {im.url for im in page.images}
    unknown = [im.url for im in ev.relevant_images if im.url not in known]
    if unknown:
        return f"relevant_images names URLs not on the page: {unknown[:3]}"
    if len(ev.relevant_images) > 15:
        return f"{len(ev.relevant_images)} relevant_images, at most 15"
    return None


def check_candidates(ev: ImageSearchEvidence | ReverseImageEvidence, n: int) -> str | None:
    indices = [c.index for c in ev.candidates]
    if any(i >= n for i in indices):
        return f"candidate index out of range 0..{n - 1}: {indices}"
    if len(set(indices)) != len(indices):
        return f"duplicate candidate indices: {indices}"
    return None
