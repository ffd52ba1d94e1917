"""Append-only, crash-safe results: one JSON line per processed unit of work, flushed and fsynced as it is written.

On open, a torn last line (a crash mid-write) is cut off and the keys already present form the done-set, so a
restart redoes exactly the unfinished work: nothing lost, nothing written twice. Records with status ``error``
(infrastructure failures) are not added to the done-set, so they are retried. Generic over the pipeline's record
model (a pydantic model with ``key`` and ``status``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from pydantic import ValidationError

logger = logging.getLogger(__name__)


class _Record(Protocol):
    key: str
    status: str

    def model_dump(self, *, mode: str) -> dict: ...


R = TypeVar("R", bound=_Record)


class ResultLogError(ValueError):
    """A complete line of a results log that is not a record (cut in the middle, edited by hand); the message is
    one line, ``path:line: why``."""


def read_records(path: Path, record_type: type[R]) -> Iterator[R]:
    """Every record of the log at ``path``, without opening it for writing; a torn last line (no newline: a crash
    mid-write, which :class:`ResultLog` cuts off on open) is skipped, any other bad line raises
    :class:`ResultLogError`."""
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            if not line.endswith(b"\n"):
                logger.warning("%s:%d: a line cut mid-write (a crash while writing) is skipped", path, number)
                continue
            try:
                yield record_type.model_validate_json(line)
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ResultLogError(
                    f"{path}:{number}: not a valid result record ({where + ': ' if where else ''}"
                    f"{first['msg']}); delete that line and rerun to redo its work"
                ) from None


def latest_per_key(records: Iterator[R]) -> list[R]:
    """The latest record per key (an error later retried successfully counts once, as the retry)."""
    latest: dict[str, R] = {}
    for record in records:
        latest[record.key] = record
    return list(latest.values())


class ResultLog(Generic[R]):
    """``record_type`` parses each line back (``model_validate_json``); opening a log with a bad complete line raises
    :class:`ResultLogError` before anything is appended."""

    def __init__(self, path: Path, record_type: type[R]) -> None:
        self.path = path
        self.record_type = record_type
        path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        self.statuses: dict[str, str] = {}  # key -> status of its latest record
        if path.exists():
            self._repair()
            for record in self.read():
                self.statuses[record.key] = record.status
            self.done = {key for key, status in self.statuses.items() if status != "error"}
        self._fh = path.open("a", encoding="utf-8")

    def _repair(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            line = data.count(b"\n") + 1
            logger.warning("%s:%d: a line cut mid-write (a crash while writing) is dropped; that work is redone",
                           self.path, line)
            with self.path.open("r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def read(self) -> Iterator[R]:
        """Every record in file order (:func:`read_records`)."""
        return read_records(self.path, self.record_type)

    def outcomes(self) -> list[R]:
        """The latest record per key (see :func:`latest_per_key`)."""
        return latest_per_key(self.read())

    def append(self, record: R) -> None:
        if record.key in self.done:
            raise ValueError(f"{record.key} is already recorded")
        self._fh.write(json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.statuses[record.key] = record.status
        if record.status != "error":
            self.done.add(record.key)

    def close(self) -> None:
        self._fh.close()
