"""Append-only record of every MEI call (Neos §3.5: the co-evolution loop selects MEI SFT data from these).

Format: JSON Lines, one record per line, each written with a single ``os.write`` on a file descriptor opened with
``O_APPEND``. Why not sqlite/WAL: records are written once and never updated, readers are batch jobs that scan the
whole file, and a line-per-record file can be shipped, concatenated and grepped; the append-only fd gives the one
property we need. A process crash can lose at most the record being written and cannot damage earlier ones: the
kernel places each ``O_APPEND`` write at the end of the file atomically with respect to other appenders on a local
file system (not guaranteed on NFS). A power loss can leave a torn last line unless ``fsync_every=1``.

Torn lines: when the writer opens a file whose last byte is not a newline (a previous process died mid-write), it
first appends a newline, so the fragment stays on its own line and the next record is intact. The reader skips any
line that is not a complete JSON record and reports its line number instead of failing or guessing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .schema import ImageView, MEIContext, PageView


class MEIRecord(BaseModel):
    """One MEI call. ``input`` is a summary (goal, URLs, content hashes), not the raw page or pixels."""

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


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[MEIRecord]
    skipped_lines: list[int]  # 1-based line numbers that were torn or not a valid record


class MEILog:
    """Writer. ``fsync_every``: 0 = leave flushing to the OS, 1 = fsync every record, n = every n-th record."""

    def __init__(self, path: str | os.PathLike[str], *, fsync_every: int = 0) -> None:
        if fsync_every < 0:
            raise ValueError(f"fsync_every must be >= 0, got {fsync_every}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync_every = fsync_every
        self._since_sync = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._terminate_torn_tail()

    def _terminate_torn_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                os.write(self._fd, b"\n")

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
        )
        line = json.dumps(record.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")) + "\n"
        data = line.encode()
        written = os.write(self._fd, data)
        if written != len(data):  # regular files do not short-write short of ENOSPC; never leave a silent tear
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self._since_sync += 1
        if self._fsync_every and self._since_sync >= self._fsync_every:
            os.fsync(self._fd)
            self._since_sync = 0
        return record.call_id

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @staticmethod
    def read(path: str | os.PathLike[str]) -> ReadResult:
        records: list[MEIRecord] = []
        skipped: list[int] = []
        with open(path, "rb") as f:
            for n, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    if not raw.endswith(b"\n"):
                        raise ValueError("torn line")
                    records.append(MEIRecord.model_validate(json.loads(raw)))
                except ValueError:  # json.JSONDecodeError and pydantic.ValidationError are ValueErrors
                    skipped.append(n)
        return ReadResult(records, skipped)
