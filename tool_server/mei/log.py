"""Append-only record of every MEI call (Neos §3.5: the co-evolution loop selects MEI SFT data from these).

Format: JSON Lines through :class:`.jsonl.JsonlAppender` (one ``O_APPEND`` write per record; a crash loses at most the
record being written; torn lines are skipped by the reader and reported by line number). Why not sqlite/WAL: records
are written once and never updated, readers are batch jobs that scan the whole file, and a line-per-record file can be
shipped, concatenated and grepped.

A model-backed call also records the exact chat ``messages`` it sent, so the call can become an MEI SFT example
later (input messages -> the validated JSON answer). Images in them are stored once in a content-addressed
:class:`BlobStore` beside the log (``mei.jsonl`` -> ``mei.blobs/``) and referenced as ``blob:sha256:<hex>`` URLs:
the same candidate images recur across the rollouts of a group, and a log line stays text. A blob is written before
the record that names it, so a record never points at a missing blob after a crash.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .jsonl import JsonlAppender, iter_jsonl, write_atomic
from .schema import ImageView, MEIContext, PageView

DATA_URL_PREFIX = "data:image/png;base64,"
BLOB_URL_PREFIX = "blob:sha256:"


class MEIRecord(BaseModel):
    """One MEI call. ``input`` is a summary (goal, URLs, content hashes); ``messages`` (model-backed calls only) is
    what the model was sent, with images as ``blob:sha256:<hex>`` URLs into the log's :class:`BlobStore`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call_id: str
    ts: float
    session_id: str
    turn: int | None
    tool: str
    method: str
    mei_version: str
    outcome: str
    latency_s: float
    input: dict[str, Any]
    output: dict[str, Any]
    attempts: list[str] = []
    messages: list[dict[str, Any]] | None = None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_summary(image: ImageView) -> dict[str, Any]:
    return {
        "url": image.url,
        "png_sha256": sha256_hex(image.png) if image.png is not None else None,
        "match_score": image.match_score,
    }


def page_summary(page: PageView) -> dict[str, Any]:
    text = page.text.encode()
    return {
        "url": page.url,
        "title": page.title,
        "text_sha256": sha256_hex(text),
        "text_chars": len(page.text),
        "images": [image_summary(i) for i in page.images],
    }


def blobs_dir_of(log_path: str | os.PathLike[str]) -> Path:
    """Where the blobs of a log live: ``runs/mei.jsonl`` -> ``runs/mei.blobs``."""
    path = Path(log_path)
    return path.with_name(path.stem + ".blobs")


class BlobStore:
    """Content-addressed files ``<dir>/<hex[:2]>/<hex>``, each written to a temp file and renamed (never torn)."""

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = False) -> None:
        self.root = Path(root)
        self._durable = durable

    def _path(self, digest: str) -> Path:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a sha256 hex digest: {digest[:80]!r}")
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        path = self._path(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, durable=self._durable)
        return digest

    def get(self, digest: str) -> bytes:
        """The blob's bytes; ``FileNotFoundError`` if absent, ``ValueError`` if its content does not match."""
        data = self._path(digest).read_bytes()
        if sha256_hex(data) != digest:
            raise ValueError(f"blob {digest} is corrupt")
        return data


def _map_image_urls(messages: list[dict[str, Any]], convert) -> list[dict[str, Any]]:
    """``messages`` with every ``image_url`` content part's URL replaced by ``convert(url)``; other parts unchanged."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [
                {**part, "image_url": {**part["image_url"], "url": convert(part["image_url"]["url"])}}
                if isinstance(part, dict) and part.get("type") == "image_url" else part
                for part in content
            ]
            message = {**message, "content": content}
        out.append(message)
    return out


def store_images(messages: list[dict[str, Any]], blobs: BlobStore) -> list[dict[str, Any]]:
    """Messages as logged: inline PNG data URLs moved into ``blobs`` and replaced by ``blob:sha256:<hex>``."""

    def convert(url: str) -> str:
        if not url.startswith(DATA_URL_PREFIX):
            return url
        return BLOB_URL_PREFIX + blobs.put(base64.b64decode(url[len(DATA_URL_PREFIX):], validate=True))

    return _map_image_urls(messages, convert)


def load_images(messages: list[dict[str, Any]], blobs: BlobStore) -> list[dict[str, Any]]:
    """The inverse of :func:`store_images`: logged messages with their PNG data URLs restored, as the model saw them.
    Raises ``FileNotFoundError`` / ``ValueError`` when a named blob is missing or corrupt."""

    def convert(url: str) -> str:
        if not url.startswith(BLOB_URL_PREFIX):
            return url
        return DATA_URL_PREFIX + base64.b64encode(blobs.get(url[len(BLOB_URL_PREFIX):])).decode("ascii")

    return _map_image_urls(messages, convert)


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[MEIRecord]
    skipped_lines: list[int]  # 1-based line numbers that were torn or not a valid record


class MEILog:
    """Writer. ``fsync_every``: 0 = leave flushing to the OS, 1 = fsync every record (and blob), n = every n-th."""

    def __init__(self, path: str | os.PathLike[str], *, fsync_every: int = 0) -> None:
        self._out = JsonlAppender(path, fsync_every=fsync_every)
        self.path = self._out.path
        self.blobs = BlobStore(blobs_dir_of(self.path), durable=fsync_every > 0)

    def append(
        self,
        *,
        ctx: MEIContext,
        method: str,
        mei_version: str,
        outcome: str,
        latency_s: float,
        input: dict[str, Any],
        output: dict[str, Any],
        attempts: list[str] | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> str:
        """Write one record; returns its ``call_id``."""
        record = MEIRecord(
            call_id=uuid.uuid4().hex,
            ts=time.time(),
            session_id=ctx.session_id,
            turn=ctx.turn,
            tool=ctx.tool,
            method=method,
            mei_version=mei_version,
            outcome=outcome,
            latency_s=latency_s,
            input=input,
            output=output,
            attempts=attempts or [],
            messages=store_images(messages, self.blobs) if messages is not None else None,
        )
        self._out.append(record.model_dump(mode="json"))
        return record.call_id

    def close(self) -> None:
        self._out.close()

    @staticmethod
    def read(path: str | os.PathLike[str]) -> ReadResult:
        records: list[MEIRecord] = []
        skipped: list[int] = []
        for line in iter_jsonl(path):
            try:
                if line.value is None:
                    raise ValueError("torn or not JSON")
                records.append(MEIRecord.model_validate(line.value))
            except ValueError:  # pydantic.ValidationError is a ValueError
                skipped.append(line.number)
        return ReadResult(records, skipped)
