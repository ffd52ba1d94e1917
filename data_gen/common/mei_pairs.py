"""MEI training pairs from the offline expert's calls: ``mei_sft.jsonl`` in the tool server's MEI log format.

Every MEI call the tool server made for an expert's successful episode becomes one SFT example for a model-backed
MEI (Neos §3.5 trains the MEI on logged calls, Eq. 5): the chat ``messages`` a model-backed MEI would have been sent
for that call, built with :mod:`tool_server.mei.prompts` exactly as :class:`tool_server.mei.client.ModelMEI` builds
them, answered by the evidence the offline (extractive) interface returned for it (the logged ``output``).

Why inputs are rebuilt: the extractive interface logs only a summary of what it was given (goal, query, URLs,
content hashes), not messages. The page and image views are rebuilt from the world with the tool server's own view
builders, and a call is kept only when the summary of the rebuilt inputs equals the logged one, so its messages are
exactly what that call's interface saw. A question image sent by reverse search is found among the episode's
question images by its PNG hash (the server re-encodes decoded pixels, or sends a world image's own file).

Why the target is checked: a pair is kept only if its output passes the checks :mod:`tool_server.mei.client` applies
to a model's answer (the strict schema plus the tool-side check), so the SFT target is an answer the MEI may give.
Records say ``outcome="extractive"``: the target is the extractive interface's answer, not a validated model answer.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from PIL import Image
from pydantic import ValidationError

from tool_server.mei import MEIConfig, prompts
from tool_server.mei.log import MEILog, MEIRecord, image_summary, page_summary
from tool_server.mei.schema import (
    ImageSearchEvidence,
    ImageView,
    MEIContext,
    ReverseImageEvidence,
    WebVisitEvidence,
)
from tool_server.offline.pixels import encode_png, flattened
from tool_server.offline.world import OfflineWorld
from tool_server.tools.base import world_image_view
from tool_server.tools.ops import world_page_view

MAX_PAGE_CHARS: int = MEIConfig.model_fields["max_page_chars"].default  # what a default model-backed MEI is sent
MAX_DIFFERING = 0.03  # share of pixels two images of one entity's picture may differ in (a map's printed name)


@dataclass(frozen=True, slots=True)
class Episode:
    """A successful expert episode (``TrajectoryRecord`` JSON) and the world ids of its question images."""

    trajectory: dict[str, Any]
    question_image_ids: Sequence[str]


class _Skip(Exception):
    """Why a logged call cannot become a pair (its message is the counter's key)."""


class _Rebuilder:
    """Rebuilds a logged call's inputs from the world and the episode's question images. The world is loaded on
    first use: a run whose tool server logged none of the episodes' calls never loads it."""

    def __init__(self, world_of: Callable[[], OfflineWorld]) -> None:
        self._world_of = world_of

    @cached_property
    def world(self) -> OfflineWorld:
        return self._world_of()

    @cached_property
    def _views(self) -> SimpleNamespace:
        return SimpleNamespace(world=self.world)  # the tool server's view builders read only ``ctx.world``

    def image(self, summary: dict[str, Any]) -> ImageView:
        record = self.world.image(summary["url"])
        if record is None:
            raise _Skip("not_world_image")
        return world_image_view(self._views, record.id, pixels=True, match_score=summary["match_score"])

    def question_image(self, summary: dict[str, Any], question_image_ids: Sequence[str]) -> ImageView:
        """The query image: a world image named by URL, or one of the question images, recognised by PNG hash."""
        return self._query(summary, question_image_ids)[1]

    def _query(self, summary: dict[str, Any], question_image_ids: Sequence[str]) -> tuple[str | None, ImageView]:
        """(the entity the query image shows, per the world; the image)."""
        record = self.world.image(summary["url"])
        if record is not None:
            return record.entity_id, self.image(summary)
        for image_id in question_image_ids:
            data = self.world.image_bytes(image_id)
            for png in (data, _reencoded(data)):
                if hashlib.sha256(png).hexdigest() == summary["png_sha256"]:
                    return self.world.world.images[image_id].entity_id, ImageView(url=summary["url"], png=png)
        raise _Skip("query_image_not_found")

    def messages(self, record: MEIRecord, question_image_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The messages a model-backed MEI would have been sent for ``record``, once its output has passed the
        client's checks; raises :class:`_Skip` (or ``ValidationError`` for an output off the schema)."""
        logged, goal = record.input, record.input["goal"]
        if record.method == "web_visit":
            page = self.world.page(logged["page"]["url"])
            if page is None:
                raise _Skip("not_world_page")
            view, _ = world_page_view(self._views, page)
            _same({"goal": goal, "page": page_summary(view)}, logged)
            _passes(prompts.check_web_visit(WebVisitEvidence.model_validate(record.output), view))
            return prompts.web_visit_messages(goal, view, max_page_chars=MAX_PAGE_CHARS)
        candidates = [self.image(c) for c in logged["candidates"]]
        summaries = [image_summary(c) for c in candidates]
        if record.method == "image_search":
            _same({"goal": goal, "query": logged["query"], "candidates": summaries}, logged)
            _passes(prompts.check_candidates(ImageSearchEvidence.model_validate(record.output), len(candidates)))
            return prompts.image_search_messages(goal, logged["query"], candidates)
        if record.method == "reverse_image_search":
            query = self.question_image(logged["query_image"], question_image_ids)
            _same({"goal": goal, "query_image": image_summary(query), "candidates": summaries}, logged)
            _passes(prompts.check_candidates(ReverseImageEvidence.model_validate(record.output), len(candidates)))
            return prompts.reverse_image_messages(goal, query, candidates)
        raise _Skip("unknown_method")

    def reverse_target(self, record: MEIRecord, question_image_ids: Sequence[str]) -> tuple[dict[str, Any], int]:
        """The reverse-search target with ``visual_match`` only on true near-duplicates of the query (the same
        picture, :func:`same_picture`): the backend's score calls any look-alike a match (one flag matched to two
        others), which would teach the MEI to see duplicates that are not there. Others it scored as matches
        become ``partial_match``. Identical pixels are the same picture whoever they belong to (France's flag is
        also Guadeloupe's); pixels that differ a little only for an image of the query's own entity (its map with
        its printed name), since a small island's map differs from its neighbour's in under 1% of the pixels too.
        Returns the target and how many candidates were relabelled."""
        owner, query = self._query(record.input["query_image"], question_image_ids)
        candidates = [self.image(c) for c in record.input["candidates"]]
        output = json.loads(json.dumps(record.output))
        relabelled = 0
        for item in output["candidates"]:
            summary = record.input["candidates"][item["index"]]
            record_ = self.world.image(summary["url"])
            own = owner is not None and record_ is not None and record_.entity_id == owner
            if item["match_state"] == "visual_match" and not same_picture(
                    candidates[item["index"]].png, query.png, MAX_DIFFERING if own else 0.0):
                item["match_state"] = "partial_match"
                relabelled += 1
        return output, relabelled


def same_picture(a: bytes | None, b: bytes | None, max_differing: float = 0.0) -> bool:
    """Two PNGs show the same picture: equal size, and at most ``max_differing`` of their RGB pixels differ (a
    printed label: a country's locator map with and without its name, 1-2% of the pixels; encodings may differ)."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        if x.size != y.size:
            return False
        differing = np.any(np.asarray(flattened(x)) != np.asarray(flattened(y)), axis=-1)
        return float(differing.mean()) <= max_differing


def _reencoded(data: bytes) -> bytes:
    """A question image as the server registers it: decoded to RGB flattened onto white, encoded again
    (``tool_server.offline.pixels``)."""
    with Image.open(io.BytesIO(data)) as im:
        return encode_png(flattened(im))


def _passes(problem: str | None) -> None:
    if problem is not None:
        raise _Skip("check_failed")


def _same(rebuilt: dict[str, Any], logged: dict[str, Any]) -> None:
    if json.loads(json.dumps(rebuilt)) != logged:
        raise _Skip("input_mismatch")


def _context(record: MEIRecord) -> MEIContext:
    try:
        return MEIContext(session_id=record.session_id, turn=record.turn, tool=record.tool)
    except ValidationError:
        raise _Skip("malformed_input") from None


def _call_ids(episodes: Iterable[Episode]) -> Iterable[tuple[str, Episode]]:
    for episode in episodes:
        for turn in episode.trajectory["turns"]:
            for call in turn["calls"]:
                if call["ok"]:
                    for call_id in call["mei_call_ids"]:
                        yield call_id, episode


def export_mei_pairs(
    episodes: Iterable[Episode], tool_log: Path, world_of: Callable[[], OfflineWorld], out: Path
) -> dict[str, int]:
    """Write ``out`` (an :class:`MEILog`, images in its blob store; replaced, not appended to) with one record per
    distinct MEI call of ``episodes`` found in the tool server's log ``tool_log``, inputs rebuilt from the world
    ``world_of()`` returns. Returns ``written``, ``skipped_<reason>`` and ``relabelled_visual_match`` counts (calls
    with equal inputs, e.g. a call repeated through a cached tool result, are one call, counted once)."""
    logged = {r.call_id: r for r in MEILog.read(tool_log).records} if tool_log.exists() else {}
    rebuild = _Rebuilder(world_of)
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    out.unlink(missing_ok=True)
    log = MEILog(out)
    try:
        for call_id, episode in _call_ids(episodes):
            record = logged.get(call_id)
            key = call_id if record is None else json.dumps([record.method, record.input], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            try:
                if record is None:
                    raise _Skip("not_in_tool_log")
                if record.outcome == "error":
                    raise _Skip("error_call")
                ctx = _context(record)
                messages = rebuild.messages(record, episode.question_image_ids)
                output = record.output
                if record.method == "reverse_image_search":
                    output, relabelled = rebuild.reverse_target(record, episode.question_image_ids)
                    counts["relabelled_visual_match"] += relabelled
            except ValidationError:  # the output does not validate against the strict evidence schema
                counts["skipped_schema"] += 1
                continue
            except (KeyError, TypeError):  # a summary without the keys or shapes the tool server writes
                counts["skipped_malformed_input"] += 1
                continue
            except _Skip as skip:
                counts[f"skipped_{skip}"] += 1
                continue
            log.append(ctx=ctx, method=record.method, mei_version=record.mei_version, outcome="extractive",
                       latency_s=record.latency_s, input=record.input, output=output, messages=messages)
            counts["written"] += 1
    finally:
        log.close()
    return {"written": counts.pop("written", 0), **dict(sorted(counts.items()))}


def write_mei_pairs(episodes: Iterable[Episode], world_root: Path, tool_dir: Path, out: Path) -> dict[str, int]:
    """:func:`export_mei_pairs` for a pipeline run: ``out/mei_sft.jsonl`` from the MEI log of the tool server that
    served ``world_root`` with cache directory ``tool_dir`` (its ``mei.jsonl``; its feature cache makes loading the
    world cheap)."""
    loaded: list[OfflineWorld] = []

    def world_of() -> OfflineWorld:
        loaded.append(OfflineWorld.load(world_root, cache_dir=tool_dir))
        return loaded[0]

    try:
        return export_mei_pairs(episodes, tool_dir / "mei.jsonl", world_of, out / "mei_sft.jsonl")
    finally:
        for world in loaded:
            world.close()
