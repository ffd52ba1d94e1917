"""Crash-safe append-only JSON Lines: the mechanics shared by the MEI call log and the MEI SFT buffer.

Each record is one line written with a single ``os.write`` on a descriptor opened with ``O_APPEND``. A process crash
can lose at most the record being written and cannot damage earlier ones: the kernel places each ``O_APPEND`` write
at the end of the file atomically with respect to other appenders on a local file system (not guaranteed on NFS).
A power loss can leave a torn last line unless every record is fsynced (``fsync_every=1``).

Torn lines: a writer that opens a file whose last byte is not a newline (a previous process died mid-write) first
appends a newline, so the fragment stays on its own line and the next record is intact. Readers see such a line as
``value=None`` and decide what to report; nothing is guessed or truncated away.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, *, durable: bool) -> None:
    """Replace ``path`` with ``data`` through a temp file and a rename, so readers never see a partial file;
    ``durable`` also fsyncs the file and its directory, so the new content survives a power loss."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class JsonlAppender:
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

    def append(self, obj: Any) -> None:
        """Write ``obj`` as one JSON line (fsynced per the policy)."""
        data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        written = os.write(self._fd, data)
        if written != len(data):  # regular files do not short-write short of ENOSPC; never leave a silent tear
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self._since_sync += 1
        if self._fsync_every and self._since_sync >= self._fsync_every:
            os.fsync(self._fd)
            self._since_sync = 0

    def size(self) -> int:
        """The file's length in bytes: the offset at which the next record will start."""
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True, slots=True)
class JsonLine:
    number: int  # 1-based, counted from the offset the read started at
    end: int  # byte offset just past this line: where a reader that has consumed it resumes
    value: Any | None  # None: torn (no newline) or not JSON


def iter_jsonl(path: str | os.PathLike[str], *, offset: int = 0) -> Iterator[JsonLine]:
    """Every non-blank line from byte ``offset`` on, parsed; torn or malformed lines come back as ``value=None``."""
    with open(path, "rb") as f:
        f.seek(offset)
        end = offset
        for number, raw in enumerate(f, start=1):
            end += len(raw)
            if not raw.strip():
                continue
            value: Any | None = None
            if raw.endswith(b"\n"):
                try:
                    value = json.loads(raw)
                except ValueError:
                    value = None
            yield JsonLine(number, end, value)
